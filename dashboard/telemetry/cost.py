"""What a session's model calls cost, and what its evictions cost in prefill.

Tokens come from the recorded run replayed under the profiles in force (dashboard.runs.inforce):
each call's prompt (the provider's count when the log has it, else the view), the part the
provider's prompt cache read and the part it wrote (the provider's counts when it reported them;
else the reads are estimated as what is unchanged since the call before, replay's
``total - prefill``, and no writes) and the output. A model's ``ModelPrice`` row prices its
calls (source "admin"); a model without one gets genai-prices' default price
(``scroll_core.pricing``); a model known to neither has no cost.

The prefix-cache arithmetic (seed, section 4b): with a working prefix KV cache a span kept in
the view is prefilled once (``keep = W``, its tokens), while an evicted span costs its index
line once plus every re-read of it prefilled again (``offload = H + sum of re-read
tokens``). Eviction is a net loss for a span once ``offload > keep``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from django.conf import settings

from dashboard.eventlog import get_event_log
from dashboard.record.models import WireCall
from dashboard.runs.inforce import load_recorded
from dashboard.runs.models import CompressEvent, ProfileChange
from dashboard.telemetry.models import ModelPrice
from scroll_core.errors import ScrollError
from scroll_core.models import Usage
from scroll_core.pricing import price_call
from scroll_core.replay import ReplayResult, Trace, replay
from scroll_core.store import KIND_MODEL_TURN, Event
from scroll_core.timeutil import parse_ts
from scroll_core.view import MESSAGE_OVERHEAD_TOKENS

__all__ = [
    "CallCost",
    "SessionCost",
    "SpanArithmetic",
    "agent_cost",
    "call_costs",
    "cost_context",
    "session_cost",
]


@dataclass(frozen=True)
class CallCost:
    """One model call's tokens and, when its model has a price, its cost.

    ``input_tokens`` is the whole prompt; ``cached_tokens`` (read from the prompt cache) and
    ``cache_write_tokens`` (written to it) are parts of it, the provider's counts or, with
    ``cached_estimated``, the reads estimated from the view (and no writes). ``price_source``
    says what priced ``cost``: "admin" (a ``ModelPrice`` row), "genai-prices <version>", or
    "" when nothing did."""

    call: int
    seq: int
    turn: int | None
    step: int | None
    model: str
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    cost: Decimal | None = None
    currency: str = ""
    cache_write_tokens: int = 0
    cached_estimated: bool = True
    price_source: str = ""
    created_at: str = ""  # when the call was made: a default price is the one in force then

    @property
    def uncached_tokens(self) -> int:
        return max(0, self.input_tokens - self.cached_tokens - self.cache_write_tokens)

    @property
    def usage(self) -> Usage:
        return Usage(self.input_tokens, self.output_tokens, self.cached_tokens,
                     self.cache_write_tokens)  # fmt: skip


@dataclass(frozen=True)
class SpanArithmetic:
    """One evicted span: what keeping it would have cost in prefill against evicting it."""

    lo: int
    hi: int
    evicted_at_call: int
    tokens: int  # W: the span's tokens in the view
    headline_tokens: int  # H: its line in the index
    retrievals: int
    reread_tokens: int

    @property
    def keep(self) -> int:
        return self.tokens

    @property
    def offload(self) -> int:
        return self.headline_tokens + self.reread_tokens

    @property
    def net(self) -> int:
        """Prefill tokens eviction cost beyond keeping the span (negative: a saving)."""
        return self.offload - self.keep

    @property
    def loss(self) -> bool:
        return self.offload > self.keep

    @property
    def ratio(self) -> float:
        return self.offload / self.keep if self.keep else 0.0


@dataclass
class SessionCost:
    session_id: str
    agent_id: str
    calls: list[CallCost] = field(default_factory=list)
    spans: list[SpanArithmetic] = field(default_factory=list)
    unpriced: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def priced(self) -> bool:
        return bool(self.calls) and not self.unpriced

    @property
    def total(self) -> Decimal | None:
        costs = [c.cost for c in self.calls if c.cost is not None]
        return sum(costs, Decimal(0)) if costs else None

    @property
    def currency(self) -> str:
        return next((c.currency for c in self.calls if c.currency), "")

    @property
    def input_tokens(self) -> int:
        return sum(c.input_tokens for c in self.calls)

    @property
    def cached_tokens(self) -> int:
        return sum(c.cached_tokens for c in self.calls)

    @property
    def output_tokens(self) -> int:
        return sum(c.output_tokens for c in self.calls)

    @property
    def losses(self) -> list[SpanArithmetic]:
        return [s for s in self.spans if s.loss]


def _prices() -> dict[str, ModelPrice]:
    return {p.model: p for p in ModelPrice.objects.all()}


def _priced(call: CallCost, row: ModelPrice | None) -> CallCost:
    """``call`` with its cost: at its model's admin row when there is one, else at
    genai-prices' default price then; unchanged when neither knows the model."""
    at = parse_ts(call.created_at) if call.created_at else None
    cost = price_call(call.usage, call.model, rates=row.rates() if row else None, at=at)
    if cost is None:
        return call
    return replace(call, cost=cost.amount, currency=cost.currency, price_source=cost.source)


def session_cost(session_id: str) -> SessionCost:
    """Every call of the session priced, and the arithmetic of each evicted span."""
    log = get_event_log()
    summary = log.session(session_id)
    out = SessionCost(session_id, summary.agent_id if summary else "")
    if summary is None:
        return out
    key = (
        str(settings.SCROLL_EVENTLOG_PATH),  # another log (a test's, a data folder) is another key
        session_id,
        summary.last_seq,
        CompressEvent.objects.filter(session_id=session_id).count(),
        ProfileChange.objects.count(),
    )
    try:
        calls, spans = _tokens(*key)
    except ScrollError as exc:
        out.error = str(exc)
        return out
    recorded = recorded_call_tokens(session_id)
    if recorded:  # what the upstream billed, call by call, not a rebuilt view
        calls = tuple(recorded)
    prices = _prices()
    out.calls = [_priced(c, prices.get(c.model)) for c in calls]
    out.unpriced = sorted({c.model for c in out.calls if c.cost is None})
    out.spans = list(spans)
    return out


def recorded_call_tokens(session_id: str) -> list[CallCost]:
    """The session's calls from the call record: tokens as the upstream reported them (its
    cache reads and writes as such: a provider that reports none bills none), the model the
    provider reported (else the one requested), priced at its date. Empty when the session
    has no record."""
    out = []
    for row in WireCall.objects.filter(session_id=session_id).order_by("index"):
        usage = row.usage or {}
        out.append(
            CallCost(
                call=row.index,
                seq=0,
                turn=row.turn,
                step=row.step,
                # The model the provider says answered (a dated snapshot) is the one it bills.
                model=str((row.reply or {}).get("model") or row.model),
                input_tokens=_count(usage.get("input_tokens")) or 0,
                cached_tokens=_count(usage.get("cache_read_input_tokens")) or 0,
                output_tokens=_count(usage.get("output_tokens")) or 0,
                cache_write_tokens=_count(usage.get("cache_creation_input_tokens")) or 0,
                cached_estimated=False,
                created_at=row.started_at.isoformat(),
            )
        )
    return out


def call_costs(session_id: str) -> dict[int, CallCost]:
    """The session's calls by index (the context window inspector shows one)."""
    return {c.call: c for c in session_cost(session_id).calls}


def agent_cost(agent_id: str) -> tuple[Decimal | None, int, str]:
    """The cost of every session of ``agent_id``: total (None when nothing is priced),
    sessions counted, currency."""
    if not agent_id:
        return None, 0, ""
    ids = [s.session_id for s in get_event_log().sessions() if s.agent_id == agent_id]
    total: Decimal | None = None
    currency = ""
    for sid in ids:
        cost = session_cost(sid)
        if cost.total is not None:
            total = (total or Decimal(0)) + cost.total
            currency = currency or cost.currency
    return total, len(ids), currency


@functools.lru_cache(maxsize=64)
def _tokens(
    _log: str, session_id: str, last_seq: int, _rows: int, _changes: int
) -> tuple[tuple[CallCost, ...], tuple[SpanArithmetic, ...]]:
    """Token figures of a session, cached until it grows, compresses or a profile changes."""
    recorded = load_recorded(session_id)
    trace = recorded.trace
    if not trace.calls:
        return (), ()
    result = replay(trace, recorded.final, profiles=recorded.profiles)
    by_seq = {e.seq: e for e in trace.events}
    calls = tuple(
        _call(c.index, c.seq, c.turn, c.step, c.total, c.prefill, by_seq) for c in result.calls
    )
    return calls, tuple(_spans(trace, result, by_seq, _logged_evictions(session_id)))


def _call(
    index: int,
    seq: int,
    turn: int | None,
    step: int | None,
    total: int,
    prefill: int,
    by_seq: dict[int, Event],
) -> CallCost:
    event = by_seq.get(seq)
    meta: dict[str, Any] = event.metadata if event is not None else {}
    raw = meta.get("usage")
    # Scroll's own loop logs usage under "usage"; the gateway logs its counts beside the rest.
    usage: dict[str, Any] = raw if isinstance(raw, dict) else meta
    given = usage.get("input_tokens")
    prompt = given if isinstance(given, int) and given > 0 else total
    out = usage.get("output_tokens")
    output = out if isinstance(out, int) and out > 0 else (event.tokens if event else 0)
    read = _count(usage.get("cache_read_input_tokens"))
    written = _count(usage.get("cache_creation_input_tokens"))
    estimated = read is None and written is None
    if estimated:
        read = max(0, min(prompt, total - prefill))
    return CallCost(
        call=index,
        seq=seq,
        turn=turn,
        step=step,
        model=str(meta.get("model") or ""),
        input_tokens=prompt,
        cached_tokens=read or 0,
        output_tokens=output,
        cache_write_tokens=written or 0,
        cached_estimated=estimated,
        created_at=event.created_at if event is not None else "",
    )


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _logged_evictions(session_id: str) -> list[tuple[int, int]]:
    """The seq ranges the session's loop evicted, as its compress rows recorded them."""
    rows = CompressEvent.objects.filter(session_id=session_id, evicted_lo__isnull=False)
    return [(lo, hi) for lo, hi in rows.order_by("id").values_list("evicted_lo", "evicted_hi")]


def _spans(
    trace: Trace,
    result: ReplayResult,
    by_seq: dict[int, Event],
    logged: list[tuple[int, int]] | None = None,
) -> list[SpanArithmetic]:
    """Keep against evict for each evicted span: the spans the loop evicted (``logged``, its
    compress rows) when it recorded them, else the replay's; a span is evicted at the
    replayed compress of the same range, or right after its last event."""
    counter = trace.counter
    call_seqs = [c.seq for c in result.calls]
    replayed = [(c.evicted, c.seq) for c in result.compresses if c.evicted is not None]
    if logged:
        at = dict(replayed)
        evictions = [(span, at.get(span, span[1])) for span in logged]
    else:
        evictions = replayed
    out = []
    for (lo, hi), bound in evictions:
        events = [e for s, e in by_seq.items() if lo <= s <= hi]
        tokens = sum(e.tokens + MESSAGE_OVERHEAD_TOKENS for e in events)
        headlines = [e.headline for e in events if e.kind == KIND_MODEL_TURN and e.headline]
        line = f"seq {lo}-{hi}: " + ("; ".join(headlines) or "(no milestone)")
        headline_tokens = counter.count(line) if counter is not None else len(line) // 4
        retrievals = reread = 0
        for r in trace.retrievals:
            if r.call >= len(call_seqs) or call_seqs[r.call] <= bound:
                continue  # read while still live, not a re-read of the evicted span
            inside = [s for s in r.seqs if lo <= s <= hi]
            if inside:
                retrievals += 1
                reread += sum(by_seq[s].tokens for s in inside if s in by_seq)
        evicted_at = sum(1 for s in call_seqs if s <= bound)
        out.append(SpanArithmetic(lo, hi, evicted_at, tokens, headline_tokens, retrievals, reread))
    return out


def cost_context(session_id: str) -> dict[str, Any]:
    """What the session page's cost panel shows."""
    cost = session_cost(session_id)
    return {"cost": cost, "agent_cost": agent_cost(cost.agent_id)}
