"""The cost of one agent step's context work, against the length of the history behind it.

    python bench/compress.py --json [--quick] [--steps N] [--large N]

For a history of 10,000 and of 1,000,000 events in one session (all but a live window
already evicted into the index), each step appends one turn (user message, tool call,
tool result, reply), then is timed doing what the agent loop does before a model call:
``state.sync`` (persist: pick up the appended events), ``build_view`` and ``compress``.
The view has the same size in both runs, so any difference is the history's fault.

``compress_ms_small`` / ``compress_ms_large``: median step time; ``compress_scaling_ratio``:
large over small (the aim is at most 1.5); ``compress_evict_ms_*``: median of the steps that
evicted; ``index_blocks``: blocks after 100 / 1,000 / 10,000 / 100,000 evictions.

The histories are written with ``append_many`` in batches of 50,000, counted with
``CharRatioCounter`` (tiktoken would spend minutes on a million rows and the step itself
never counts stored events) and appended with ``searchable=False`` (the FTS index plays no
part in compress). The timed steps' own events are ordinary, searchable appends.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import emit, median, percentile

from scroll_core import CharRatioCounter, ContextState, EventLog, EvictionIndex, Prefix, Profile
from scroll_core.eviction import compress
from scroll_core.prompts import system_prompt, tool_definitions
from scroll_core.view import build_view

SESSION = "bench"
BATCH = 50_000
EVENTS_PER_TURN = 4
EVENTS_PER_EVICTION = 100  # one eviction per ~25 turns of history
LIVE_EVENTS = 200
RESULT_CHARS = 1_600
COUNTER = CharRatioCounter()
# 16k tokens of window: the live window of 200 events is near the trigger, so a run of steps
# folds and evicts regularly (a bigger window only makes every step cheaper).
PROFILE = Profile(context_size=16_000)


def turn_rows(turn: int, *, searchable: bool) -> list[dict[str, Any]]:
    cid = f"call_{turn}"
    code = f"rows = ms.search('topic {turn % 97}', k=5)\nprint(rows[:3])"
    return [
        {
            "session_id": SESSION,
            "kind": "context_msg",
            "role": "user",
            "content": f"Question {turn}: what happened with topic {turn % 97}?",
            "searchable": searchable,
        },
        {
            "session_id": SESSION,
            "kind": "model_turn",
            "role": "assistant",
            "name": "recall_history_python",
            "tool_call_id": cid,
            "tool_input": {"code": code},
            "content": f"recall_history_python {code}",
            "searchable": searchable,
        },
        {
            "session_id": SESSION,
            "kind": "tool_result",
            "role": "tool",
            "name": "recall_history_python",
            "tool_call_id": cid,
            "content": (f"seq {turn} topic {turn % 97} " * 200)[:RESULT_CHARS],
            "searchable": searchable,
        },
        {
            "session_id": SESSION,
            "kind": "model_turn",
            "role": "assistant",
            "content": f"Topic {turn % 97} was settled in turn {turn}.",
            "headline": f"⟦topic {turn % 97} | status: answered; next: wait | anchors: t{turn}⟧",
            "searchable": searchable,
        },
    ]


def build_history(log: EventLog, events: int) -> None:
    turns = events // EVENTS_PER_TURN
    pending: list[dict[str, Any]] = []
    for turn in range(turns):
        pending.extend(turn_rows(turn, searchable=False))
        if len(pending) >= BATCH:
            log.append_many(pending)
            pending = []
    if pending:
        log.append_many(pending)


def state_over(log: EventLog, events: int) -> ContextState:
    """A state whose index covers all but the last LIVE_EVENTS events, in spans of 100."""
    index = EvictionIndex(tier_cap=PROFILE.tier_cap)
    first_live = events - LIVE_EVENTS + 1
    for lo in range(1, first_live, EVENTS_PER_EVICTION):
        hi = min(lo + EVENTS_PER_EVICTION - 1, first_live - 1)
        index.add_eviction(lo, hi, [f"⟦span {lo} | status: done; next: - | anchors: s{lo}⟧"])
    state = ContextState(session_id=SESSION, index=index, synced_seq=first_live - 1)
    state.sync(log)
    return state


def run(events: int, steps: int, prefix: Prefix) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        log = EventLog(Path(tmp) / "eventlog.sqlite3", token_counter=COUNTER)
        started = time.perf_counter()
        build_history(log, events)
        built_s = time.perf_counter() - started
        state = state_over(log, events)
        first_turn = events // EVENTS_PER_TURN
        times: list[float] = []
        evict_times: list[float] = []
        view_tokens: list[int] = []
        actions: dict[str, int] = {}
        for step in range(steps):
            log.append_many(turn_rows(first_turn + step, searchable=True))
            t0 = time.perf_counter()
            state.sync(log)
            build_view(state, PROFILE, log=log, prefix=prefix, counter=COUNTER)
            record = compress(state, PROFILE, log=log, prefix=prefix, counter=COUNTER)
            elapsed = (time.perf_counter() - t0) * 1000
            times.append(elapsed)
            if record.evicted is not None:
                evict_times.append(elapsed)
            actions[record.action] = actions.get(record.action, 0) + 1
            view_tokens.append(record.tokens_after)
        state.index.check()
        log.close()
    return {
        "median_ms": median(times),
        "p90_ms": percentile(times, 90),
        "evict_median_ms": median(evict_times),
        "actions": actions,
        "view_tokens_median": median([float(v) for v in view_tokens]),
        "history_build_s": round(built_s, 1),
        "index_blocks": len(state.index),
    }


def index_blocks() -> dict[str, int]:
    out = {}
    for n in (100, 1_000, 10_000, 100_000):
        index = EvictionIndex(tier_cap=10)
        for i in range(n):
            index.add_eviction(i + 1, i + 1, ())
        index.check()
        out[str(n)] = len(index)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="100,000 events instead of 1M")
    parser.add_argument("--steps", type=int, default=200, help="timed steps per history")
    parser.add_argument("--large", type=int, default=None, help="events in the large history")
    args = parser.parse_args()
    large = args.large or (100_000 if args.quick else 1_000_000)
    prefix = Prefix.build(system_prompt(), tool_definitions(), counter=COUNTER)

    small_run = run(10_000, args.steps, prefix)
    large_run = run(large, args.steps, prefix)
    ratio = large_run["median_ms"] / small_run["median_ms"]
    emit(
        {
            "compress_ms_small": round(small_run["median_ms"], 3),
            "compress_ms_large": round(large_run["median_ms"], 3),
            "compress_scaling_ratio": round(ratio, 3),
            "compress_p90_ms_small": round(small_run["p90_ms"], 3),
            "compress_p90_ms_large": round(large_run["p90_ms"], 3),
            "compress_evict_ms_small": round(small_run["evict_median_ms"], 3),
            "compress_evict_ms_large": round(large_run["evict_median_ms"], 3),
            "compress_actions_small": small_run["actions"],
            "compress_actions_large": large_run["actions"],
            "view_tokens_median_small": small_run["view_tokens_median"],
            "view_tokens_median_large": large_run["view_tokens_median"],
            "history_events_small": 10_000,
            "history_events_large": large,
            "history_build_s_large": large_run["history_build_s"],
            "index_blocks_small_history": small_run["index_blocks"],
            "index_blocks_large_history": large_run["index_blocks"],
            "index_blocks": index_blocks(),
            "steps": args.steps,
            "token_counter": COUNTER.name,
            "context_size": PROFILE.context_size,
        },
        args.json,
    )


if __name__ == "__main__":
    main()
