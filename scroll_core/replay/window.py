"""The context window inspector: the exact messages one recorded model call was sent, rebuilt
from the Event Log the way replay rebuilds every view, section by section, with tokens per
section and per message, and what changed since the call before it.

    window = inspect_call(trace, profile, 3, profiles=in_force)
    window.messages        # what the model was sent (Chat Completions messages)
    window.parts           # the same, by section: prefix, index, digest, folded, tail
    window.diff            # evicted, folded and arrived since call 2

The namespace digest's text is taken from the tool result that left it (the loop logs it
beside its size); a log without it shows the digest by its size only, and ``digest_known``
says so. Everything else is rebuilt exactly: a call's total matches the view size the loop
recorded for it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..index import SEAM_BANNER, IndexBlock
from ..profile import Profile
from ..store import KIND_MODEL_TURN, KIND_TOOL_RESULT, Event
from ..tokens import TokenCounter
from ..view import ContextState, WorkingView, digest_section
from .engine import CallView, replay
from .source import DigestStandIn
from .trace import CallPoint, CompressPoint, Trace, TraceError

__all__ = ["CallDiff", "CallWindow", "WindowPart", "inspect_call"]

SECTIONS = ("prefix", "index", "digest", "folded", "tail")


@dataclass(frozen=True)
class WindowPart:
    """One piece of the window as sent: a section's text, or one live message."""

    section: str  # prefix, index, digest, folded or tail
    role: str
    text: str
    tokens: int | None  # None: counted with the part before it (tool definitions)
    seq: int | None = None
    kind: str | None = None
    name: str | None = None
    tool_call_id: str | None = None
    label: str = ""


@dataclass(frozen=True)
class CallDiff:
    """What changed between the previous call's window and this one."""

    evicted: tuple[int, ...] = ()  # seqs live before, now in the index
    folded: tuple[int, ...] = ()  # seqs folded to pointers since
    arrived: tuple[int, ...] = ()  # seqs new in the window
    first: bool = False  # no previous call

    @property
    def evicted_range(self) -> tuple[int, int] | None:
        return (self.evicted[0], self.evicted[-1]) if self.evicted else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "first": self.first,
            "evicted": list(self.evicted),
            "folded": list(self.folded),
            "arrived": list(self.arrived),
        }


@dataclass
class CallWindow:
    """One call's rebuilt window; see the module docstring."""

    session_id: str
    call: CallView
    calls: int
    profile: Profile
    parts: list[WindowPart]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    blocks: list[IndexBlock]
    diff: CallDiff
    digest_known: bool
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.call.total

    @property
    def recorded_tokens(self) -> int | None:
        return self.call.recorded_tokens

    @property
    def sections(self) -> dict[str, int]:
        return {name: self.call.sections.get(name, 0) for name in SECTIONS}

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "call": self.call.index,
            "calls": self.calls,
            "seq": self.call.seq,
            "turn": self.call.turn,
            "step": self.call.step,
            "total": self.total,
            "recorded_tokens": self.recorded_tokens,
            "sections": self.sections,
            "messages": self.messages,
            "diff": self.diff.to_dict(),
            "digest_known": self.digest_known,
            "blocks": [b.to_dict() for b in self.blocks],
        }


def inspect_call(
    trace: Trace,
    profile: Profile,
    call: int,
    *,
    profiles: Sequence[Profile] | None = None,
    counter: TokenCounter | None = None,
    system: str | None = None,
) -> CallWindow:
    """Rebuild the window of model call ``call`` (0-based) of ``trace``.

    ``profile`` and ``profiles`` are as ``replay`` takes them: pass the profiles in force at
    each compress to see what the recorded call saw.
    """
    calls = trace.calls
    if not calls:
        raise TraceError(f"session {trace.session_id!r} has no model calls to inspect")
    if not 0 <= call < len(calls):
        raise TraceError(
            f"session {trace.session_id!r} has {len(calls)} model calls (0 to "
            f"{len(calls) - 1}); there is no call {call}"
        )
    seen: dict[str, Any] = {}

    def observe(point: CallPoint, view: WorkingView, state: ContextState) -> bool:
        if point.index != call:
            return False
        seen.update(view=view, blocks=list(state.index.blocks), live=len(state.index) > 0)
        return True

    result = replay(
        trace, profile, "scroll", counter=counter, system=system, profiles=profiles, observe=observe
    )
    if "view" not in seen:  # pragma: no cover - replay reaches every call
        raise TraceError(f"call {call} of {trace.session_id!r} was not reached")
    view: WorkingView = seen["view"]
    point = _compress_before(trace, calls[call])
    in_force = profile
    if profiles is not None and point is not None:
        in_force = profiles[trace.compresses.index(point)]
    digest_text = _digest_text(trace.events, point)
    shown = _with_digest(view, point, digest_text)
    mine = result.calls[call]
    previous = result.calls[call - 1] if call > 0 else None
    notes = list(result.notes)
    if point is not None and point.digest_tokens and digest_text is None:
        notes.append(
            f"the namespace digest ({point.digest_tokens} tokens) was logged by its size only; "
            "its text is not shown"
        )
    return CallWindow(
        session_id=trace.session_id,
        call=mine,
        calls=len(calls),
        profile=in_force,
        parts=_parts(shown, view, seen["live"]),
        messages=shown.messages(),
        tools=view.prefix.tool_list(),
        blocks=seen["blocks"],
        diff=_diff(mine, previous),
        digest_known=point is None or not point.digest_tokens or digest_text is not None,
        notes=notes,
    )


def _compress_before(trace: Trace, target: CallPoint) -> CompressPoint | None:
    found: CompressPoint | None = None
    for point in trace.timeline:
        if point is target:
            return found
        if isinstance(point, CompressPoint):
            found = point
    return found


def _digest_text(events: Sequence[Event], point: CompressPoint | None) -> str | None:
    """The logged text of the digest ``point`` put in the view: the last tool result at or
    before its bound, when that result's logged size is the size replay used."""
    if point is None or not point.digest_tokens:
        return ""
    for event in reversed(events):
        if event.seq > point.seq or event.kind != KIND_TOOL_RESULT:
            continue
        text = event.metadata.get("digest_text")
        if event.metadata.get("digest_tokens") == point.digest_tokens and isinstance(text, str):
            return text
        return None
    return None


def _with_digest(view: WorkingView, point: CompressPoint | None, text: str | None) -> WorkingView:
    """The view with replay's digest stand-in replaced by the digest as the model read it."""
    size = point.digest_tokens if point is not None else 0
    stand_in = digest_section(DigestStandIn(size))
    if not stand_in or stand_in not in view.archive:
        return view
    shown = (
        digest_section(text)
        if text is not None
        else f"[kernel namespace digest of {size} tokens: its text was not logged]"
    )
    return replace(view, archive=view.archive.replace(stand_in, shown))


def _parts(shown: WorkingView, view: WorkingView, has_index: bool) -> list[WindowPart]:
    report = view.report
    parts = [
        WindowPart("prefix", "system", shown.prefix.system, report.prefix, label="system prompt"),
    ]
    if shown.prefix.tools:
        parts.append(
            WindowPart(
                "prefix",
                "tools",
                json.dumps(list(shown.prefix.tools), ensure_ascii=False, indent=1),
                None,
                label="tool definitions",
            )
        )
    archive = shown.archive
    if has_index and archive.endswith(SEAM_BANNER):
        archive = archive[: -len(SEAM_BANNER)].rstrip("\n")
    digest = ""
    if report.digest:
        head = archive.rfind("[kernel namespace")
        digest, archive = archive[head:], archive[:head].rstrip("\n")
    if has_index:
        parts.append(
            WindowPart(
                "index",
                "user",
                f"{archive}\n\n{SEAM_BANNER}",
                report.index,
                label="eviction index and seam banner",
            )
        )
    if digest:
        parts.append(WindowPart("digest", "user", digest, report.digest, label="namespace digest"))
    for entry in shown.entries:
        event = entry.event
        parts.append(
            WindowPart(
                "folded" if entry.folded else "tail",
                _role(event),
                entry.text,
                entry.tokens,
                seq=event.seq,
                kind=event.kind,
                name=event.name,
                tool_call_id=event.tool_call_id,
                label=_label(event, entry.folded),
            )
        )
    return parts


def _role(event: Event) -> str:
    if event.kind == KIND_TOOL_RESULT:
        return "tool"
    if event.kind == KIND_MODEL_TURN or event.role == "assistant":
        return "assistant"
    return event.role or "user"


def _label(event: Event, folded: bool) -> str:
    if folded:
        return "folded pointer"
    if event.kind == KIND_MODEL_TURN and event.tool_call_id is not None:
        return f"tool call {event.name or ''}".strip()
    if event.kind == KIND_TOOL_RESULT:
        return f"tool result {event.name or ''}".strip()
    return event.kind


def _diff(mine: CallView, previous: CallView | None) -> CallDiff:
    live = mine.visible | mine.folded
    if previous is None:
        return CallDiff(arrived=tuple(sorted(live)), first=True)
    before = previous.visible | previous.folded
    covered = mine.coverage[-1][1] if mine.coverage else 0
    return CallDiff(
        evicted=tuple(sorted(s for s in before if s <= covered and s not in live)),
        folded=tuple(sorted(mine.folded - previous.folded)),
        arrived=tuple(sorted(live - before)),
    )
