from __future__ import annotations

import itertools

import pytest

from dashboard.telemetry.alerts import AlertEngine, acknowledge, open_alert_count, resolve
from dashboard.telemetry.models import Alert, AlertRule

pytestmark = pytest.mark.django_db

_ids = itertools.count(1)


def _span(name, session="s1", status="ok", message=None, **attributes):
    return {
        "span_id": f"{next(_ids):016x}",
        "name": name,
        "session_id": session,
        "status": status,
        "status_message": message,
        "attributes": attributes,
    }


def _chat(quality="ok", headline=None, session="s1"):
    attrs = {"gen_ai.operation.name": "chat", "scroll.headline_quality": quality}
    if headline:
        attrs["scroll.headline"] = headline
    return _span("chat scroll-policy-baseline", session, **attrs)


def _cell(status="ok", truncated=False, session="s1"):
    return _span(
        "execute_tool repl_exec",
        session,
        **{
            "gen_ai.operation.name": "execute_tool",
            "scroll.status": status,
            "scroll.truncated": truncated,
        },
    )


def _expand(*blocks, session="s1"):
    return _span("scroll.expand", session, **{"scroll.blocks": list(blocks)})


@pytest.fixture
def engine():
    return AlertEngine()


def test_an_index_gap_opens_an_alert_at_once(engine):
    changed = engine.observe(
        _span("scroll.compress", status="error", message="gap between 10 and 12",
              **{"error.type": "EvictionIndexError"})
    )  # fmt: skip

    assert [a.rule.kind for a in changed] == ["index_gap"]
    assert "gap between 10 and 12" in changed[0].message
    assert changed[0].state == Alert.OPEN
    assert open_alert_count() == 1


def test_a_block_read_a_third_time_raises_span_reread_and_then_bumps_it(engine):
    assert engine.observe(_expand("0:1-40")) == []
    assert engine.observe(_expand("0:1-40", "0:41-80")) == []

    third = engine.observe(_expand("0:1-40"))
    fourth = engine.observe(_expand("0:1-40"))

    assert [a.key for a in third] == ["0:1-40"]
    assert fourth[0].pk == third[0].pk
    # The count column and the message say the same number.
    assert Alert.objects.get().count == 4
    assert "re-read 4 times" in Alert.objects.get().message


def test_reads_of_different_sessions_are_counted_apart(engine):
    for session in ("a", "b", "a", "b"):
        engine.observe(_expand("0:1-40", session=session))

    assert not Alert.objects.exists()


def test_headline_quality_counts_missing_malformed_and_duplicate_in_the_window(engine):
    engine.observe(_chat("missing"))
    engine.observe(_chat("ok", headline="⟦a | status: x; next: y | anchors: z⟧"))
    assert not Alert.objects.exists()
    engine.observe(_chat("malformed"))
    changed = engine.observe(_chat("ok", headline="⟦a | status: x; next: y | anchors: z⟧"))

    assert [a.rule.kind for a in changed] == ["headline_quality"]
    assert "latest: duplicate" in changed[0].message


def test_good_headlines_push_old_bad_ones_out_of_the_window(engine):
    rule = AlertRule.objects.get(kind="headline_quality")
    rule.window, rule.threshold = 3, 2
    rule.save()
    engine.refresh_rules()
    for quality in ("missing", "ok", "ok", "missing"):
        engine.observe(_chat(quality))

    assert not Alert.objects.exists()


def test_repeated_print_cap_truncation_raises_after_the_threshold(engine):
    for _ in range(2):
        engine.observe(_cell(truncated=True))
    assert not Alert.objects.exists()

    changed = engine.observe(_cell(truncated=True))

    assert [a.rule.kind for a in changed] == ["print_truncation"]


@pytest.mark.parametrize(
    "span",
    [
        _cell(status="timeout"),
        _cell(status="killed"),
        _span("scroll.kernel.restart"),
        _span("scroll.kernel", status="error", **{"error.type": "KernelError"}),
    ],
)
def test_kernel_crash_or_timeout_raises_kernel_failure(engine, span):
    assert [a.rule.kind for a in engine.observe(span)] == ["kernel_failure"]


def test_a_requested_kernel_restart_raises_nothing(engine):
    # An operator's restart: the session's timeline records it (tests/test_kernel_actions.py).
    assert engine.observe(_span("scroll.kernel.restart", **{"scroll.requested": True})) == []
    assert not Alert.objects.exists()


def test_context_window_unfit_raises(engine):
    changed = engine.observe(
        _span("scroll.compress", status="error", **{"error.type": "ContextWindowUnfit"})
    )
    assert [a.rule.kind for a in changed] == ["context_unfit"]


def test_a_disabled_rule_never_fires(engine):
    AlertRule.objects.filter(kind="kernel_failure").update(enabled=False)

    assert engine.observe(_cell(status="timeout")) == []


def test_acknowledged_alerts_are_bumped_and_resolved_ones_reopen(engine, django_user_model):
    user = django_user_model.objects.create_user("ops", password="x-very-long-pass")
    first = engine.observe(_cell(status="timeout"))[0]

    acknowledge(first, user)
    again = engine.observe(_cell(status="timeout"))[0]
    assert again.pk == first.pk
    again.refresh_from_db()
    assert (again.state, again.count, again.acknowledged_by) == (Alert.ACKNOWLEDGED, 2, user)
    assert open_alert_count() == 0

    resolve(again, user)
    reopened = engine.observe(_cell(status="timeout"))[0]
    assert reopened.pk != first.pk
    assert reopened.state == Alert.OPEN
    assert Alert.objects.count() == 2


def test_an_ordinary_span_raises_nothing(engine):
    assert engine.observe(_span("scroll.search", **{"scroll.hits": 3})) == []
    assert engine.observe(_cell()) == []


def test_the_database_refuses_a_second_open_alert_for_one_rule_and_subject():
    from django.db import IntegrityError, transaction

    rule = AlertRule.objects.get(kind=AlertRule.INDEX_GAP)
    Alert.objects.create(rule=rule, session_id="s1", key="k", message="first")
    with pytest.raises(IntegrityError), transaction.atomic():
        Alert.objects.create(rule=rule, session_id="s1", key="k", message="second")
    # Other subjects, and alerts no longer open, are not affected.
    Alert.objects.create(rule=rule, session_id="s2", key="k", message="other session")
    Alert.objects.create(rule=rule, session_id="s1", key="k", message="old", state=Alert.RESOLVED)
    assert Alert.objects.filter(state=Alert.OPEN).count() == 2


def test_an_alert_opened_meanwhile_by_another_process_is_bumped_not_duplicated(monkeypatch):
    from dashboard.telemetry import alerts

    rule = AlertRule.objects.get(kind=AlertRule.INDEX_GAP)
    trigger = alerts.Trigger(AlertRule.INDEX_GAP, "s1", "gap", "", "00000000000000aa")
    real = alerts._live_alert
    calls = []

    def racing(rule_, trigger_):
        # The first look finds nothing, then "another process" opens the alert before
        # this one inserts: the insert must lose to the constraint and bump instead.
        calls.append(1)
        if len(calls) == 1:
            Alert.objects.create(rule=rule, session_id="s1", key="", message="theirs")
            return None
        return real(rule_, trigger_)

    monkeypatch.setattr(alerts, "_live_alert", racing)
    alert = alerts.raise_alert(trigger, rule)

    assert Alert.objects.count() == 1
    assert alert is not None and alert.count == 2 and alert.message == "gap"
