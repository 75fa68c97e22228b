"""A recorded session as replay reads it: its events, where ``compress`` ran, where the model
was called, and which events the recorded cells retrieved.

The Event Log alone gives the structure: the agent loop files every event under a dedup key
``<run>:t<turn>:user`` or ``<run>:t<turn>:s<step>:assistant|call<i>|result<i>``, so the
loop's compress points (after each user message, after each step) and model calls (one per
assistant text event) can be read back. The loop also writes what replay needs into the
events' metadata: each tool result's ``digest_tokens`` (the namespace digest's size in the
view after that cell) and ``ms_calls`` (each ``ms`` call with the seqs it touched, bounded),
and each assistant event's ``forced_compresses`` (after a provider's overflow refusal) and
``view_tokens``. A session whose loop events all carry them replays exactly from the log
alone. Recorded step data (``StepRecord.to_dict()``, or the console's compress rows) holds
the same and more (each compress's outcome, to check the replay against); when given, it is
used instead. Older logs without these fields replay with the digest taken as empty and every
seq a cell touched (``seqs_touched``) standing for a retrieval; ``Trace.exact`` says which.

Two cases stay out of the log's reach: a turn whose retry after an overflow was refused again
(no assistant event carries its forced compress), and a session resumed from a checkpoint
(its fresh kernel has no digest until its first cell).

Sessions written by something else (an imported transcript) fall back to one compress just
before every assistant event.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ScrollError
from ..store import KIND_MODEL_TURN, KIND_TOOL_RESULT, Event, EventStore
from ..tokens import TokenCounter

__all__ = [
    "CallPoint",
    "CompressPoint",
    "RecordedCompress",
    "Retrieval",
    "Trace",
    "TraceError",
    "load_trace",
]

_KEY = re.compile(
    r"^(?P<run>.+):t(?P<turn>\d+):(?:(?P<user>user)|s(?P<step>\d+):"
    r"(?P<part>assistant|call\d+|result\d+))$"
)
RETRIEVAL_CALLS = frozenset({"expand", "recall_tool"})


class TraceError(ScrollError):
    """A session cannot be replayed as given (unknown, empty, or records that do not fit)."""


@dataclass(frozen=True)
class RecordedCompress:
    """What one recorded ``compress`` did; fields the source does not hold are None."""

    turn: int | None
    step: int | None
    reason: str
    action: str | None = None
    forced: bool = False
    digest_tokens: int | None = None
    prefix_tokens: int | None = None
    evicted: tuple[int, int] | None = None
    folded: tuple[int, ...] | None = None
    folds: int | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, turn: int | None = None, step: int | None = None
    ) -> RecordedCompress:
        """From ``CompressStep.to_dict()`` or a console compress row's ``to_dict()``."""
        report = data.get("report") or {}
        sections = data.get("sections") or {}
        evicted = data.get("evicted")
        folded: tuple[int, ...] | None = None
        if "pre_folded" in data:
            folded = tuple(
                int(s)
                for key in ("pre_folded", "live_folded", "active_folded")
                for s in data.get(key) or ()
            )
        digest = report.get("digest", sections.get("digest"))
        prefix = report.get("prefix", sections.get("prefix"))
        folds = data.get("folds")
        return cls(
            turn=data.get("turn", turn),
            step=data.get("step", step),
            reason=str(data.get("reason") or "after_step"),
            action=data.get("action"),
            forced=bool(data.get("forced", False)),
            digest_tokens=None if digest is None else int(digest),
            prefix_tokens=None if prefix is None else int(prefix),
            evicted=(int(evicted[0]), int(evicted[1])) if evicted else None,
            folded=folded,
            folds=len(folded) if folded is not None else (None if folds is None else int(folds)),
            tokens_before=data.get("tokens_before"),
            tokens_after=data.get("tokens_after"),
        )


@dataclass(frozen=True)
class CompressPoint:
    """Run ``compress`` with the session's events up to ``seq`` synced in."""

    seq: int
    reason: str
    turn: int | None = None
    step: int | None = None
    forced: bool = False
    digest_tokens: int = 0
    recorded: RecordedCompress | None = None


@dataclass(frozen=True)
class CallPoint:
    """One model call: it saw the view the last compress left, and produced event ``seq``."""

    index: int
    seq: int
    turn: int | None = None
    step: int | None = None
    input_tokens: int | None = None


@dataclass(frozen=True)
class Retrieval:
    """One recorded retrieval made by the cell(s) run after model call ``call``.

    ``name`` is the ``ms`` call (``expand``, ``recall_tool``), or ``touched`` when only the
    cell's ``seqs_touched`` are known.
    """

    call: int
    name: str
    seqs: tuple[int, ...]


@dataclass
class Trace:
    """One recorded session, ready to replay; see the module docstring."""

    session_id: str
    events: tuple[Event, ...]
    timeline: list[CompressPoint | CallPoint]
    retrievals: list[Retrieval] = field(default_factory=list)
    source: str = "log"
    exact: bool = False
    notes: list[str] = field(default_factory=list)
    counter: TokenCounter | None = None  # the counter that counted the events' tokens

    @property
    def calls(self) -> list[CallPoint]:
        return [p for p in self.timeline if isinstance(p, CallPoint)]

    @property
    def compresses(self) -> list[CompressPoint]:
        return [p for p in self.timeline if isinstance(p, CompressPoint)]

    def recorded_compresses(self) -> list[RecordedCompress] | None:
        points = self.compresses
        if not points or any(p.recorded is None for p in points):
            return None
        return [p.recorded for p in points if p.recorded is not None]


def load_trace(
    log: EventStore,
    session_id: str,
    *,
    steps: Sequence[Mapping[str, Any]] | None = None,
    compresses: Sequence[RecordedCompress] | None = None,
) -> Trace:
    """Read ``session_id`` from ``log`` as a ``Trace``.

    ``steps`` are the session's ``StepRecord.to_dict()`` (or ``StepRecord`` objects), in
    order; they make the trace exact. ``compresses`` (e.g. the console's compress rows) give
    digest sizes and forced compresses when steps are not at hand. Records that do not fit
    the log raise ``TraceError`` naming the first misfit.
    """
    events = tuple(log.session_events(session_id, limit=None))
    if not events:
        raise TraceError(f"session {session_id!r} has no events in the Event Log")
    step_dicts = [_as_dict(s) for s in steps] if steps is not None else None
    keyed = [(e, _KEY.match(e.dedup_key or "")) for e in events]
    if not any(m for _, m in keyed):
        trace = _fallback_trace(session_id, events)
        trace.counter = log.tokens
        return trace
    skeleton = _skeleton(keyed)
    trace = Trace(session_id, events, [], source="log", counter=log.tokens)
    if step_dicts is not None:
        recorded = [
            RecordedCompress.from_dict(c, turn=s.get("turn"), step=s.get("step"))
            for s in step_dicts
            for c in s.get("compressions") or ()
        ]
        trace.source, trace.exact = "steps", True
    elif compresses is not None:
        recorded = list(compresses)
        trace.source, trace.exact = "compress_records", True
    else:
        recorded = None
        trace.exact = _log_is_complete(keyed)
        if not trace.exact:
            trace.notes.append(
                "no step records and a log written before the loop kept digest sizes: the "
                "namespace digest is taken as empty and every seq a cell touched (search hits "
                "included) stands for a retrieval"
            )
    if recorded is not None:
        trace.timeline = _align(skeleton, recorded)
    else:
        trace.timeline = _from_log(skeleton, keyed)
    calls = trace.calls
    if step_dicts is not None:
        trace.retrievals = _step_retrievals(step_dicts, calls)
        inputs = {(s.get("turn"), s.get("step")): s for s in step_dicts}
        trace.timeline = [
            _with_input(p, inputs.get((p.turn, p.step))) if isinstance(p, CallPoint) else p
            for p in trace.timeline
        ]
    else:
        trace.retrievals = _log_retrievals(events, calls, trace.notes)
        viewed = {m.seq: m.view_tokens for m in skeleton if m.kind == "call"}
        trace.timeline = [
            replace(p, input_tokens=viewed.get(p.seq)) if isinstance(p, CallPoint) else p
            for p in trace.timeline
        ]
    return trace


# ---------------------------------------------------------------------- skeleton
@dataclass(frozen=True)
class _Mark:
    kind: str  # "compress" or "call"
    seq: int
    reason: str
    turn: int
    step: int | None
    run: str = ""
    forced: int = 0  # calls: compresses an overflow refusal forced just before
    view_tokens: int | None = None  # calls: the view the model was given, when logged


def _skeleton(keyed: Sequence[tuple[Event, re.Match[str] | None]]) -> list[_Mark]:
    """The loop's compress points and model calls, in order, from the dedup keys."""
    marks: list[_Mark] = []
    group: tuple[str, int, int] | None = None
    last_seq = 0
    for event, match in keyed:
        if match is None:
            last_seq = event.seq
            continue
        run, turn = match["run"], int(match["turn"])
        if match["user"]:
            if group is not None:
                marks.append(
                    _Mark("compress", last_seq, "after_step", group[1], group[2], group[0])
                )
                group = None
            marks.append(_Mark("compress", event.seq, "turn_start", turn, None, run))
        else:
            step = int(match["step"])
            key = (run, turn, step)
            if key != group:
                if group is not None:
                    marks.append(
                        _Mark("compress", last_seq, "after_step", group[1], group[2], group[0])
                    )
                group = key
            if match["part"] == "assistant":
                view = event.metadata.get("view_tokens")
                marks.append(
                    _Mark(
                        "call",
                        event.seq,
                        "call",
                        turn,
                        step,
                        run,
                        forced=_count(event.metadata.get("forced_compresses")),
                        view_tokens=view if isinstance(view, int) else None,
                    )
                )
        last_seq = event.seq
    if group is not None:
        marks.append(_Mark("compress", last_seq, "after_step", group[1], group[2], group[0]))
    return marks


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def _log_is_complete(keyed: Sequence[tuple[Event, re.Match[str] | None]]) -> bool:
    """Whether every loop event carries what replay reads from the log (see the docstring)."""
    needs = {"assistant": "forced_compresses", "result": "digest_tokens"}
    for event, match in keyed:
        part = match["part"] if match else None
        field_ = needs.get((part or "").rstrip("0123456789"))
        if field_ is not None and field_ not in event.metadata:
            return False
    return True


def _from_log(
    skeleton: Sequence[_Mark], keyed: Sequence[tuple[Event, re.Match[str] | None]]
) -> list[CompressPoint | CallPoint]:
    """The timeline from the log alone: at each compress the digest size the run's last cell
    left (0 before its first cell, or in a log that does not keep it), and the compresses an
    overflow refusal forced, at the bound of the compress before them."""
    digests: dict[str, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
    for event, match in keyed:
        size = event.metadata.get("digest_tokens")
        if match and (match["part"] or "").startswith("result") and isinstance(size, int):
            seqs, sizes = digests[match["run"]]
            seqs.append(event.seq)
            sizes.append(size)

    def digest_at(run: str, bound: int) -> int:
        seqs, sizes = digests.get(run, ([], []))
        i = bisect.bisect_right(seqs, bound)
        return sizes[i - 1] if i else 0

    out: list[CompressPoint | CallPoint] = []
    calls = bound = digest = 0
    for mark in skeleton:
        if mark.kind == "call":
            out += [
                CompressPoint(bound, "overflow", mark.turn, mark.step, True, digest)
                for _ in range(mark.forced)
            ]
            out.append(CallPoint(calls, mark.seq, mark.turn, mark.step))
            calls += 1
        else:
            bound, digest = mark.seq, digest_at(mark.run, mark.seq)
            out.append(
                CompressPoint(bound, mark.reason, mark.turn, mark.step, digest_tokens=digest)
            )
    return out


def _align(
    skeleton: Sequence[_Mark], recorded: Sequence[RecordedCompress]
) -> list[CompressPoint | CallPoint]:
    """Pair the recorded compresses with the log's compress points, in order; a forced
    compress (after an overflow refusal) runs at the bound of the one before it."""
    out: list[CompressPoint | CallPoint] = []
    pending = list(recorded)
    calls = 0
    bound = 0
    for mark in skeleton:
        if mark.kind == "call":
            # Forced compresses recorded before this call ran at the current bound.
            while pending and pending[0].reason == "overflow":
                rec = pending.pop(0)
                out.append(_point(bound, rec))
            out.append(CallPoint(calls, mark.seq, mark.turn, mark.step))
            calls += 1
            continue
        while pending and pending[0].reason == "overflow":
            out.append(_point(bound, pending.pop(0)))
        if not pending:
            raise TraceError(
                f"the log has a {mark.reason} compress at seq {mark.seq} (turn {mark.turn}) "
                "that the step records do not hold"
            )
        rec = pending.pop(0)
        if rec.reason != mark.reason or (rec.turn is not None and rec.turn != mark.turn):
            raise TraceError(
                f"step records do not fit the log: expected a {mark.reason} compress of turn "
                f"{mark.turn} at seq {mark.seq}, the records have {rec.reason} of turn {rec.turn}"
            )
        bound = mark.seq
        out.append(_point(bound, rec, step=mark.step))
    if pending:
        raise TraceError(
            f"{len(pending)} recorded compress(es) left over after the log's last event "
            f"(first: {pending[0].reason} of turn {pending[0].turn})"
        )
    return out


def _point(bound: int, rec: RecordedCompress, *, step: int | None = None) -> CompressPoint:
    return CompressPoint(
        bound,
        rec.reason,
        rec.turn,
        step if step is not None else rec.step,
        forced=rec.forced,
        digest_tokens=rec.digest_tokens or 0,
        recorded=rec,
    )


def _fallback_trace(session_id: str, events: Sequence[Event]) -> Trace:
    """No agent-loop keys: one compress before every assistant text event."""
    timeline: list[CompressPoint | CallPoint] = []
    previous = 0
    for event in events:
        if event.kind == KIND_MODEL_TURN and event.tool_call_id is None and previous:
            timeline.append(CompressPoint(previous, "call"))
            timeline.append(
                CallPoint(len([p for p in timeline if isinstance(p, CallPoint)]), event.seq)
            )
        previous = event.seq
    timeline.append(CompressPoint(events[-1].seq, "end"))
    trace = Trace(session_id, tuple(events), timeline, source="log")
    trace.notes.append(
        "not written by the agent loop: one compress before every assistant event, digest empty"
    )
    trace.retrievals = _log_retrievals(events, trace.calls)
    return trace


# ---------------------------------------------------------------------- retrievals
def _call_of(seq: int, calls: Sequence[CallPoint]) -> int | None:
    """The index of the last model call at or before ``seq`` (whose cell made the call)."""
    found = None
    for call in calls:
        if call.seq <= seq:
            found = call.index
        else:
            break
    return found


def _step_retrievals(
    steps: Sequence[Mapping[str, Any]], calls: Sequence[CallPoint]
) -> list[Retrieval]:
    by_step = {(c.turn, c.step): c.index for c in calls}
    out: list[Retrieval] = []
    for step in steps:
        index = by_step.get((step.get("turn"), step.get("step")))
        if index is None:
            continue
        for tool in step.get("tools") or ():
            for ms in tool.get("ms_calls") or ():
                if ms.get("name") in RETRIEVAL_CALLS and ms.get("seqs") and not ms.get("error"):
                    out.append(Retrieval(index, str(ms["name"]), tuple(int(s) for s in ms["seqs"])))
    return out


def _log_retrievals(
    events: Iterable[Event], calls: Sequence[CallPoint], notes: list[str] | None = None
) -> list[Retrieval]:
    """Each cell's ``expand`` and ``recall_tool`` calls from its result's ``ms_calls``, or, in
    a log that does not keep them, every seq it touched as one ``touched`` retrieval."""
    out: list[Retrieval] = []
    cut = 0
    for event in events:
        if event.kind != KIND_TOOL_RESULT:
            continue
        logged = event.metadata.get("ms_calls")
        touched = event.metadata.get("seqs_touched")
        index = _call_of(event.seq, calls)
        if index is None:
            continue
        if isinstance(logged, list):
            for ms in logged:
                if not isinstance(ms, Mapping) or ms.get("error"):
                    continue
                if ms.get("name") in RETRIEVAL_CALLS and ms.get("seqs"):
                    out.append(Retrieval(index, str(ms["name"]), tuple(int(s) for s in ms["seqs"])))
                    cut += "seqs_total" in ms
            cut += "ms_calls_total" in event.metadata
        elif touched:
            out.append(Retrieval(index, "touched", tuple(int(s) for s in touched)))
    if cut and notes is not None:
        notes.append(f"{cut} cell(s) logged their ms calls cut short: retrievals are partial")
    return out


def _with_input(point: CallPoint, step: Mapping[str, Any] | None) -> CallPoint:
    if step is None:
        return point
    model_calls = step.get("model_calls") or []
    if not model_calls:
        return point
    last = model_calls[-1]
    return CallPoint(
        point.index, point.seq, point.turn, point.step, input_tokens=last.get("view_tokens")
    )


def _as_dict(step: Any) -> Mapping[str, Any]:
    if isinstance(step, Mapping):
        return step
    to_dict = getattr(step, "to_dict", None)
    if to_dict is None:
        raise TraceError(f"a step record must be a mapping or have to_dict(), not {step!r}")
    data = to_dict()
    if not isinstance(data, Mapping):
        raise TraceError("a step record's to_dict() did not return a mapping")
    return data
