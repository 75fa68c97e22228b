"""`manage.py scroll_replay`: a console run replayed from its compress rows, and bad input."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from dashboard.runs.models import CompressEvent, RunRecord, TuningProfile
from scroll_core.agent import Session
from scroll_core.kernel import Kernel, KernelConfig
from scroll_core.models import PolicyModel
from scroll_core.store import KIND_CONTEXT_MSG

S = "replay-cmd"
pytestmark = pytest.mark.django_db


@pytest.fixture
def recorded_run(console_log):
    """A run of the policy model under a 4k profile, its compresses saved as the runner
    saves them."""
    row = TuningProfile.objects.create(
        name="tight4k", context_size=4096, protected_recent_tool_results=1
    )
    run = RunRecord.objects.create(session_id=S, task="questions", profile=row, model_name="policy")
    for turn in range(90):
        text = "My cat Pepper naps on the piano." if turn == 5 else f"Day {turn}: a quiet walk."
        console_log.append(
            session_id=S,
            kind=KIND_CONTEXT_MSG,
            role="user",
            name="Ann",
            content=text,
            created_at=f"2023-06-01T10:{turn % 60:02d}:00Z",
        )

    def save(step):
        for item in step.compressions:
            CompressEvent.from_step(run, S, step.turn, step.step, item, None).save()

    with (
        Kernel(KernelConfig(sandbox="process")) as kernel,
        Session(
            console_log,
            PolicyModel(context_size=4096),
            session_id=S,
            profile=row.to_core(),
            kernel=kernel,
            on_step=save,
        ) as agent,
    ):
        for question in (
            "What is Ann's cat called?",
            "Where does Pepper nap?",
            "What did Ann do on day 40?",
            "Does Ann play the piano?",
        ):
            assert agent.ask(question).ok
    return run


def _replay(*args):
    out = StringIO()
    call_command("scroll_replay", *args, stdout=out)
    return out.getvalue()


def test_it_reproduces_the_run_and_replays_a_tighter_trigger(recorded_run):
    report = json.loads(_replay(S, "--json", "--set", "trigger_ratio=0.6", "--per-call"))
    assert report["source"] == "compress_records" and report["exact_inputs"]
    assert report["recorded_profile_name"] == "tight4k"
    assert report["reproduction"]["exact"], report["reproduction"]["mismatches"]
    assert report["reproduction"]["checked"] == CompressEvent.objects.filter(session_id=S).count()
    assert report["changes"] == {"trigger_ratio": "0.6"}
    assert report["replay"]["profile"]["trigger_ratio"] == 0.6
    assert report["replay"]["profile"]["context_size"] == 4096
    assert report["replay"]["evictions"] >= report["recorded"]["evictions"]
    assert len(report["replay"]["per_call"]) == len(report["recorded"]["per_call"]) >= 8


def test_policies_and_profiles_by_name(recorded_run):
    none = json.loads(_replay(S, "--json", "--policy", "none"))
    assert none["replay"]["overflow"] is not None and none["replay"]["evictions"] == 0
    lossy = json.loads(_replay(S, "--json", "--policy", "summarise"))
    assert lossy["replay"]["summaries"] >= 1
    by_name = json.loads(_replay(S, "--json", "--profile", "default"))
    assert by_name["replay"]["profile"]["context_size"] == TuningProfile.get_default().context_size
    text = _replay(S)
    assert "billed_prompt_tokens" in text and "recorded compresses reproduced: True" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "trigger_rato=0.7"], "trigger_rato: unknown profile setting"),
        (["--set", "trigger_ratio=1.7"], "trigger_ratio must be in"),
        (["--set", "print_cap=lots"], "print_cap must be a number"),
        (["--set", "tier_cap=2.5"], "tier_cap must be an integer"),
        (["--set", "trigger_ratio"], "KEY=VALUE"),
        (["--set", "reserve_ratio=0.85"], "protected tail"),
        (["--profile", "no-such-profile"], "no tuning profile named 'no-such-profile'"),
        (["--policy", "magic"], "invalid choice"),
    ],
)
def test_bad_input_is_a_clear_error(recorded_run, args, message):
    with pytest.raises(CommandError, match=message):
        _replay(S, "--json", *args)


def test_an_unknown_session_is_refused(console_log):
    with pytest.raises(CommandError, match="no session 'nope'"):
        _replay("nope")


# ---------------------------------------------------------------------- the replay lab page
@pytest.fixture
def staff_client(client, django_user_model):
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user("op", password="pw-for-tests-only")
    user.groups.add(Group.objects.get(name="Operators"))  # saving a profile needs the permission
    client.force_login(user)
    return client


def test_the_lab_needs_a_login(client, console_log):
    response = client.get("/replay/")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_the_lab_shows_the_run_and_the_replay_side_by_side(recorded_run, staff_client):
    response = staff_client.get("/replay/", {"session": S, "trigger_ratio": "0.6"})
    assert response.status_code == 200
    page = response.content.decode()
    assert "Reproduced the recorded run: <strong>yes</strong>" in page
    assert 'id="replay-budget"' in page and "billed prompt tokens" in page
    # Knobs carry labels an operator reads, and the chart's axes have titles.
    assert "Compress at (share of C)" in page and ">trigger_ratio <" not in page
    budget = response.context["budget"]["layout"]
    assert budget["xaxis"]["title"]["text"] == "model call"
    assert budget["yaxis"]["title"]["text"] == "tokens"
    report = response.context["report"]
    assert report["replay"]["profile"]["trigger_ratio"] == 0.6
    assert report["replay"]["evictions"] >= report["recorded"]["evictions"]


def test_the_lab_refuses_bad_knobs_and_saves_good_ones(recorded_run, staff_client):
    bad = staff_client.get("/replay/", {"session": S, "trigger_ratio": "3"})
    assert bad.status_code == 400 and "trigger_ratio must be in" in bad.content.decode()
    knobs = {**TuningProfile.objects.get(name="tight4k").knobs(), "trigger_ratio": "0.6"}
    saved = staff_client.post("/replay/", {"session": S, "save": "1", "name": "tight-lab", **knobs})
    assert saved.status_code == 302
    row = TuningProfile.objects.get(name="tight-lab")
    assert row.trigger_ratio == 0.6 and row.context_size == 4096
    again = staff_client.post("/replay/", {"session": S, "save": "1", "name": "tight-lab", **knobs})
    assert again.status_code == 400 and "name" in again.content.decode()
    assert TuningProfile.objects.filter(name="tight-lab").count() == 1


def test_the_evictions_table_pairs_both_sides_per_compress(recorded_run, staff_client):
    response = staff_client.get("/replay/", {"session": S, "trigger_ratio": "0.6"})
    rows = response.context["evictions"]
    assert rows, "a tighter trigger evicts"
    report = response.context["report"]
    for row in rows:
        assert row["recorded"] == report["recorded"]["compresses"][row["i"]]
        assert row["replay"] == report["replay"]["compresses"][row["i"]]
        assert row["recorded"]["turn"] == row["replay"]["turn"] == row["turn"]


def test_a_profile_edited_after_the_run_still_reproduces(recorded_run, staff_client):
    """The issue's case: the profile was edited after the run; "Recorded" must not change."""
    from dashboard.runs.profiles import save_profile

    before = json.loads(_replay(S, "--json"))
    row = TuningProfile.objects.get(name="tight4k")
    row.trigger_ratio = 0.5
    save_profile(row)
    after = json.loads(_replay(S, "--json"))
    assert after["reproduction"]["exact"], after["reproduction"]["mismatches"]
    assert after["recorded"]["billed_prompt_tokens"] == before["recorded"]["billed_prompt_tokens"]
    assert after["recorded"]["evictions"] == before["recorded"]["evictions"]
    # The knobs start from the profile as the run had it, not as it is now.
    page = staff_client.get("/replay/", {"session": S})
    assert page.context["knobs"]["trigger_ratio"] == 0.8
    assert page.context["report"]["reproduction"]["exact"]


def test_an_import_without_model_calls_says_why_it_cannot_replay(console_log, staff_client):
    console_log.append(session_id="locomo:conv-x", kind=KIND_CONTEXT_MSG, role="user",
                       content="Hello there.")  # fmt: skip
    with pytest.raises(CommandError, match="no model calls"):
        _replay("locomo:conv-x")
    page = staff_client.get("/replay/", {"session": "locomo:conv-x"})
    assert page.status_code == 200
    assert "Nothing to replay" in page.content.decode() and "report" not in page.context


# ------------------------------------------------------------- starting from a saved profile
def _lines(response) -> dict[str, dict]:
    """The chart's trigger and C lines by name (the dashed ones, not the per-call traces)."""
    data = response.context["budget"]["data"]
    return {t["name"]: t for t in data if t["name"].startswith(("trigger", "C="))}


def test_the_lab_starts_from_a_saved_profile_chosen_in_the_form(recorded_run, staff_client):
    TuningProfile.objects.create(name="roomy", context_size=8000, trigger_ratio=0.7)

    first = staff_client.get("/replay/", {"session": S})
    page = first.content.decode()
    assert '<select name="start"' in page and ">saved profile roomy</option>" in page
    assert '<option value="" selected>the recorded profile (tight4k)</option>' in page

    # The form, as the browser sends it: the recorded knobs, and roomy chosen above them.
    knobs = {f: str(v) for f, v in first.context["knobs"].items()}
    chosen = staff_client.get(
        "/replay/", {"session": S, "start": "roomy", "knobs_from": "", **knobs}
    )

    assert chosen.status_code == 200
    assert chosen.context["knobs"]["context_size"] == 8000
    assert chosen.context["knobs"]["trigger_ratio"] == 0.7
    assert chosen.context["report"]["replay"]["profile"]["context_size"] == 8000
    page = chosen.content.decode()
    assert 'starting from the saved profile <b id="knobs-source">roomy</b>' in page
    assert '<option value="roomy" selected>' in page
    assert '<input type="hidden" name="knobs_from" value="roomy">' in page


def test_knobs_edited_after_choosing_a_saved_profile_are_kept(recorded_run, staff_client):
    TuningProfile.objects.create(name="roomy", context_size=8000, trigger_ratio=0.7)

    edited = staff_client.get(
        "/replay/",
        {"session": S, "start": "roomy", "knobs_from": "roomy", "trigger_ratio": "0.5"},
    )

    assert edited.context["knobs"]["trigger_ratio"] == "0.5"
    assert edited.context["knobs"]["context_size"] == 8000
    assert edited.context["report"]["replay"]["trigger_tokens"] == 4000


def test_an_unknown_saved_profile_is_refused(recorded_run, staff_client):
    response = staff_client.get("/replay/", {"session": S, "start": "nope"})
    assert response.status_code == 400 and "no saved profile" in response.content.decode()


def test_a_saved_profile_brings_the_lab_back_starting_from_it(recorded_run, staff_client):
    knobs = {**TuningProfile.objects.get(name="tight4k").knobs(), "trigger_ratio": "0.6"}
    saved = staff_client.post("/replay/", {"session": S, "save": "1", "name": "lab-6", **knobs})
    assert saved.status_code == 302 and "start=lab-6" in saved["Location"]
    again = staff_client.get(saved["Location"])
    assert again.context["knobs"]["trigger_ratio"] == 0.6


def test_the_charts_dashed_lines_say_whose_trigger_and_c_they_are(recorded_run, staff_client):
    TuningProfile.objects.create(name="roomy", context_size=8000, trigger_ratio=0.7)

    same = _lines(staff_client.get("/replay/", {"session": S}))
    roomy = _lines(staff_client.get("/replay/", {"session": S, "start": "roomy"}))
    edited = _lines(staff_client.get("/replay/", {"session": S, "trigger_ratio": "0.6"}))

    # Replaying the recorded knobs: one trigger and one C line, both sides' own.
    assert sorted(same) == [
        "C=4,096 (recorded and replay: profile 'tight4k')",
        "trigger 0.8 × C=4,096 (recorded and replay: profile 'tight4k')",
    ]
    assert same["trigger 0.8 × C=4,096 (recorded and replay: profile 'tight4k')"]["y"] == [
        3276,
        3276,
    ]
    # Another profile: each side's lines, named by their values and their profile.
    assert sorted(roomy) == [
        "C=4,096 (recorded: profile 'tight4k')",
        "C=8,000 (replay: saved profile 'roomy')",
        "trigger 0.7 × C=8,000 (replay: saved profile 'roomy')",
        "trigger 0.8 × C=4,096 (recorded: profile 'tight4k')",
    ]
    assert roomy["trigger 0.7 × C=8,000 (replay: saved profile 'roomy')"]["y"] == [5600, 5600]
    # Edited knobs say so; a C both sides share is one line with both names.
    assert sorted(edited) == [
        "C=4,096 (recorded: profile 'tight4k'; replay: knobs edited from profile 'tight4k')",
        "trigger 0.6 × C=4,096 (replay: knobs edited from profile 'tight4k')",
        "trigger 0.8 × C=4,096 (recorded: profile 'tight4k')",
    ]
    # Every line is in the legend: no unnamed shapes left on the plot.
    layout = staff_client.get("/replay/", {"session": S}).context["budget"]["layout"]
    assert not layout.get("shapes")
