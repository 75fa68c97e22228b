"""Replay a ``Trace`` under a profile and a policy: the view every recorded model call would
have seen, rebuilt deterministically with no model call and no kernel.

Policies, all on the same trace, the same call points and the same window:

``scroll``     Algorithm 1 (``compress``): fold, evict into the tiered index.
``flat``       the same, with an index that never carries into tiers (offload, flat index).
``none``       no management: every event stays in the view; reports the first call whose
               view is over the window.
``summarise``  summarise-and-discard: the same trigger and pairing-safe split, but each
               evicted span is replaced by a fixed-size summary that keeps at most
               ``keep`` of its events (the facts a summariser chose), and the rest is gone.
               Summaries past the archive budget (the share of the window Scroll gives its
               index) merge pairwise, keeping ``keep`` facts again. Which facts survive is
               decided by a stable hash of each event: a summariser whose choices do not
               know what will be asked later. Retrying gives the same loss.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from .. import telemetry
from ..errors import ContextWindowUnfit, ScrollError
from ..eviction import CompressRecord, compress, split_point
from ..profile import Profile
from ..prompts import RECALL_TOOL, system_prompt, tool_definitions
from ..store import KIND_MODEL_TURN, EventStore
from ..tokens import TokenCounter, default_counter
from ..view import ContextState, Prefix, ViewEntry, WorkingView, build_view
from .source import DigestStandIn, SizedCounter, TraceLog
from .trace import CallPoint, CompressPoint, Trace

__all__ = [
    "FLAT_TIER_CAP",
    "POLICIES",
    "CallView",
    "CompressOutcome",
    "Observer",
    "Policy",
    "ReplayResult",
    "SummaryOptions",
    "replay",
]

Policy = Literal["scroll", "flat", "none", "summarise"]
POLICIES: tuple[Policy, ...] = ("scroll", "flat", "none", "summarise")
# Called with each call's rebuilt view (scroll and flat policies); returning True stops the
# replay there (the context window inspector rebuilds one call this way).
Observer = Callable[[CallPoint, WorkingView, ContextState], bool | None]
# A tier that never fills: every eviction stays its own block (a flat index).
FLAT_TIER_CAP = 2**31 - 1


@dataclass(frozen=True)
class SummaryOptions:
    """Summarise-and-discard: ``tokens`` per summary (None: ``min(1500, half the index
    budget)``, at least 16) and ``keep`` facts per summary."""

    tokens: int | None = None
    keep: int = 3

    def size(self, profile: Profile) -> int:
        if self.tokens is not None:
            return self.tokens
        return max(16, min(1500, profile.index_budget_tokens // 2))


@dataclass(frozen=True)
class CallView:
    """What one model call would have seen."""

    index: int
    seq: int
    turn: int | None
    step: int | None
    sections: dict[str, int]
    total: int
    prefill: int
    index_blocks: int
    tier_profile: tuple[int, ...]
    index_level: str
    visible: frozenset[int] = field(repr=False)
    folded: frozenset[int] = field(repr=False)
    coverage: tuple[tuple[int, int], ...] = field(repr=False)
    units: tuple[tuple[str, int], ...] = field(repr=False)
    recorded_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "call": self.index,
            "seq": self.seq,
            "turn": self.turn,
            "step": self.step,
            "sections": dict(self.sections),
            "total": self.total,
            "prefill": self.prefill,
            "live": len(self.visible) + len(self.folded),
            "folded": len(self.folded),
            "index_blocks": self.index_blocks,
            "tier_profile": list(self.tier_profile),
            "index_level": self.index_level,
            "recorded_tokens": self.recorded_tokens,
        }


@dataclass(frozen=True)
class CompressOutcome:
    """What one replayed compress did."""

    seq: int
    reason: str
    turn: int | None
    step: int | None
    action: str
    forced: bool
    tokens_before: int
    tokens_after: int
    evicted: tuple[int, int] | None = None
    folded: tuple[int, ...] = ()
    unfit: bool = False

    @classmethod
    def of(cls, point: CompressPoint, record: CompressRecord) -> CompressOutcome:
        return cls(
            point.seq,
            point.reason,
            point.turn,
            point.step,
            record.action,
            record.forced,
            record.tokens_before,
            record.tokens_after,
            record.evicted,
            record.pre_folded + record.live_folded + record.active_folded,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "reason": self.reason,
            "turn": self.turn,
            "step": self.step,
            "action": self.action,
            "forced": self.forced,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "evicted": list(self.evicted) if self.evicted else None,
            "folds": len(self.folded),
            "unfit": self.unfit,
        }


@dataclass
class ReplayResult:
    """Figures of one replay; ``to_dict()`` is what the command prints."""

    session_id: str
    policy: Policy
    profile: Profile
    calls: list[CallView]
    compresses: list[CompressOutcome]
    notes: list[str] = field(default_factory=list)
    summary_facts: dict[int, int] = field(default_factory=dict)  # fact seq -> call it was lost
    summaries: int = 0

    # -------------------------------------------------------------- figures
    @property
    def billed_prompt_tokens(self) -> int:
        return sum(c.total for c in self.calls)

    @property
    def prefill_tokens(self) -> int:
        return sum(c.prefill for c in self.calls)

    @property
    def evictions(self) -> int:
        return sum(1 for c in self.compresses if c.evicted is not None)

    @property
    def folds(self) -> int:
        return sum(len(c.folded) for c in self.compresses)

    @property
    def peak_view(self) -> int:
        return max((c.total for c in self.calls), default=0)

    @property
    def overflow(self) -> CallView | None:
        """The first call whose view is over the window C."""
        return next((c for c in self.calls if c.total > self.profile.context_size), None)

    @property
    def unfit(self) -> int:
        return sum(1 for c in self.compresses if c.unfit)

    def summary(self) -> dict[str, Any]:
        last = self.calls[-1] if self.calls else None
        over = self.overflow
        return {
            "session_id": self.session_id,
            "policy": self.policy,
            "calls": len(self.calls),
            "billed_prompt_tokens": self.billed_prompt_tokens,
            "prefill_tokens": self.prefill_tokens,
            "evictions": self.evictions,
            "folds": self.folds,
            "peak_view": self.peak_view,
            "context_size": self.profile.context_size,
            "trigger_tokens": self.profile.trigger_tokens,
            "peak_over_context": round(self.peak_view / self.profile.context_size, 4),
            "overflow": None
            if over is None
            else {
                "call": over.index,
                "turn": over.turn,
                "step": over.step,
                "seq": over.seq,
                "tokens": over.total,
            },
            "unfit_compresses": self.unfit,
            "index": {
                "blocks": last.index_blocks if last else 0,
                "tier_profile": list(last.tier_profile) if last else [],
                "level": last.index_level if last else "empty",
            },
            "summaries": self.summaries if self.policy == "summarise" else None,
        }

    def to_dict(self, *, per_call: bool = True) -> dict[str, Any]:
        out = self.summary()
        out["profile"] = self.profile.to_dict()
        out["notes"] = list(self.notes)
        if per_call:
            out["per_call"] = [c.to_dict() for c in self.calls]
            out["compresses"] = [c.to_dict() for c in self.compresses]
        return out


# ---------------------------------------------------------------------- replay
def replay(
    trace: Trace,
    profile: Profile,
    policy: Policy = "scroll",
    *,
    counter: TokenCounter | None = None,
    system: str | None = None,
    summary: SummaryOptions | None = None,
    profiles: Sequence[Profile] | None = None,
    observe: Observer | None = None,
) -> ReplayResult:
    """Rebuild every call's view of ``trace`` under ``profile`` and ``policy``.

    ``profiles``, one per compress point of the trace (in order), replays each compress under
    the profile that was in force when it ran (a session tuned mid-run); ``profile`` then
    only names the run's figures (window, trigger). ``observe`` sees each call's view.
    """
    if policy not in POLICIES:
        raise ScrollError(f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")
    if profiles is not None and len(profiles) != len(trace.compresses):
        raise ScrollError(
            f"{len(profiles)} profiles given for {len(trace.compresses)} compress points"
        )
    counter = counter or trace.counter or default_counter()
    sized = SizedCounter(counter)
    # The loop builds its prefix once, from the profile it started with.
    first = profiles[0] if profiles else profile
    prefix = Prefix.build(
        system if system is not None else system_prompt(print_cap=first.print_cap),
        tool_definitions(),
        counter=counter,
    )
    result = ReplayResult(trace.session_id, policy, profile, [], [], notes=list(trace.notes))
    recorded_prefix = next(
        (p.recorded.prefix_tokens for p in trace.compresses if p.recorded is not None), None
    )
    if recorded_prefix is not None and recorded_prefix != prefix.tokens:
        result.notes.append(
            f"the recorded prefix was {recorded_prefix} tokens, the replayed one {prefix.tokens} "
            "(another system prompt or print cap): views differ by that much"
        )
    source = TraceLog(trace.session_id, trace.events, counter)
    # A replay only reads: the compresses it runs are not the session's (no spans).
    with telemetry.quiet():
        if policy in ("scroll", "flat"):
            used = list(profiles) if profiles else [profile] * len(trace.compresses)
            if policy == "flat":
                used = [p.replace(tier_cap=FLAT_TIER_CAP) for p in used]
            _run_compressing(trace, used, prefix, source, sized, result, observe)
        elif policy == "none":
            _run_unmanaged(trace, profile, prefix, source, sized, result)
        else:
            summary = summary or SummaryOptions()
            _run_summarise(trace, profile, prefix, source, sized, result, summary)
    return result


def _log(source: TraceLog) -> EventStore:
    return cast(EventStore, source)


def _run_compressing(
    trace: Trace,
    profiles: Sequence[Profile],
    prefix: Prefix,
    source: TraceLog,
    counter: SizedCounter,
    result: ReplayResult,
    observe: Observer | None = None,
) -> None:
    profile = profiles[0] if profiles else result.profile
    state = ContextState.new(trace.session_id, tier_cap=profile.tier_cap)
    view: WorkingView | None = None
    digest = DigestStandIn(0)
    compresses = iter(profiles)
    for point in trace.timeline:
        if isinstance(point, CompressPoint):
            profile = next(compresses)
            source.bound = point.seq
            digest = DigestStandIn(point.digest_tokens)
            try:
                record = compress(
                    state,
                    profile,
                    log=_log(source),
                    prefix=prefix,
                    digest=digest,
                    counter=counter,
                    force=point.forced,
                )
            except ContextWindowUnfit as exc:
                view = build_view(
                    state, profile, log=_log(source), prefix=prefix, digest=digest, counter=counter
                )
                result.compresses.append(
                    CompressOutcome(
                        point.seq,
                        point.reason,
                        point.turn,
                        point.step,
                        "unfit",
                        point.forced,
                        exc.tokens,
                        view.tokens,
                        unfit=True,
                    )
                )
                continue
            view = record.view
            result.compresses.append(CompressOutcome.of(point, record))
        else:
            if view is None:
                view = build_view(
                    state, profile, log=_log(source), prefix=prefix, digest=digest, counter=counter
                )
            result.calls.append(_snapshot(point, view, state, result.calls))
            if observe is not None and observe(point, view, state):
                return


def _run_unmanaged(
    trace: Trace,
    profile: Profile,
    prefix: Prefix,
    source: TraceLog,
    counter: SizedCounter,
    result: ReplayResult,
) -> None:
    state = ContextState.new(trace.session_id, tier_cap=profile.tier_cap)
    digest = DigestStandIn(0)
    for point in trace.timeline:
        if isinstance(point, CompressPoint):
            source.bound = point.seq
            digest = DigestStandIn(point.digest_tokens)
            state.sync(_log(source))
        else:
            view = build_view(
                state, profile, log=_log(source), prefix=prefix, digest=digest, counter=counter
            )
            result.calls.append(_snapshot(point, view, state, result.calls))
    over = result.overflow
    if over is not None:
        result.notes.append(
            f"unmanaged, the view passes the {profile.context_size:,}-token window at call "
            f"{over.index} (turn {over.turn}, step {over.step}, {over.total:,} tokens)"
        )


@dataclass
class _Summary:
    lo: int
    hi: int
    facts: tuple[int, ...]
    tokens: int

    @property
    def key(self) -> str:
        return f"summary:{self.lo}-{self.hi}:{','.join(map(str, self.facts))}"


def salience(seq: int, content: str) -> float:
    """A stable score in [0, 1): what a summariser that cannot know the future keeps."""
    digest = hashlib.sha256(f"{seq}\x00{content}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _is_fact(entry: ViewEntry) -> bool:
    """Events that carry content worth keeping (not the calls, not recall printouts)."""
    event = entry.event
    if event.kind == KIND_MODEL_TURN and event.tool_call_id is not None:
        return False
    return event.name != RECALL_TOOL and bool(event.content.strip())


def _keep(candidates: Iterable[tuple[int, str]], keep: int) -> tuple[int, ...]:
    ranked = sorted(candidates, key=lambda c: (-salience(*c), c[0]))
    return tuple(sorted(seq for seq, _ in ranked[:keep]))


def _run_summarise(
    trace: Trace,
    profile: Profile,
    prefix: Prefix,
    source: TraceLog,
    counter: SizedCounter,
    result: ReplayResult,
    options: SummaryOptions,
) -> None:
    state = ContextState.new(trace.session_id, tier_cap=profile.tier_cap)
    size = options.size(profile)
    budget = max(size, profile.index_budget_tokens)
    content = {e.seq: e.content for e in trace.events}
    summaries: list[_Summary] = []
    lost = result.summary_facts
    digest = DigestStandIn(0)
    view: WorkingView | None = None

    def build() -> WorkingView:
        return build_view(
            state, profile, log=_log(source), prefix=prefix, digest=digest, counter=counter
        )

    def total(v: WorkingView) -> int:
        return v.tokens + sum(s.tokens for s in summaries)

    calls_so_far = 0
    for point in trace.timeline:
        if isinstance(point, CallPoint):
            if view is None:
                view = build()
            result.calls.append(_snapshot(point, view, state, result.calls, summaries))
            calls_so_far += 1
            continue
        source.bound = point.seq
        digest = DigestStandIn(point.digest_tokens)
        state.sync(_log(source))
        view = build()
        before = total(view)
        evicted: tuple[int, int] | None = None
        if before > profile.trigger_tokens or point.forced:
            entries = view.entries
            active_at = _active_index(entries, state.active_start)
            cut = split_point(entries, active_at, profile.tail_tokens)
            if cut > 0:
                middle = entries[:cut]
                facts = [(e.event.seq, e.event.content) for e in middle if _is_fact(e)]
                kept = _keep(facts, options.keep)
                for seq, _ in facts:
                    if seq not in kept:
                        lost.setdefault(seq, calls_so_far)
                lo, hi = middle[0].event.seq, middle[-1].event.seq
                summaries.append(_Summary(lo, hi, kept, size))
                state.drop(e.event.seq for e in middle)
                evicted = (lo, hi)
                result.summaries += 1
                while len(summaries) > 1 and sum(s.tokens for s in summaries) > budget:
                    a, b = summaries[0], summaries[1]
                    union = [(s, content[s]) for s in a.facts + b.facts]
                    merged = _keep(union, options.keep)
                    for seq in a.facts + b.facts:
                        if seq not in merged:
                            lost.setdefault(seq, calls_so_far)
                    summaries[:2] = [_Summary(a.lo, b.hi, merged, size)]
                view = build()
        after = total(view)
        result.compresses.append(
            CompressOutcome(
                point.seq,
                point.reason,
                point.turn,
                point.step,
                "summarise" if evicted else "none",
                point.forced,
                before,
                after,
                evicted,
                unfit=after > profile.hard_limit,
            )
        )


def _active_index(entries: Sequence[ViewEntry], active_start: int | None) -> int | None:
    if active_start is None:
        return None
    for i, entry in enumerate(entries):
        if entry.event.seq >= active_start:
            return i
    return None


def _snapshot(
    point: CallPoint,
    view: WorkingView,
    state: ContextState,
    earlier: Sequence[CallView],
    summaries: Sequence[_Summary] = (),
) -> CallView:
    report = view.report
    units: list[tuple[str, int]] = [(f"prefix:{report.prefix}", report.prefix)]
    units += [(s.key, s.tokens) for s in summaries]
    if view.archive:
        key = hashlib.sha1(view.archive.encode()).hexdigest()[:16]
        units.append((f"archive:{key}", report.index + report.digest))
    units += [(f"{e.event.seq}:{'f' if e.folded else 'l'}", e.tokens) for e in view.entries]
    sections = report.sections()
    if summaries:
        sections["summaries"] = sum(s.tokens for s in summaries)
    total = sum(t for _, t in units)
    previous = earlier[-1].units if earlier else ()
    shared = 0
    for mine, theirs in zip(units, previous, strict=False):
        if mine != theirs:
            break
        shared += mine[1]
    kept = {seq for s in summaries for seq in s.facts}
    return CallView(
        index=point.index,
        seq=point.seq,
        turn=point.turn,
        step=point.step,
        sections=sections,
        total=total,
        prefill=total - shared,
        index_blocks=report.index_blocks if not summaries else len(summaries),
        tier_profile=tuple(state.index.tier_profile()) if len(state.index) else (),
        index_level=report.index_level,
        visible=frozenset(e.event.seq for e in view.entries if not e.folded) | kept,
        folded=frozenset(e.event.seq for e in view.entries if e.folded),
        coverage=tuple(state.index.coverage()),
        units=tuple(units),
        recorded_tokens=point.input_tokens,
    )


def block_of(call: CallView, seq: int) -> tuple[int, int] | None:
    """The evicted block holding ``seq`` in ``call``'s index, or None."""
    los = [lo for lo, _ in call.coverage]
    i = bisect.bisect_right(los, seq) - 1
    if i >= 0 and call.coverage[i][0] <= seq <= call.coverage[i][1]:
        return call.coverage[i]
    return None


def facts_status(result: ReplayResult, facts: Mapping[str, int]) -> dict[str, dict[str, Any]]:
    """Where each named fact (a seq) stands after the last call: in view, folded (recall its
    tool call), evicted (recoverable by address), in a summary, or discarded."""
    last = result.calls[-1] if result.calls else None
    out: dict[str, dict[str, Any]] = {}
    for name, seq in facts.items():
        status: str
        how: str | None = None
        if result.policy == "summarise" and seq in result.summary_facts:
            status = "discarded"
        elif last is not None and seq in last.folded:
            status, how = "folded", f"ms.expand({seq})"
        elif last is not None and (block := block_of(last, seq)) is not None:
            status, how = "evicted", f"ms.expand({seq}) (index block seq {block[0]}-{block[1]})"
        elif last is not None and seq in last.visible:
            summarised = result.policy == "summarise" and _summarised(last, seq)
            status = "in_summary" if summarised else "in_view"
        elif last is not None and seq > last.seq:
            status = "after_last_call"
        else:
            status = "discarded" if result.policy == "summarise" else "not_in_view"
        out[name] = {
            "seq": seq,
            "status": status,
            "reachable": status != "discarded",
            "recover_with": how,
            "lost_at_call": result.summary_facts.get(seq),
        }
    return out


def _summarised(call: CallView, seq: int) -> bool:
    return any(
        u.startswith("summary:") and str(seq) in u.rsplit(":", 1)[1].split(",")
        for u, _ in call.units
    )
