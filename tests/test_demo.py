from __future__ import annotations

import re
import stat

import pytest
from django.core.management import call_command

from dashboard.apps import startup_wanted
from dashboard.console.console_admin import ensure_admin, password_file
from dashboard.runs import demo, demo_data
from dashboard.runs import runner as runner_module
from dashboard.runs.models import CompressEvent, RunRecord, TuningProfile
from dashboard.runs.worker import Worker
from scroll_core.kernel import KernelConfig, KernelManager
from scroll_core.prompts import ABSTENTION


def test_the_logs_are_the_same_every_time_and_tell_the_story():
    assert demo_data.service_logs("payments-api", "13:30", "14:10") == demo_data.service_logs(
        "payments-api", "13:30", "14:10"
    )
    spike = "\n".join(demo_data.service_logs("payments-api", "13:50", "14:30"))
    assert "PoolTimeoutError" in spike and "size=8" in spike
    morning = "\n".join(demo_data.service_logs("payments-api", "09:00", "10:00"))
    assert "PoolTimeoutError" not in morning
    assert demo_data.config_changes()[0].startswith("2024-03-12T09:14Z CFG-2291 by dana.k")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("billing", "09:00", "10:00"), "unknown service"),
        (("payments-api", "10:00", "09:00"), "start must be before end"),
        (("payments-api", "9am", "10:00"), "HH:MM"),
    ],
)
def test_bad_log_requests_get_a_clear_error(args, words):
    with pytest.raises(ValueError, match=words):
        demo_data.service_logs(*args)


def test_the_task_text_splits_back_into_the_turns():
    assert runner_module.split_task(demo.task_text()) == list(demo.TURNS)


def test_the_seeded_demo_profile_has_the_demos_knobs(db):
    # The seed migrations write the knobs by hand; demo_profile() makes a missing one from
    # DEMO_KNOBS. Both must give the demo that folds.
    seeded = TuningProfile.objects.get(name=demo.DEMO_PROFILE)
    assert {knob: getattr(seeded, knob) for knob in demo.DEMO_KNOBS} == demo.DEMO_KNOBS
    assert demo.demo_profile() == seeded


@pytest.mark.django_db(transaction=True)
def test_the_demo_folds_and_evicts_early_and_recalls_evicted_facts(console_log, monkeypatch, ring):
    kernels = KernelManager(KernelConfig(sandbox="process"), pool_size=0)
    # scroll_demo runs the demo on this process's worker: one with process-tier kernels.
    monkeypatch.setattr(runner_module, "_embedded", Worker(slots=1, kernels=kernels).start())

    call_command("scroll_demo")

    run = RunRecord.objects.get(kind="demo")
    assert run.status == RunRecord.DONE
    assert run.turns == len(demo.TURNS)
    assert run.context_size == 6000
    assert run.evictions >= 3
    assert run.expands >= len(demo.RECALL_QUESTIONS)
    compresses = CompressEvent.objects.filter(run=run).order_by("id")
    first_eviction = compresses.filter(action="evict").first()
    # Within the first few turns, i.e. the first minute (the README's promise), for both.
    assert first_eviction.turn <= 4
    assert run.folds >= 3
    first_fold = compresses.filter(folds__gt=0).first()
    assert first_fold.turn <= 4
    # Folds come with an eviction, in the one rewrite of the view it makes (issue 37).
    assert compresses.filter(action="evict", folds__gt=0).exists()
    assert len(ring.records("scroll.fold", session_id=run.session_id)) >= 3
    answers = [
        e.content
        for e in console_log.session_events(run.session_id, limit=None)
        if e.kind == "model_turn" and not e.name and "status: answered from" in (e.headline or "")
    ]
    # Each recall question is answered from events evicted long before it was asked.
    assert len(answers) == len(demo.RECALL_QUESTIONS)
    assert "CFG-2291" in answers[0] and "dana.k" in answers[0]
    assert "v2.41.0" in answers[1]
    assert "PoolTimeoutError" in answers[2] and "size=8" in answers[2]


# The evidence lines a recall program prints: "[seq] date who: text", marked * + or -.
EVIDENCE_SEQ = re.compile(r"^[*+-]\[(\d+)\] ", re.MULTILINE)


@pytest.mark.django_db(transaction=True)
def test_the_demo_started_three_times_recalls_only_its_own_session_each_time(
    console_log, monkeypatch
):
    """What `make run` does three times in a row against one Event Log: each start is its own
    agent, so each recalls its own incident and never an earlier demo's."""
    kernels = KernelManager(KernelConfig(sandbox="process"), pool_size=0)
    worker = Worker(slots=1, kernels=kernels, poll_s=0.05).start()
    try:
        _start_three_demos(console_log)
    finally:
        worker.shutdown()


def _start_three_demos(console_log):
    agents = set()
    for start in range(3):
        run = runner_module.wait_for_run(demo.start_demo(pause_s=0).session_id, 300)
        assert run.status == RunRecord.DONE, (start, run.error)
        assert run.agent_id.startswith("demo-") and run.agent_id not in agents
        agents.add(run.agent_id)

        events = console_log.session_events(run.session_id, limit=None)
        own = {e.seq for e in events}
        assert {e.agent_id for e in events} == {run.agent_id}
        questions = [e.seq for e in events if e.content in demo.RECALL_QUESTIONS]
        assert len(questions) == len(demo.RECALL_QUESTIONS)
        recalled = [
            int(seq)
            for e in events
            if e.kind == "tool_result" and e.seq > questions[0]
            for seq in EVIDENCE_SEQ.findall(e.content)
        ]
        # The recall programs found evidence, all of it from this start's own session ...
        assert recalled, f"start {start}: the recall programs printed no evidence"
        assert set(recalled) <= own, f"start {start} read {sorted(set(recalled) - own)}"
        # ... and every recall question is answered from it, none abstained.
        answers = [
            e.content
            for e in events
            if e.kind == "model_turn" and not e.name and e.seq > questions[0]
            and "status: answered from" in (e.headline or "")
        ]  # fmt: skip
        assert len(answers) == len(demo.RECALL_QUESTIONS), start
        assert not any(a.startswith(ABSTENTION) for a in answers), start
        assert "CFG-2291" in answers[0] and "v2.41.0" in answers[1]
        assert "size=8" in answers[2]


@pytest.mark.parametrize(
    ("argv", "env", "wanted"),
    [
        (["manage.py", "migrate"], {}, False),
        (["manage.py", "runserver"], {}, False),  # the autoreloader's watcher
        (["manage.py", "runserver"], {"RUN_MAIN": "true"}, True),
        (["manage.py", "runserver", "--noreload"], {}, True),
        (["/venv/bin/daphne", "dashboard.asgi:application"], {}, True),
        (["pytest"], {}, False),
        (["manage.py", "migrate"], {"SCROLL_STARTUP": "1"}, True),
        (["manage.py", "runserver", "--noreload"], {"SCROLL_STARTUP": "0"}, False),
    ],
)
def test_only_a_serving_process_starts_the_console(monkeypatch, argv, env, wanted):
    monkeypatch.delenv("RUN_MAIN", raising=False)
    monkeypatch.delenv("SCROLL_STARTUP", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)

    assert startup_wanted(argv) is wanted


@pytest.mark.django_db
def test_the_first_admin_gets_a_generated_password_kept_private(settings, tmp_path, capsys):
    settings.SCROLL_DATA_DIR = tmp_path

    first = ensure_admin(announce=True)
    second = ensure_admin(announce=True)

    assert first and len(first) >= 20 and second is None
    assert password_file().read_text().strip() == first
    assert stat.S_IMODE(password_file().stat().st_mode) == 0o600
    out = capsys.readouterr().out
    assert out.count(first) == 1
    assert str(password_file()) in out

    from django.contrib.auth import authenticate

    assert authenticate(username="admin", password=first) is not None


@pytest.mark.django_db
def test_two_admins_never_share_a_password(settings, tmp_path, django_user_model):
    settings.SCROLL_DATA_DIR = tmp_path
    one = ensure_admin()
    django_user_model.objects.all().delete()
    assert ensure_admin() != one
