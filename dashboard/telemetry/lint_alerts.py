"""The trajectory lint, live: when a turn ends (the agent loop's ``scroll.turn`` span, the
gateway's ``invoke_agent`` span) its session is linted from the Event Log
(``scroll_core.lint``), and each new flag is raised as an alert of its rule's kind
(``AlertRule.LINT_*``), keyed by the seq of the cell or reply that shows it; the message is
the flag's explanation with its seqs.

The console's span sink defers this: a session's turns that end within
``dashboard.telemetry.spans.LIVE_LINT_WAIT_S`` of each other are linted together, once.

A flag is raised once: a session is linted only after the seqs it was last linted up to, and
a flag whose alert exists in any state (resolved included) is not raised again. The lint's
``re_reading`` rule is live as the ``span_reread`` alert, which sees every retrieval span.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from dashboard.eventlog import get_event_log
from dashboard.telemetry.models import Alert, AlertRule
from scroll_core.lint import Flag, lint_session

__all__ = ["LINT_KINDS", "LIVE_LOOKBACK_EVENTS", "is_turn_end", "lint_triggers", "message"]

log = logging.getLogger("dashboard.telemetry.lint_alerts")

LINT_KINDS = {
    "window_refill": AlertRule.LINT_WINDOW_REFILL,
    "head_and_tail": AlertRule.LINT_HEAD_AND_TAIL,
    "undercounting_filter": AlertRule.LINT_UNDERCOUNTING_FILTER,
    "no_disconfirming_query": AlertRule.LINT_NO_DISCONFIRMING_QUERY,
    "archive_answered": AlertRule.LINT_ARCHIVE_ANSWERED,
}
TURN_SPAN = "scroll.turn"


# How many of a session's events before the newest turns a live lint reads besides them
# (``manage.py scroll_lint`` and the session page read the whole session).
LIVE_LOOKBACK_EVENTS = 2_000


def is_turn_end(span: Mapping[str, Any]) -> bool:
    attributes = span.get("attributes") or {}
    return bool(span.get("session_id")) and (
        span.get("name") == TURN_SPAN or attributes.get("gen_ai.operation.name") == "invoke_agent"
    )


def message(flag: Flag) -> str:
    return f"{flag.explanation} (seqs {', '.join(map(str, flag.seqs))})"


def lint_triggers(
    span: Mapping[str, Any], enabled: Mapping[str, AlertRule], after_seq: int
) -> tuple[list[tuple[str, str, str]], int]:
    """(kind, key, message) for each new flag of ``span``'s session after ``after_seq``, and
    the seq the session is now linted up to. Never raises: a lint that fails is logged."""
    session_id = str(span.get("session_id") or "")
    kinds = {rule: kind for rule, kind in LINT_KINDS.items() if kind in enabled}
    if not kinds:
        return [], after_seq
    try:
        event_log = get_event_log()
        events = event_log.session_events(session_id, after_seq=after_seq, limit=None)
        if not events:
            return [], after_seq
        # What came before, up to a bound: the rules judge the new turns against recent
        # history, so a turn's lint costs the same at a session's 100th event and its 100,000th
        # (the whole session each turn made a long gateway session quadratic on the sink).
        earlier = event_log.session_events_before(
            session_id, events[0].seq, limit=LIVE_LOOKBACK_EVENTS
        )
        flags = lint_session(event_log, session_id, after_seq=after_seq, events=earlier + events)
    except Exception:
        log.exception("console: the trajectory lint failed on session %s", session_id)
        return [], after_seq
    wanted = [(kinds[f.rule], str(f.cell_seq), message(f)) for f in flags if f.rule in kinds]
    if not wanted:  # the common case: no query for alerts that could not repeat a flag
        return [], events[-1].seq
    seen = set(
        Alert.objects.filter(session_id=session_id, rule__kind__in=kinds.values()).values_list(
            "rule__kind", "key"
        )
    )
    return [w for w in wanted if (w[0], w[1]) not in seen], events[-1].seq
