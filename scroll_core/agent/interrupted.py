"""No half turns: a turn a run could not finish (its run failed or was stopped mid-turn, by a
fault or by staff) is closed in the log, so the history a later view or a replay reads is
well formed and says what happened.

``mark_interrupted`` appends, after what the turn left: a ``tool_result`` for each tool call
that never got one (providers refuse a call without its result, and the view and replay
would otherwise send one), then one system ``context_msg`` naming the turn, the seqs it
left and why. Every event carries a dedup key of the run, so marking twice stores nothing
twice. A turn the run finishes on resume is never marked: resuming replays it from the log
and completes it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..store import KIND_CONTEXT_MSG, KIND_MODEL_TURN, KIND_TOOL_RESULT, EventStore

__all__ = ["INTERRUPTED_KEY", "left_by_open_turn", "mark_interrupted"]

# The marker's metadata key: {"turn": N, "seqs": [...], "reason": "..."}.
INTERRUPTED_KEY = "scroll.interrupted"


def left_by_open_turn(log: EventStore, checkpoint: Mapping[str, Any]) -> list[Any]:
    """The events the run of ``checkpoint`` (a ``Session.checkpoint()``) appended after it:
    what its open turn left."""
    run_id = str(checkpoint["run_id"])
    after = int(checkpoint["context"]["synced_seq"])
    events = log.session_events(str(checkpoint["session_id"]), after_seq=after, limit=None)
    return [e for e in events if e.dedup_key and e.dedup_key.startswith(f"{run_id}:")]


def mark_interrupted(log: EventStore, checkpoint: Mapping[str, Any], reason: str) -> list[int]:
    """Close the open turn of the run ``checkpoint`` belongs to, if it left anything; the
    seqs it left (empty: nothing to mark). See the module docstring."""
    left = left_by_open_turn(log, checkpoint)
    left = [e for e in left if INTERRUPTED_KEY not in e.metadata and not _closing(e)]
    if not left:
        return []
    run_id = str(checkpoint["run_id"])
    session_id = str(checkpoint["session_id"])
    agent_id = str(checkpoint["agent_id"])
    turn = int(checkpoint["turn"]) + (0 if checkpoint.get("turn_open") else 1)
    seqs = [e.seq for e in left]
    answered = {e.tool_call_id for e in left if e.kind == KIND_TOOL_RESULT and e.tool_call_id}
    batch: list[dict[str, Any]] = []
    for event in left:
        if event.kind == KIND_MODEL_TURN and event.tool_call_id not in (None, "", *answered):
            batch.append(
                {
                    "session_id": session_id,
                    "agent_id": agent_id,
                    "kind": KIND_TOOL_RESULT,
                    "role": "tool",
                    "name": event.name,
                    "tool_call_id": event.tool_call_id,
                    "content": f"not run: the turn was interrupted ({reason})",
                    "metadata": {INTERRUPTED_KEY: {"turn": turn, "closes": event.seq}},
                    "searchable": False,
                    "dedup_key": f"{run_id}:t{turn}:interrupted:{event.seq}",
                }
            )
    span = f"{seqs[0]}–{seqs[-1]}" if len(seqs) > 1 else str(seqs[0])
    batch.append(
        {
            "session_id": session_id,
            "agent_id": agent_id,
            "kind": KIND_CONTEXT_MSG,
            "role": "system",
            "content": (
                f"Turn {turn} was interrupted and not completed ({reason}). It left seqs "
                f"{span}, kept as they are."
            ),
            "metadata": {INTERRUPTED_KEY: {"turn": turn, "seqs": seqs, "reason": reason}},
            "searchable": False,
            "dedup_key": f"{run_id}:t{turn}:interrupted",
        }
    )
    log.append_many(batch)
    return seqs


def _closing(event: Any) -> bool:
    return bool(event.dedup_key and ":interrupted" in event.dedup_key)
