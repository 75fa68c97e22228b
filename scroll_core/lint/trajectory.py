"""A session's cells as the Event Log recorded them: each tool call (its code, seq and turn)
paired with its result (status, whether the print cap cut it, the ms calls it made with their
arguments when small, and the seqs each touched); and its turns: each request, the cells run
for it and the reply that answered it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..prompts import RECALL_TOOL
from ..store import KIND_CONTEXT_MSG, KIND_MODEL_TURN, KIND_TOOL_RESULT, Event, EventStore

__all__ = [
    "MsCall",
    "RecordedCell",
    "RecordedTurn",
    "is_evidence",
    "recorded_cells",
    "recorded_turns",
]


@dataclass(frozen=True)
class MsCall:
    name: str
    seqs: tuple[int, ...]
    # The call's arguments as logged (None: not logged, too long or an older log).
    args: tuple[Any, ...] | None = None
    kwargs: dict[str, Any] | None = field(default=None, compare=False)


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
            args, kwargs = call.get("args"), call.get("kwargs")
            numbers = tuple(int(s) for s in seqs if isinstance(s, int))
            if isinstance(args, list) and isinstance(kwargs, dict):
                out.append(MsCall(call["name"], numbers, tuple(args), dict(kwargs)))
            else:
                out.append(MsCall(call["name"], numbers))
    return tuple(out)


def recorded_cells(
    log: EventStore, session_id: str, events: list[Event] | None = None
) -> list[RecordedCell]:
    """Every tool call of ``session_id`` in seq order, with its result when the log has one
    (``events``: the session's events, when the caller has read them already)."""
    if events is None:
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


@dataclass(frozen=True)
class RecordedTurn:
    """One request and what answered it: the user message that opened the turn, the cells
    run for it and the last reply without a tool call (None: the turn ended unanswered)."""

    request: Event
    cells: tuple[RecordedCell, ...]
    answer: Event | None
    end_seq: int  # the last seq of the turn (before the next request)


def _is_request(events: list[Event], i: int) -> bool:
    event = events[i]
    if event.kind != KIND_CONTEXT_MSG or event.role != "user":
        return False
    return i + 1 < len(events) and events[i + 1].kind == KIND_MODEL_TURN


def recorded_turns(
    log: EventStore, session_id: str, events: list[Event] | None = None
) -> list[RecordedTurn]:
    """The session's turns in order. A request is a user message the model answered next (the
    agent loop's question, a gateway client's message); history appended in bulk is not."""
    if events is None:
        events = log.session_events(session_id, limit=None)
    cells = recorded_cells(log, session_id, events)
    starts = [i for i in range(len(events)) if _is_request(events, i)]
    turns = []
    for n, start in enumerate(starts):
        stop = starts[n + 1] if n + 1 < len(starts) else len(events)
        lo, hi = events[start].seq, events[stop - 1].seq
        answer = None
        for event in events[start + 1 : stop]:
            if event.kind == KIND_MODEL_TURN and not event.tool_call_id and event.content.strip():
                answer = event
        turns.append(
            RecordedTurn(
                request=events[start],
                cells=tuple(c for c in cells if lo < c.call_seq <= hi),
                answer=answer,
                end_seq=hi,
            )
        )
    return turns


def is_evidence(kind: str, role: str | None, name: str | None, seq: int, asked: set[int]) -> bool:
    """Whether an event can be evidence for a request: not the agent's own calls and replies,
    not its recall tool's printouts, not a request of the session (``asked``): they echo it."""
    if kind == KIND_MODEL_TURN or role == "assistant" or seq in asked:
        return False
    return not (kind == KIND_TOOL_RESULT and name == RECALL_TOOL)
