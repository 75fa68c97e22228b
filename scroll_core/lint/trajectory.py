"""A session's cells as the Event Log recorded them: each tool call (its code, seq and turn)
paired with its result (status, whether the print cap cut it, the ms calls it made and the
seqs each touched)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..store import KIND_MODEL_TURN, KIND_TOOL_RESULT, EventStore

__all__ = ["MsCall", "RecordedCell", "recorded_cells"]


@dataclass(frozen=True)
class MsCall:
    name: str
    seqs: tuple[int, ...]


@dataclass(frozen=True)
class RecordedCell:
    call_seq: int
    result_seq: int | None
    tool: str
    code: str
    turn: int | None
    status: str = ""
    truncated: bool = False
    ms_calls: tuple[MsCall, ...] = field(default_factory=tuple)


def _ms_calls(metadata: dict[str, Any]) -> tuple[MsCall, ...]:
    calls = metadata.get("ms_calls")
    if not isinstance(calls, list):
        return ()
    out = []
    for call in calls:
        if isinstance(call, dict) and isinstance(call.get("name"), str):
            seqs = call.get("seqs")
            if not isinstance(seqs, list):
                seqs = []
            out.append(MsCall(call["name"], tuple(int(s) for s in seqs if isinstance(s, int))))
    return tuple(out)


def recorded_cells(log: EventStore, session_id: str) -> list[RecordedCell]:
    """Every tool call of ``session_id`` in seq order, with its result when the log has one."""
    events = log.session_events(session_id, limit=None)
    results = {e.tool_call_id: e for e in events if e.kind == KIND_TOOL_RESULT and e.tool_call_id}
    cells = []
    for event in events:
        if event.kind != KIND_MODEL_TURN or not event.tool_call_id or not event.name:
            continue
        result = results.get(event.tool_call_id)
        meta = result.metadata if result is not None else {}
        turn = event.metadata.get("turn")
        cells.append(
            RecordedCell(
                call_seq=event.seq,
                result_seq=result.seq if result is not None else None,
                tool=event.name,
                code=event.content,
                turn=turn if isinstance(turn, int) else None,
                status=str(meta.get("status", "")),
                truncated=bool(meta.get("truncated")),
                ms_calls=_ms_calls(meta),
            )
        )
    return cells
