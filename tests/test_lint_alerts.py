"""The trajectory lint, live: a session's own ``scroll.turn`` span, through the console's span
sink, raises each new flag as an alert of its rule's kind, once; the session page's lint panel
shows the flag beside its alert."""

from __future__ import annotations

import time

import pytest
from agent_fakes import ScriptedModel, reply

from dashboard.telemetry.alerts import AlertEngine, resolve
from dashboard.telemetry.models import Alert, AlertRule, SpanRecord
from dashboard.telemetry.spans import ConsoleSpanSink
from scroll_core import telemetry
from scroll_core.agent import Session
from scroll_core.lint import recorded_turns
from scroll_core.profile import Profile

pytestmark = pytest.mark.django_db

S = "live-lint"
TRANSLATE = "Translate 'good morning' into French."
PRODUCT = "What is 23 times 41? Reply with the number."
WRONG = "Translate 'good morning': Bonjour!"  # answers the earlier request


@pytest.fixture
def traced(console_log):
    """Spans of this test kept in a ring, and a console sink (no worker thread) to feed."""
    sink = ConsoleSpanSink(start=False)
    state = telemetry.configure(ring_size=5000, otlp=False)
    yield state.ring, sink
    telemetry.reset()
    sink.close()


def _turns(log, *pairs: tuple[str, str]) -> None:
    model = ScriptedModel(*(reply(answer) for _, answer in pairs), context_size=16_000)
    profile = Profile(context_size=model.context_size)
    with Session(log, model, session_id=S, profile=profile) as agent:
        for question, _ in pairs:
            assert agent.ask(question).ok


def _feed(ring, sink) -> list[Alert]:
    """Every span recorded so far through the sink, as its worker would; the alerts raised."""
    rows = sink.process(ring.records())
    assert any(r.name == "scroll.turn" for r in rows)
    return list(Alert.objects.filter(rule__kind__startswith="lint_"))


def test_a_finished_turn_raises_its_flags_as_alerts_once(console_log, traced):
    ring, sink = traced
    _turns(console_log, (TRANSLATE, "Bonjour."), (PRODUCT, "Translate 'good morning': Bonjour!"))

    (alert,) = _feed(ring, sink)
    answer = recorded_turns(console_log, S)[1].answer
    assert alert.rule.kind == AlertRule.LINT_ARCHIVE_ANSWERED
    assert (alert.session_id, alert.key, alert.state) == (S, str(answer.seq), Alert.OPEN)
    assert "answers what the archive asked" in alert.message
    assert alert.message.endswith(f"(seqs 1, 3, {answer.seq})")

    # The turn seen again, here or by another process's engine, once the flag is resolved:
    # not raised a second time.
    resolve(alert)
    (turn,) = SpanRecord.objects.filter(name="scroll.turn").order_by("-id")[:1]
    assert sink.engine.observe(turn.to_dict()) == []
    assert AlertEngine().observe(turn.to_dict()) == []
    assert Alert.objects.filter(rule__kind__startswith="lint_").count() == 1
    assert Alert.objects.get().state == Alert.RESOLVED


def test_a_live_lint_judges_the_new_turn_against_a_bounded_stretch_of_history(
    console_log, traced, monkeypatch
):
    from dashboard.telemetry import lint_alerts
    from scroll_core.lint import lint_session

    ring, sink = traced
    model = ScriptedModel(reply("Bonjour."), reply("Translate 'good morning': Bonjour!"))
    with Session(console_log, model, session_id=S, profile=Profile(context_size=16_000)) as agent:
        assert agent.ask(TRANSLATE).ok
        assert _feed(ring, sink) == []  # the first turn, linted as it ends
        ring.clear()
        # The request the next reply answers then lies further back than the live lint reads:
        # no alert, while the whole-session lint (scroll_lint, the session page) flags it.
        monkeypatch.setattr(lint_alerts, "LIVE_LOOKBACK_EVENTS", 1)
        assert agent.ask(PRODUCT).ok
    assert _feed(ring, sink) == []
    assert [f.rule for f in lint_session(console_log, S)] == ["archive_answered"]
    # Read back far enough, the same turn raises it.
    monkeypatch.setattr(lint_alerts, "LIVE_LOOKBACK_EVENTS", 2_000)
    (turn,) = SpanRecord.objects.filter(name="scroll.turn").order_by("-id")[:1]
    sink.engine._sessions.clear()  # as a process that has not linted the session yet
    assert [a.rule.kind for a in sink.engine.observe(turn.to_dict())] == [
        AlertRule.LINT_ARCHIVE_ANSWERED
    ]


def test_a_clean_turn_and_a_disabled_rule_raise_nothing(console_log, traced):
    ring, sink = traced
    AlertRule.objects.filter(kind=AlertRule.LINT_ARCHIVE_ANSWERED).update(enabled=False)
    sink.engine.refresh_rules()
    _turns(console_log, (TRANSLATE, "Bonjour."), (PRODUCT, "Translate 'good morning': Bonjour!"))
    assert _feed(ring, sink) == []

    ring.clear()
    AlertRule.objects.filter(kind=AlertRule.LINT_ARCHIVE_ANSWERED).update(enabled=True)
    sink.engine.refresh_rules()
    with Session(
        console_log, ScriptedModel(reply("943")), session_id="clean", profile=Profile()
    ) as agent:
        assert agent.ask(PRODUCT).ok
    sink.process([r for r in ring.records() if r.session_id == "clean"])
    assert not Alert.objects.filter(session_id="clean").exists()


def test_the_lint_panel_shows_each_flag_beside_its_alert(console_log, traced, admin_client):
    from django.urls import reverse

    ring, sink = traced
    _turns(console_log, (TRANSLATE, "Bonjour."), (PRODUCT, "Translate 'good morning': Bonjour!"))
    (alert,) = _feed(ring, sink)

    fragment = admin_client.get(reverse("session_lint", args=[S])).content.decode()
    row = f'id="lint-archive_answered-{alert.key}"'
    assert row in fragment
    assert f'href="{reverse("alerts")}#alert-{alert.pk}" class="state-open">open</a>' in fragment
    page = admin_client.get(reverse("alerts")).content.decode()
    assert f'href="{reverse("session", args=[S])}#lint-panel">seq {alert.key}</a>' in page


def test_a_turn_ends_with_the_loops_turn_span_or_a_gateway_request():
    from dashboard.telemetry.lint_alerts import is_turn_end

    assert is_turn_end({"name": "scroll.turn", "session_id": S, "attributes": {}})
    assert is_turn_end(
        {"name": "invoke_agent scroll-gateway", "session_id": S,
         "attributes": {"gen_ai.operation.name": "invoke_agent"}}
    )  # fmt: skip
    assert not is_turn_end({"name": "scroll.turn", "session_id": "", "attributes": {}})
    assert not is_turn_end(
        {"name": "execute_tool repl_exec", "session_id": S,
         "attributes": {"gen_ai.operation.name": "execute_tool"}}
    )  # fmt: skip


def test_a_sink_that_defers_the_lint_judges_a_sessions_turns_together_once_due(console_log, traced):
    ring, _ = traced
    sink = ConsoleSpanSink(start=False, lint_wait_s=60.0)
    try:
        _turns(console_log, (TRANSLATE, "Bonjour."), (PRODUCT, WRONG))
        # Processed, the turns wait: nothing judged yet, the session counted as waiting.
        assert _feed(ring, sink) == []
        assert sink.engine.lint_waiting() == 1
        # Not yet due: a second pass leaves them waiting.
        sink.engine.lint_due(60.0)
        assert sink.engine.lint_waiting() == 1
        # Due (here: everything now), one lint over both turns raises the flag once.
        sink.lint_now()
        (alert,) = Alert.objects.filter(rule__kind__startswith="lint_")
        assert alert.rule.kind == AlertRule.LINT_ARCHIVE_ANSWERED
        assert alert.key == str(recorded_turns(console_log, S)[1].answer.seq)
        assert sink.engine.lint_waiting() == 0
        sink.lint_now()
        assert Alert.objects.filter(rule__kind__startswith="lint_").count() == 1
    finally:
        sink.close()


def test_a_deferred_lint_runs_when_its_wait_is_over(console_log, traced):
    ring, _ = traced
    sink = ConsoleSpanSink(start=False, lint_wait_s=0.2)
    try:
        _turns(console_log, (TRANSLATE, "Bonjour."), (PRODUCT, WRONG))
        assert _feed(ring, sink) == []
        time.sleep(0.3)
        sink.process([])  # the next batch (or the idle worker) finds the session due
        assert [a.rule.kind for a in Alert.objects.filter(rule__kind__startswith="lint_")] == [
            AlertRule.LINT_ARCHIVE_ANSWERED
        ]
        assert sink.engine.lint_waiting() == 0
    finally:
        sink.close()
