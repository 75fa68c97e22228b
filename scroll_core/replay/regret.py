"""Regret of a replay against the recorded run, and how well a replay reproduces it.

Needless retrievals: recorded ``ms.expand`` / ``ms.recall_tool`` calls whose every target
seq was still in the replayed view of the call that wrote the cell (the model could have read
it instead). Retrievals now needed: events the recorded run had in its view at a call that the
replay had evicted (grouped by the index block holding them), folded (one ``recall_tool``
away) or, under summarise-and-discard, destroyed. The recorded run's views are its own
profile's replay, which ``reproduction`` checks against the recorded compresses.
"""

from __future__ import annotations

from typing import Any

from .engine import ReplayResult, block_of
from .trace import Trace

__all__ = ["regret", "reproduction"]

_LISTED = 20


def regret(trace: Trace, result: ReplayResult, recorded: ReplayResult) -> dict[str, Any]:
    """Regret of ``result`` against ``recorded`` (both replays of ``trace``)."""
    if len(result.calls) != len(recorded.calls):
        raise ValueError("the two replays are not of the same trace")
    needless: list[dict[str, Any]] = []
    unreachable: list[dict[str, Any]] = []
    for r in trace.retrievals:
        call = result.calls[r.call]
        targets = set(r.seqs)
        if targets and targets <= call.visible:
            needless.append({"call": r.call, "name": r.name, "seqs": _span(r.seqs)})
        gone = sorted(s for s in targets if result.summary_facts.get(s, 1 << 62) <= r.call)
        if gone:
            unreachable.append({"call": r.call, "name": r.name, "seqs": gone[:_LISTED]})

    seen: set[int] = set()
    spans: dict[tuple[int, int], int] = {}
    folded: list[int] = []
    destroyed: list[int] = []
    for mine, theirs in zip(result.calls, recorded.calls, strict=True):
        for seq in sorted(theirs.visible - mine.visible - seen):
            seen.add(seq)
            if seq in mine.folded:
                folded.append(seq)
            elif (block := block_of(mine, seq)) is not None:
                spans.setdefault(block, mine.index)
            elif seq in result.summary_facts:
                destroyed.append(seq)
    return {
        "retrievals_recorded": len(trace.retrievals),
        "retrieval_source": trace.retrievals[0].name if trace.retrievals else None,
        "needless_retrievals": len(needless),
        "needless": needless[:_LISTED],
        "retrievals_unreachable": len(unreachable),
        "unreachable": unreachable[:_LISTED],
        "evicted_spans_read_live": len(spans),
        "evicted_spans": [
            {"lo": lo, "hi": hi, "first_call": call} for (lo, hi), call in list(spans.items())
        ][:_LISTED],
        "evicted_events_read_live": sum(1 for s in seen if s not in folded and s not in destroyed),
        "folded_events_read_live": len(folded),
        "destroyed_events_read_live": len(destroyed),
    }


def reproduction(trace: Trace, result: ReplayResult) -> dict[str, Any]:
    """Compare a replay's compresses with the recorded ones (action, evicted range, folds and
    token counts where the records hold them) and each call's view with the size the model
    was given (where the step records or the log hold it)."""
    recorded = [p.recorded for p in trace.compresses]
    calls = [c for c in result.calls if c.recorded_tokens is not None]
    call_mismatches = [
        f"call {c.index} (turn {c.turn}, step {c.step}): view recorded {c.recorded_tokens}, "
        f"replayed {c.total}"
        for c in calls
        if c.recorded_tokens != c.total
    ]
    if len(recorded) != len(result.compresses):
        return {
            "checked": 0,
            "calls_checked": len(calls),
            "exact": False,
            "mismatches": [
                f"{len(result.compresses)} compresses replayed, {len(recorded)} recorded"
            ],
        }
    mismatches: list[str] = []
    checked = 0
    for i, (rec, got) in enumerate(zip(recorded, result.compresses, strict=True)):
        if rec is None:
            continue
        checked += 1
        where = f"compress {i} (turn {got.turn}, step {got.step}, {got.reason})"
        pairs: list[tuple[str, Any, Any]] = [("action", rec.action, got.action)]
        if rec.action is not None and rec.evicted != got.evicted:
            mismatches.append(
                f"{where}: evicted recorded {rec.evicted!r}, replayed {got.evicted!r}"
            )
        pairs += [
            ("tokens_before", rec.tokens_before, got.tokens_before),
            ("tokens_after", rec.tokens_after, got.tokens_after),
        ]
        if rec.folded is not None:
            pairs.append(("folded", rec.folded, got.folded))
        elif rec.folds is not None:
            pairs.append(("folds", rec.folds, len(got.folded)))
        for name, want, have in pairs:
            if want is not None and want != have:
                mismatches.append(f"{where}: {name} recorded {want!r}, replayed {have!r}")
    mismatches += call_mismatches
    return {
        "checked": checked,
        "calls_checked": len(calls),
        "exact": (checked > 0 or len(calls) > 0) and not mismatches,
        "mismatches": mismatches[:_LISTED],
    }


def _span(seqs: tuple[int, ...]) -> list[int]:
    return [min(seqs), max(seqs)] if seqs else []
