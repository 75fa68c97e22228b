"""The cost of one agent step's context work, against the length of the history behind it.

    python bench/compress.py --json [--quick] [--steps N] [--large N]

For a history of 10,000 and of 1,000,000 events in one session (all but a live window
already evicted into the index), each step appends one turn (user message, tool call,
tool result, reply), then is timed doing what the agent loop does before a model call:
``state.sync`` (persist: pick up the appended events), ``build_view`` and ``compress``.
The view has the same size in both runs, so any difference is the history's fault.

``compress_ms_small`` / ``compress_ms_large``: median step time over all steps (most steps
only build the view and find nothing to do); ``compress_evict_ms_*`` / ``compress_evict_p90_ms_*``:
median and p90 of the steps that evicted, and ``compress_evict_scaling_ratio`` large over small
on those (the aim is at most 1.5: evicting must not cost more because the log is longer);
``compress_evict_cpu_*``: the same on the thread's CPU time, which a loaded machine's
preemption does not inflate. The two histories are built first, then their steps alternate.
``index_blocks``: blocks after 100 / 1,000 / 10,000 / 100,000 evictions.

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


class Side:
    """One history and the agent state over it, with the timings of its steps."""

    def __init__(self, folder: Path, events: int) -> None:
        self.events = events
        self.log = EventLog(folder / f"eventlog-{events}.sqlite3", token_counter=COUNTER)
        started = time.perf_counter()
        build_history(self.log, events)
        self.built_s = time.perf_counter() - started
        self.state = state_over(self.log, events)
        self.next_turn = events // EVENTS_PER_TURN
        self.wall: list[float] = []
        self.evict_wall: list[float] = []
        self.evict_cpu: list[float] = []
        self.view_tokens: list[float] = []
        self.actions: dict[str, int] = {}

    def step(self, prefix: Prefix) -> None:
        self.log.append_many(turn_rows(self.next_turn, searchable=True))
        self.next_turn += 1
        t0, c0 = time.perf_counter(), time.thread_time()
        self.state.sync(self.log)
        build_view(self.state, PROFILE, log=self.log, prefix=prefix, counter=COUNTER)
        record = compress(self.state, PROFILE, log=self.log, prefix=prefix, counter=COUNTER)
        wall, cpu = (time.perf_counter() - t0) * 1000, (time.thread_time() - c0) * 1000
        self.wall.append(wall)
        if record.evicted is not None:
            self.evict_wall.append(wall)
            self.evict_cpu.append(cpu)
        self.actions[record.action] = self.actions.get(record.action, 0) + 1
        self.view_tokens.append(float(record.tokens_after))

    def summary(self) -> dict[str, Any]:
        self.state.index.check()
        return {
            "median_ms": median(self.wall),
            "p90_ms": percentile(self.wall, 90),
            "evict_median_ms": median(self.evict_wall),
            "evict_p90_ms": percentile(self.evict_wall, 90),
            "evict_cpu_median_ms": median(self.evict_cpu),
            "evict_steps": len(self.evict_wall),
            "actions": self.actions,
            "view_tokens_median": median(self.view_tokens),
            "history_build_s": round(self.built_s, 1),
            "index_blocks": len(self.state.index),
        }


def run(sizes: tuple[int, int], steps: int, prefix: Prefix) -> list[dict[str, Any]]:
    """Both histories side by side, their steps alternating, so that load from elsewhere on
    the machine falls on both alike."""
    with tempfile.TemporaryDirectory() as tmp:
        sides = [Side(Path(tmp), events) for events in sizes]
        for _ in range(steps):
            for side in sides:
                side.step(prefix)
        out = [side.summary() for side in sides]
        for side in sides:
            side.log.close()
    return out


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
    parser.add_argument("--steps", type=int, default=None, help="timed steps per history")
    parser.add_argument("--large", type=int, default=None, help="events in the large history")
    args = parser.parse_args()
    large = args.large or (100_000 if args.quick else 1_000_000)
    # About one step in 60 evicts: enough steps for a median of the evicting ones.
    steps = args.steps or (800 if args.quick else 1500)
    prefix = Prefix.build(system_prompt(), tool_definitions(), counter=COUNTER)

    small_run, large_run = run((10_000, large), steps, prefix)
    ratio = large_run["median_ms"] / small_run["median_ms"]
    evict_ratio = large_run["evict_median_ms"] / small_run["evict_median_ms"]
    evict_cpu_ratio = large_run["evict_cpu_median_ms"] / small_run["evict_cpu_median_ms"]
    emit(
        {
            "compress_ms_small": round(small_run["median_ms"], 3),
            "compress_ms_large": round(large_run["median_ms"], 3),
            "compress_scaling_ratio": round(ratio, 3),
            "compress_p90_ms_small": round(small_run["p90_ms"], 3),
            "compress_p90_ms_large": round(large_run["p90_ms"], 3),
            "compress_evict_ms_small": round(small_run["evict_median_ms"], 3),
            "compress_evict_ms_large": round(large_run["evict_median_ms"], 3),
            "compress_evict_p90_ms_small": round(small_run["evict_p90_ms"], 3),
            "compress_evict_p90_ms_large": round(large_run["evict_p90_ms"], 3),
            "compress_evict_scaling_ratio": round(evict_ratio, 3),
            "compress_evict_cpu_ms_small": round(small_run["evict_cpu_median_ms"], 3),
            "compress_evict_cpu_ms_large": round(large_run["evict_cpu_median_ms"], 3),
            "compress_evict_cpu_scaling_ratio": round(evict_cpu_ratio, 3),
            "compress_evict_steps_small": small_run["evict_steps"],
            "compress_evict_steps_large": large_run["evict_steps"],
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
            "steps": steps,
            "token_counter": COUNTER.name,
            "context_size": PROFILE.context_size,
        },
        args.json,
    )


if __name__ == "__main__":
    main()
