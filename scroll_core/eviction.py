"""Eviction: Algorithm 1, which bounds the working view without losing anything.

Order, cheapest recovery first (DESIGN.md, "Eviction"):

1. persist live turns (the caller appends them to the Event Log; ``compress`` syncs them in);
2. count; stop if at or below the trigger;
3. batch-fold completed tool results into ``[scroll folded]`` pointers, largest saving first,
   skipping the active turn, the ``protected_recent_tool_results`` newest results and results
   of ``pre_trim_min_chars`` or fewer characters; stop if that got the view to the low-water
   mark (``fold_low_water``, well under the trigger), else go on, so that the middle of the
   view is rewritten once (fold and eviction together) rather than by a fold every few calls;
4. split pairing-safely (a tool call and its result never separate; the active turn stays)
   into an evicted middle and a protected tail of ``tail_tokens``; add the middle to the index
   as one tier-0 block carrying its turns' headlines; rebuild; if what stayed live is still
   over the tail (a long active turn), fold its older results in the same rewrite;
5. if still over, fold the remaining live results one at a time (the active turn's last);
6. if the view is still over the hard limit, raise ``ContextWindowUnfit``.

Folding and eviction only change which seqs the view shows; the Event Log is never written.
The reference's lossy "continuation summary" (an LLM call the paper never mentions) is not
built.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import ContextWindowUnfit
from .profile import Profile
from .store import KIND_MODEL_TURN, KIND_TOOL_RESULT, EventStore
from .telemetry import span
from .tokens import TokenCounter
from .view import (
    MESSAGE_OVERHEAD_TOKENS,
    ContextState,
    Digest,
    Prefix,
    ViewEntry,
    WorkingView,
    build_view,
    is_tool_call,
    is_user_message,
    result_chars,
)

__all__ = ["CompressAction", "CompressRecord", "compress", "fold_low_water", "split_point"]

CompressAction = Literal["none", "prefold", "evict", "live_fold"]


@dataclass(frozen=True)
class CompressRecord:
    """What one ``compress`` did, for telemetry and the console.

    ``action`` is the last step that ran. Seqs are listed for every fold; ``evicted`` is the
    seq range given to the index (None when nothing was evicted).
    """

    action: CompressAction
    forced: bool
    tokens_before: int
    tokens_after: int
    trigger_tokens: int
    hard_limit: int
    pre_folded: tuple[int, ...] = ()
    pre_folded_saved: int = 0
    evicted: tuple[int, int] | None = None
    evicted_events: int = 0
    evicted_tokens: int = 0
    evicted_headlines: tuple[str | None, ...] = ()
    index_block: str | None = None
    live_folded: tuple[int, ...] = ()
    active_folded: tuple[int, ...] = ()
    duration_ms: float = 0.0
    view: WorkingView | None = field(default=None, repr=False, compare=False)

    @property
    def compacted(self) -> bool:
        """True when the view changed (``gen_ai.conversation.compacted``)."""
        return self.action != "none"

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "forced": self.forced,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "trigger_tokens": self.trigger_tokens,
            "hard_limit": self.hard_limit,
            "pre_folded": list(self.pre_folded),
            "pre_folded_saved": self.pre_folded_saved,
            "evicted": list(self.evicted) if self.evicted else None,
            "evicted_events": self.evicted_events,
            "evicted_tokens": self.evicted_tokens,
            "index_block": self.index_block,
            "live_folded": list(self.live_folded),
            "active_folded": list(self.active_folded),
            "duration_ms": round(self.duration_ms, 3),
            "report": self.view.report.to_dict() if self.view else None,
        }


def compress(
    state: ContextState,
    profile: Profile,
    *,
    log: EventStore,
    prefix: Prefix,
    digest: Digest | str | None = None,
    counter: TokenCounter | None = None,
    force: bool = False,
    previous: WorkingView | None = None,
) -> CompressRecord:
    """Run Algorithm 1 on ``state`` as one ``scroll.compress`` span; see ``_compress``.

    ``previous``, the view the last compress of ``state`` returned, makes the trigger check
    O(new events) rather than O(view): its entries are reused (``build_view``)."""
    with span(
        "scroll.compress",
        session=state.session_id,
        forced=force,
        context_size=profile.context_size,
        trigger_tokens=profile.trigger_tokens,
        hard_limit=profile.hard_limit,
    ) as traced:
        record = _compress(
            state,
            profile,
            log=log,
            prefix=prefix,
            digest=digest,
            counter=counter,
            force=force,
            previous=previous,
        )
        if traced.recording:
            traced.set(
                action=record.action,
                tokens_before=record.tokens_before,
                tokens_after=record.tokens_after,
                evicted_events=record.evicted_events or None,
                index_block=record.index_block,
                index_blocks=len(state.index.blocks),
            )
            traced.set_attributes({"gen_ai.conversation.compacted": bool(state.index.blocks)})
        return record


def _compress(
    state: ContextState,
    profile: Profile,
    *,
    log: EventStore,
    prefix: Prefix,
    digest: Digest | str | None,
    counter: TokenCounter | None,
    force: bool,
    previous: WorkingView | None = None,
) -> CompressRecord:
    """Run Algorithm 1 on ``state`` and return what it did, with the resulting view.

    ``force`` (after a provider's context-overflow error) runs the folding and eviction
    steps even when the count says the view fits: eligible results are pre-folded and the
    middle is evicted down to the protected tail.

    Raises ``ContextWindowUnfit`` when even the prefix plus the active turn, every result
    folded, is over the hard limit; the state then keeps what was folded and evicted (all of
    it is still in the log) so the caller can report it.
    """
    started = time.perf_counter()
    counter = counter or log.tokens
    if state.index.tier_cap != profile.tier_cap:
        state.index = state.index.retier(profile.tier_cap)
    state.sync(log)

    def view() -> WorkingView:
        return build_view(
            state,
            profile,
            log=log,
            prefix=prefix,
            digest=digest,
            counter=counter,
            previous=current,
        )

    current: WorkingView | None = previous

    def done(action: CompressAction, current: WorkingView, **kw: Any) -> CompressRecord:
        return CompressRecord(
            action=action,
            forced=force,
            tokens_before=before,
            tokens_after=current.tokens,
            trigger_tokens=trigger,
            hard_limit=profile.hard_limit,
            duration_ms=(time.perf_counter() - started) * 1000,
            view=current,
            **kw,
        )

    current = view()
    before, trigger = current.tokens, profile.trigger_tokens
    if before <= trigger and not force:
        return done("none", current)

    # Step 3: batch-fold every eligible completed result, largest saving first. A fold
    # rewrites the view from the first folded result on, so the provider's prompt cache
    # writes all of it again; folding alone ends the compress only when it gets the view to
    # the low-water mark (``fold_low_water``), well under the trigger, else the middle is
    # evicted in the same rewrite (step 4). A fold that only got the view just under the
    # trigger was crossed again a few calls later, and every such fold cost a rewrite.
    active_at = _active_index(current.entries, state.active_start)
    pre_folded: list[int] = []
    saved = 0
    candidates = _prefold_candidates(current.entries, active_at, state, profile, counter)
    if candidates:
        with span("scroll.fold", mode="prefold") as traced:
            for entry, saving in candidates:
                state.folded.add(entry.event.seq)
                pre_folded.append(entry.event.seq)
                saved += saving
            current = view()
            traced.set(folds=len(pre_folded), seqs=pre_folded, tokens_saved=saved)
    record: dict[str, Any] = {"pre_folded": tuple(pre_folded), "pre_folded_saved": saved}
    if current.tokens <= fold_low_water(profile) and not force:
        return done("prefold", current, **record)

    # Step 4: evict the middle into the index, keeping the protected tail and active turn.
    action: CompressAction = "prefold"
    entries = current.entries
    cut = split_point(entries, _active_index(entries, state.active_start), profile.tail_tokens)
    if cut > 0:
        middle = entries[:cut]
        headlines = _span_headlines(middle)
        raw_tokens = sum(e.event.tokens for e in middle)
        with span(
            "scroll.evict",
            seq_lo=middle[0].event.seq,
            seq_hi=middle[-1].event.seq,
            events=len(middle),
            tokens=raw_tokens,
            tier=0,
            headlines=[h for h in headlines if h],
        ) as traced:
            block = state.index.add_eviction(
                middle[0].event.seq,
                middle[-1].event.seq,
                headlines,
                events=len(middle),
                tokens=raw_tokens,
            )
            # The one invariant to watch: an EvictionIndexError here marks this span failed,
            # which the console turns into an index-gap alert.
            state.index.check()
            state.drop(e.event.seq for e in middle)
            current = view()
            traced.set(block=block.key, tier_profile=[len(t) for t in state.index.tiers])
        action = "evict"
        record.update(
            evicted=(block.lo_seq, block.hi_seq),
            evicted_events=len(middle),
            evicted_tokens=raw_tokens,
            evicted_headlines=tuple(headlines),
            index_block=block.key,
        )
        current = _fold_to_tail(current, state, profile, counter, view, record)

    # Step 5: fold what is still live, one at a time, the active turn's results last.
    if current.tokens > trigger:
        active_at = _active_index(current.entries, state.active_start)
        total = current.tokens
        live_folded: list[int] = []
        active_folded: list[int] = []
        for entry, saving, in_active in _live_fold_order(
            current.entries, active_at, state, counter
        ):
            if total <= trigger:
                break
            with span("scroll.fold", mode="live_fold", seq=entry.event.seq, active=in_active) as f:
                state.folded.add(entry.event.seq)
                f.set(tokens_saved=saving)
            total -= saving
            (active_folded if in_active else live_folded).append(entry.event.seq)
        if live_folded or active_folded:
            current = view()
            action = "live_fold"
            record.update(
                live_folded=(*record.get("live_folded", ()), *live_folded),
                active_folded=(*record.get("active_folded", ()), *active_folded),
            )

    # Step 6: nothing else can go without losing the active turn.
    if current.tokens > profile.hard_limit:
        raise ContextWindowUnfit(
            tokens=current.tokens,
            hard_limit=profile.hard_limit,
            context_size=profile.context_size,
            sections=current.report.sections(),
        )
    return done(action, current, **record)


def _fold_to_tail(
    current: WorkingView,
    state: ContextState,
    profile: Profile,
    counter: TokenCounter,
    view: Callable[[], WorkingView],
    record: dict[str, Any],
) -> WorkingView:
    """Step 4, end: fold, in the rewrite the eviction makes anyway, the older results of the
    live turns still over the protected tail, largest saving first.

    The cut never enters the active turn, so a long one (a task of a dozen tool calls) stays
    whole: the view left after an eviction could be several times the tail, and the next
    eviction, which rewrites every token after the front again, came that much sooner. The
    ``protected_recent_tool_results`` newest results and short results stay.
    """
    excess = sum(e.tokens for e in current.entries) - profile.tail_tokens
    if excess <= 0:
        return current
    active_at = _active_index(current.entries, state.active_start)
    active_from = None if active_at is None else current.entries[active_at].event.seq
    chosen: list[tuple[int, int]] = []
    for entry, saving in _prefold_candidates(current.entries, None, state, profile, counter):
        if excess <= 0:
            break
        chosen.append((entry.event.seq, saving))
        excess -= saving
    if not chosen:
        return current
    live: list[int] = []
    active: list[int] = []
    with span("scroll.fold", mode="tail") as traced:
        for seq, _ in chosen:
            state.folded.add(seq)
            (active if active_from is not None and seq >= active_from else live).append(seq)
        saved = sum(saving for _, saving in chosen)
        traced.set(folds=len(chosen), seqs=live + active, tokens_saved=saved)
    record.update(live_folded=tuple(live), active_folded=tuple(active))
    return view()


# Where a fold alone must bring the view, as a share of the way from the trigger down to the
# protected tail: 0 is the trigger itself (fold just enough, the earlier behaviour), 1 the
# tail (fold only together with an eviction). Chosen on the dev sessions of
# ``bench/gateway_cost.py`` (cost with the providers' prompt caches counted).
FOLD_LOW_WATER_SHARE = 1.0


def fold_low_water(profile: Profile) -> int:
    """The view size a pre-fold alone must reach to end a compress without an eviction."""
    trigger, tail = profile.trigger_tokens, profile.tail_tokens
    return trigger - int(FOLD_LOW_WATER_SHARE * max(0, trigger - tail))


def _active_index(entries: Sequence[ViewEntry], active_start: int | None) -> int | None:
    """Position of the first entry of the active turn, or None when no turn is active."""
    if active_start is None:
        return None
    for i, entry in enumerate(entries):
        if entry.event.seq >= active_start:
            return i
    return None


def _foldable(entry: ViewEntry) -> bool:
    return entry.event.kind == KIND_TOOL_RESULT and not entry.folded


def _prefold_candidates(
    entries: Sequence[ViewEntry],
    active_at: int | None,
    state: ContextState,
    profile: Profile,
    counter: TokenCounter,
) -> list[tuple[ViewEntry, int]]:
    results = [i for i, e in enumerate(entries) if e.event.kind == KIND_TOOL_RESULT]
    keep = profile.protected_recent_tool_results
    protected = set(results[-keep:]) if keep else set()
    out: list[tuple[ViewEntry, int]] = []
    for i in results:
        entry = entries[i]
        if entry.folded or i in protected or (active_at is not None and i >= active_at):
            continue
        if result_chars(entry.event) <= profile.pre_trim_min_chars:
            continue
        saving = _fold_saving(entry, state, counter)
        if saving > 0:
            out.append((entry, saving))
    out.sort(key=lambda pair: (-pair[1], pair[0].event.seq))
    return out


def _live_fold_order(
    entries: Sequence[ViewEntry],
    active_at: int | None,
    state: ContextState,
    counter: TokenCounter,
) -> list[tuple[ViewEntry, int, bool]]:
    completed: list[tuple[ViewEntry, int, bool]] = []
    active: list[tuple[ViewEntry, int, bool]] = []
    for i, entry in enumerate(entries):
        if not _foldable(entry):
            continue
        saving = _fold_saving(entry, state, counter)
        if saving <= 0:
            continue
        in_active = active_at is not None and i >= active_at
        (active if in_active else completed).append((entry, saving, in_active))
    completed.sort(key=lambda item: (-item[1], item[0].event.seq))
    active.sort(key=lambda item: (-item[1], item[0].event.seq))
    return completed + active


def _fold_saving(entry: ViewEntry, state: ContextState, counter: TokenCounter) -> int:
    """Tokens the view loses when ``entry`` becomes its pointer (message overhead stays)."""
    _, stub_tokens = state.stub(entry.event, counter)
    content_tokens = entry.tokens - MESSAGE_OVERHEAD_TOKENS
    return content_tokens - stub_tokens


def split_point(entries: Sequence[ViewEntry], active_at: int | None, tail_tokens: int) -> int:
    """How many leading entries to evict: the earliest safe cut whose tail fits in
    ``tail_tokens``, or the latest safe cut when none fits; never past the active turn.

    A cut is safe when no tool call before it has its result after it, and it does not fall
    between a tool result and its call or inside one assistant message's tool calls. Cuts at
    the start of a user turn are preferred, so a turn and the headline that closes it leave
    together; other safe cuts are used only when the view holds no such boundary.
    """
    # With no active turn, keep at least the last message.
    limit = max(0, len(entries) - 1) if active_at is None else active_at
    suffix = [0] * (len(entries) + 1)
    for i in range(len(entries) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + entries[i].tokens
    open_calls: set[str] = set()
    safe: list[int] = []
    for i in range(1, limit + 1):
        prev = entries[i - 1].event
        if is_tool_call(prev) and prev.tool_call_id:
            open_calls.add(prev.tool_call_id)
        elif prev.kind == KIND_TOOL_RESULT and prev.tool_call_id:
            open_calls.discard(prev.tool_call_id)
        if i < len(entries) and _safe_cut(entries[i - 1], entries[i], open_calls):
            safe.append(i)
    turns = [i for i in safe if is_user_message(entries[i].event)]
    cuts = turns or safe
    for i in cuts:
        if suffix[i] <= tail_tokens:
            return i
    return cuts[-1] if cuts else 0


def _safe_cut(before: ViewEntry, after: ViewEntry, open_calls: set[str]) -> bool:
    if open_calls:
        return False
    nxt = after.event
    if nxt.kind == KIND_TOOL_RESULT:
        return False  # a result whose call is unknown or already closed stays with its group
    # The calls of one assistant message stay together.
    return not (is_tool_call(nxt) and before.event.kind == KIND_MODEL_TURN)


def _span_headlines(middle: Sequence[ViewEntry]) -> list[str | None]:
    """One entry per turn of the evicted span: its model turns' headlines, or None (shown as
    ``(no milestone)``) for a turn without one."""
    out: list[str | None] = []
    turn: list[str] = []
    started = False
    for entry in middle:
        event = entry.event
        if is_user_message(event) and started:
            out.extend(turn or [None])
            turn = []
        started = True
        if event.kind == KIND_MODEL_TURN and event.headline:
            turn.append(event.headline)
    if started:
        out.extend(turn or [None])
    return out
