""" "Rotting index" alerts, evaluated as spans arrive.

``AlertEngine.observe(span)`` looks at one finished span (a ``SpanRecord`` dict) and raises,
or bumps, the alerts its rules call for; thresholds and windows come from ``AlertRule`` rows
(admin), re-read every few seconds. An alert already open or acknowledged for the same rule,
session and key has its ``count`` and ``last_seen`` bumped instead of a second row; after it
is resolved the next trigger opens a new one.

What each rule reads from a span (attribute names as ``scroll_core.telemetry`` writes them):

index_gap         ``scroll.index_gap`` true, or ``error.type`` EvictionIndexError
headline_quality  chat spans' ``scroll.headline_quality`` missing or malformed, or a headline
                  (``scroll.headline``) equal to the session's previous one; threshold such
                  replies among the last ``window`` chat spans of the session
span_reread       ``scroll.blocks`` of expand/recall spans: the same evicted block retrieved
                  ``threshold`` (3) or more times in one session
print_truncation  execute_tool spans with ``scroll.truncated``; threshold among the last
                  ``window`` cells of the session
kernel_failure    execute_tool spans with ``scroll.status`` timeout or killed, a
                  ``scroll.kernel.restart`` span that was not ``scroll.requested`` (an
                  operator's restart is on the session's timeline, not an alert), or
                  ``error.type`` KernelError
context_unfit     ``error.type`` ContextWindowUnfit, or ``scroll.stop_reason`` context_unfit
eviction_net_loss ``scroll.blocks`` with ``scroll.seq_lo``/``seq_hi``: a block whose re-reads
                  (after ``threshold`` of them) cost more prefill than keeping it would have
lint_*            a finished turn (``scroll.turn``, the gateway's ``invoke_agent``): the
                  trajectory lint's new flags on the session, one alert each, keyed by the
                  cell's seq (``dashboard.telemetry.lint_alerts``)
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from dashboard import groups
from dashboard.push import send_group
from dashboard.telemetry.lint_alerts import is_turn_end, lint_triggers
from dashboard.telemetry.models import Alert, AlertRule
from dashboard.telemetry.netloss import block_range, block_size, reread_tokens

__all__ = ["AlertEngine", "Trigger", "acknowledge", "open_alert_count", "raise_alert", "resolve"]

log = logging.getLogger("dashboard.telemetry.alerts")

BAD_HEADLINES = frozenset({"missing", "malformed"})
KERNEL_FAILURES = frozenset({"timeout", "killed"})
KERNEL_ERRORS = frozenset({"KernelError", "KernelProtocolError", "SandboxUnavailable"})
RULE_CACHE_S = 2.0
# Per-session memory is bounded: sessions beyond this many are forgotten oldest first.
MAX_SESSIONS = 2000


@dataclass(frozen=True)
class Trigger:
    """A rule fired: raise (or bump) the alert for (kind, session, key)."""

    kind: str
    session_id: str
    message: str
    key: str = ""
    span_id: str = ""
    # The occurrences the message reports (an alert's count then says the same number);
    # None: each firing counts one.
    count: int | None = None


def _attr(span: Mapping[str, Any], name: str) -> Any:
    return (span.get("attributes") or {}).get(name)


def _is_chat(span: Mapping[str, Any]) -> bool:
    return _attr(span, "gen_ai.operation.name") == "chat" or str(span.get("name", "")).startswith(
        "chat "
    )


def _is_cell(span: Mapping[str, Any]) -> bool:
    return _attr(span, "gen_ai.operation.name") == "execute_tool" or str(
        span.get("name", "")
    ).startswith("execute_tool ")


class _SessionState:
    __slots__ = ("blocks", "cells", "chats", "last_headline", "linted", "reread")

    def __init__(self) -> None:
        self.chats: deque[bool] = deque(maxlen=1000)  # True: a bad headline
        self.cells: deque[bool] = deque(maxlen=1000)  # True: truncated
        self.blocks: dict[str, int] = defaultdict(int)
        self.last_headline: str | None = None
        self.reread: dict[str, list[int]] = {}  # block -> [W, H, re-read tokens]
        self.linted = 0  # the trajectory lint has judged the session up to this seq


class AlertEngine:
    """Evaluates the rules against each span; thread-safe, one per span sink."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, _SessionState] = {}
        self._rules: dict[str, AlertRule] = {}
        self._rules_at = 0.0
        # Turn ends whose lint waits (``observe(defer_lint=True)``): session -> (when its
        # first waiting turn ended, its latest turn-end span), oldest first.
        self._lint_waiting: dict[str, tuple[float, Mapping[str, Any]]] = {}

    # -- rules ---------------------------------------------------------------------------
    def rules(self) -> dict[str, AlertRule]:
        now = time.monotonic()
        if now - self._rules_at > RULE_CACHE_S or not self._rules:
            self._rules = {r.kind: r for r in AlertRule.objects.all()}
            self._rules_at = now
        return self._rules

    def refresh_rules(self) -> None:
        self._rules_at = 0.0

    def _state(self, session_id: str) -> _SessionState:
        state = self._sessions.get(session_id)
        if state is None:
            if len(self._sessions) >= MAX_SESSIONS:
                self._sessions.pop(next(iter(self._sessions)))
            state = self._sessions[session_id] = _SessionState()
        return state

    # -- evaluation ----------------------------------------------------------------------
    def triggers(self, span: Mapping[str, Any]) -> list[Trigger]:
        """The rules this span fires (no database writes)."""
        rules = {k: r for k, r in self.rules().items() if r.enabled}
        session_id = str(span.get("session_id") or "")
        span_id = str(span.get("span_id") or "")
        name = str(span.get("name") or "")
        error_type = _attr(span, "error.type")
        found: list[Trigger] = []

        def fire(kind: str, message: str, key: str = "", count: int | None = None) -> None:
            if kind in rules:
                found.append(Trigger(kind, session_id, message, key, span_id, count))

        with self._lock:
            state = self._state(session_id)
            if _attr(span, "scroll.index_gap") or error_type == "EvictionIndexError":
                detail = span.get("status_message") or "the index blocks no longer tile"
                fire(AlertRule.INDEX_GAP, f"Index gap in {name}: {detail}")

            if (
                error_type == "ContextWindowUnfit"
                or _attr(span, "scroll.stop_reason") == "context_unfit"
            ):
                detail = span.get("status_message") or "compress could not get under the limit"
                fire(AlertRule.CONTEXT_UNFIT, f"Context window unfit: {detail}")

            if _is_chat(span):
                quality = _attr(span, "scroll.headline_quality")
                headline = _attr(span, "scroll.headline")
                duplicate = bool(headline) and headline == state.last_headline
                if headline:
                    state.last_headline = str(headline)
                if quality is not None or headline is not None:
                    state.chats.append(quality in BAD_HEADLINES or duplicate)
                    rule = rules.get(AlertRule.HEADLINE_QUALITY)
                    if rule is not None and state.chats[-1]:
                        bad = _recent_true(state.chats, rule.window)
                        if bad >= rule.threshold:
                            what = "duplicate" if duplicate else str(quality)
                            fire(
                                AlertRule.HEADLINE_QUALITY,
                                f"Headline quality falling: {bad} of the last "
                                f"{_window_len(state.chats, rule.window)} replies had a missing, "
                                f"malformed or duplicate headline (latest: {what})",
                                count=bad,
                            )

            if _is_cell(span):
                status = _attr(span, "scroll.status")
                if status in KERNEL_FAILURES:
                    fire(
                        AlertRule.KERNEL_FAILURE,
                        f"Kernel {status} in {name}: "
                        f"{span.get('status_message') or 'the cell did not finish'}",
                    )
                truncated = bool(_attr(span, "scroll.truncated"))
                state.cells.append(truncated)
                rule = rules.get(AlertRule.PRINT_TRUNCATION)
                if rule is not None and truncated:
                    count = _recent_true(state.cells, rule.window)
                    if count >= rule.threshold:
                        fire(
                            AlertRule.PRINT_TRUNCATION,
                            f"Print cap hit {count} times in the last "
                            f"{_window_len(state.cells, rule.window)} cells: the agent prints "
                            "raw results instead of aggregating in the kernel",
                            count=count,
                        )
            elif (
                name == "scroll.kernel.restart" and not _attr(span, "scroll.requested")
            ) or error_type in KERNEL_ERRORS:
                fire(
                    AlertRule.KERNEL_FAILURE,
                    f"Kernel failure ({name}): {span.get('status_message') or 'restarted'}",
                )

            blocks = _attr(span, "scroll.blocks")
            if isinstance(blocks, list | tuple):
                rule = rules.get(AlertRule.SPAN_REREAD)
                for block in dict.fromkeys(str(b) for b in blocks):
                    state.blocks[block] += 1
                    count = state.blocks[block]
                    if rule is not None and count >= rule.threshold:
                        fire(
                            AlertRule.SPAN_REREAD,
                            f"Evicted block {block} re-read {count} times: compute over it "
                            "in the kernel instead of expanding it again",
                            key=block,
                            count=count,
                        )
                    net_rule = rules.get(AlertRule.EVICTION_NET_LOSS)
                    if net_rule is not None:
                        message = _net_loss(state, session_id, block, span, count, net_rule)
                        if message:
                            fire(AlertRule.EVICTION_NET_LOSS, message, key=block)
        return found

    def observe(self, span: Mapping[str, Any], *, defer_lint: bool = False) -> list[Alert]:
        """Evaluate ``span`` and raise or bump its alerts; returns the alerts changed. With
        ``defer_lint`` a turn end's trajectory lint waits for ``lint_due``."""
        lint = self._defer(span) if defer_lint else self.lint(span)
        return self._raise(self.triggers(span) + lint)

    def _raise(self, triggers: list[Trigger]) -> list[Alert]:
        changed = []
        for trigger in triggers:
            alert = raise_alert(trigger, self.rules()[trigger.kind])
            if alert is not None:
                changed.append(alert)
        return changed

    def _defer(self, span: Mapping[str, Any]) -> list[Trigger]:
        if is_turn_end(span):
            session_id = str(span.get("session_id"))
            with self._lock:
                since = self._lint_waiting.get(session_id, (time.monotonic(), span))[0]
                self._lint_waiting[session_id] = (since, span)
        return []

    def lint_due(self, wait_s: float, *, everything: bool = False) -> list[Alert]:
        """Lint the sessions whose first deferred turn ended ``wait_s`` ago or more (every
        deferred session with ``everything``), each once over all its waiting turns; raise
        their flags. Returns the alerts changed."""
        now = time.monotonic()
        due = []
        with self._lock:
            for session_id, (since, span) in list(self._lint_waiting.items()):
                if not everything and now - since < wait_s:
                    break  # oldest first: the rest waited less
                due.append(span)
                del self._lint_waiting[session_id]
        return self._raise([trigger for span in due for trigger in self.lint(span)])

    def lint_waiting(self) -> int:
        """How many sessions have turns waiting for their lint."""
        return len(self._lint_waiting)

    def lint(self, span: Mapping[str, Any]) -> list[Trigger]:
        """The trajectory lint's new flags when ``span`` ends a turn (reads the Event Log)."""
        if not is_turn_end(span):
            return []
        enabled = {k: r for k, r in self.rules().items() if r.enabled}
        session_id = str(span.get("session_id"))
        with self._lock:
            after = self._state(session_id).linted
        found, linted = lint_triggers(span, enabled, after)
        with self._lock:
            state = self._state(session_id)
            state.linted = max(state.linted, linted)
        span_id = str(span.get("span_id") or "")
        return [Trigger(kind, session_id, text, key, span_id) for kind, key, text in found]


def _net_loss(
    state: _SessionState,
    session_id: str,
    block: str,
    span: Mapping[str, Any],
    count: int,
    rule: AlertRule,
) -> str | None:
    """Add this retrieval's re-read tokens to the block's; the message once evicting the
    block has cost more prefill than keeping it would have (dashboard/telemetry/netloss.py)."""
    bounds = block_range(block)
    lo, hi = _attr(span, "scroll.seq_lo"), _attr(span, "scroll.seq_hi")
    if bounds is None or not isinstance(lo, int) or not isinstance(hi, int):
        return None
    figures = state.reread.get(block)
    if figures is None:
        figures = state.reread[block] = [*block_size(session_id, *bounds), 0]
    figures[2] += reread_tokens(session_id, bounds[0], bounds[1], lo, hi)
    keep, offload = figures[0], figures[1] + figures[2]
    if count < rule.threshold or offload <= keep or keep <= 0:
        return None
    return (
        f"Evicting block {block} is a net loss: {count} re-read(s) prefilled {figures[2]} "
        f"tokens again, plus its {figures[1]}-token index line, against {keep} to keep it "
        f"in the view ({offload / keep:.2f}x). Compute over it in the kernel instead."
    )


def _recent_true(values: deque[bool], window: int) -> int:
    items = list(values)[-window:] if window else list(values)
    return sum(items)


def _window_len(values: deque[bool], window: int) -> int:
    return min(len(values), window) if window else len(values)


def raise_alert(trigger: Trigger, rule: AlertRule) -> Alert | None:
    """Open an alert, or bump the live one for the same rule, session and key.

    Several processes may raise the same alert at once; the partial unique constraint on the
    open alert per rule and subject lets one insert win, and the losers bump the winner's. A
    trigger that knows its own count (re-reads of a span, say) sets it; others add one.
    """
    for _attempt in range(3):
        now = timezone.now()
        alert = _live_alert(rule, trigger)
        if alert is None:
            try:
                with transaction.atomic():
                    return Alert.objects.create(
                        rule=rule,
                        session_id=trigger.session_id,
                        key=trigger.key,
                        message=trigger.message,
                        span_id=trigger.span_id,
                        count=trigger.count or 1,
                        first_seen=now,
                        last_seen=now,
                    )
            except IntegrityError:
                continue  # another process opened it first: bump that one
        count = trigger.count if trigger.count is not None else F("count") + 1
        bumped = (
            Alert.objects.filter(pk=alert.pk)
            .exclude(state=Alert.RESOLVED)
            .update(count=count, last_seen=now, message=trigger.message, span_id=trigger.span_id)
        )
        if bumped:
            alert.refresh_from_db()
            return alert
    return None


def _live_alert(rule: AlertRule, trigger: Trigger) -> Alert | None:
    return (
        Alert.objects.filter(rule=rule, session_id=trigger.session_id, key=trigger.key)
        .exclude(state=Alert.RESOLVED)
        .order_by("-id")
        .first()
    )


def acknowledge(alert: Alert, user: Any) -> Alert:
    """Open -> acknowledged, remembering who; notifies the console."""
    if alert.state == Alert.OPEN:
        alert.state = Alert.ACKNOWLEDGED
        alert.acknowledged_by = user if getattr(user, "is_authenticated", False) else None
        alert.acknowledged_at = timezone.now()
        alert.save(update_fields=["state", "acknowledged_by", "acknowledged_at"])
        _notify(alert)
    return alert


def resolve(alert: Alert, user: Any = None) -> Alert:
    """Open or acknowledged -> resolved; a later trigger opens a new alert."""
    if alert.state != Alert.RESOLVED:
        alert.state = Alert.RESOLVED
        alert.resolved_at = timezone.now()
        fields = ["state", "resolved_at"]
        if alert.acknowledged_by is None and getattr(user, "is_authenticated", False):
            alert.acknowledged_by = user
            fields.append("acknowledged_by")
        alert.save(update_fields=fields)
        _notify(alert)
    return alert


def open_alert_count() -> int:
    """Alerts still open (not acknowledged, not resolved): the header's badge."""
    return Alert.objects.filter(state=Alert.OPEN).count()


def _notify(alert: Alert) -> None:
    """Tell the live pages (the alerts page, the header's badge) that ``alert`` changed."""
    send_group(groups.ALERTS, {"type": "alert.changed", "alert": alert.to_dict()})
