"""The working view: what one model call sees, rebuilt for every call.

Layout, in order: the fixed prefix (system prompt and tool definitions), the eviction index,
the namespace digest, then the protected tail of live events (folded tool results shown as
``[scroll folded]`` pointers). A ``ViewReport`` gives the tokens of each section against the
context size, the trigger and the hard limit, which is what the console draws.

Token counts come from the per-event counts stored in the Event Log at append time; only the
small generated parts (fold pointers, the index render, the digest) are counted here, so the
cost of a view grows with the view, never with the history behind it.

How the log is read, as the importers and the agent loop write it: ``context_msg`` events are
user/system messages; a ``model_turn`` without ``tool_call_id`` is assistant text (its
headline already stripped into ``Event.headline``); a ``model_turn`` with ``tool_call_id`` is
one tool call (``name``, ``tool_input``) and joins the assistant message before it; a
``tool_result`` carries the call's ``tool_call_id``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .errors import EventNotFound, ScrollError
from .index import SEAM_BANNER, EvictionIndex, RenderLevel
from .profile import Profile
from .store import KIND_MODEL_TURN, KIND_TOOL_RESULT, Event, EventStore
from .tokens import TokenCounter

__all__ = [
    "MESSAGE_OVERHEAD_TOKENS",
    "ContextState",
    "Digest",
    "Prefix",
    "ViewEntry",
    "ViewReport",
    "WorkingView",
    "build_view",
    "digest_section",
    "digest_tokens",
    "fold_pointer",
]

# Chat formats spend a few tokens per message on role and separators (OpenAI documents 3-4).
MESSAGE_OVERHEAD_TOKENS = 4
CHECKPOINT_VERSION = 1
DIGEST_HEADER = "[kernel namespace] Variables that persist between your cells:"
FOLD_MARK = "[scroll folded]"
_FOLD_HEAD_CHARS = 60


class Digest(Protocol):
    """What the view needs of a namespace digest (``kernel.NamespaceDigest`` is one)."""

    def render(self) -> str: ...


@dataclass(frozen=True)
class Prefix:
    """The fixed prefix: system prompt and tool definitions, counted once."""

    system: str
    tools: tuple[Mapping[str, Any], ...] = ()
    tokens: int = 0

    @classmethod
    def build(
        cls, system: str, tools: Iterable[Mapping[str, Any]] = (), *, counter: TokenCounter
    ) -> Prefix:
        tools = tuple(tools)
        text = system + ("\n" + json.dumps(list(tools), ensure_ascii=False) if tools else "")
        return cls(system, tools, counter.count(text) + MESSAGE_OVERHEAD_TOKENS)

    def tool_list(self) -> list[dict[str, Any]]:
        """The tools as the Chat Completions API takes them (a fresh list)."""
        return [dict(t) for t in self.tools]


def is_tool_call(event: Event) -> bool:
    return event.kind == KIND_MODEL_TURN and event.tool_call_id is not None


def is_user_message(event: Event) -> bool:
    return event.role == "user" and event.kind not in (KIND_TOOL_RESULT, KIND_MODEL_TURN)


def result_chars(event: Event) -> int:
    """The size of a tool result in characters (its full payload when content is a preview)."""
    if event.is_preview and event.payload_size:
        return max(len(event.content), event.payload_size)
    return len(event.content)


def fold_pointer(event: Event) -> str:
    """The ``[scroll folded]`` pointer that replaces a tool result and says how to recover it."""
    head = " ".join(event.content[:_FOLD_HEAD_CHARS].split())
    if len(event.content) > _FOLD_HEAD_CHARS:
        head += "…"
    how = (
        f"ms.recall_tool('{event.tool_call_id}')"
        if event.tool_call_id
        else f"ms.expand({event.seq})"
    )
    return (
        f"{FOLD_MARK} {event.name or 'tool'} result of {result_chars(event):,} chars "
        f"(seq {event.seq}) was folded out of the view; it is intact in the Event Log. "
        f"Recover it with {how}. It began: {head!r}"
    )


def _preview_note(event: Event) -> str:
    how = (
        f"ms.recall_tool('{event.tool_call_id}')"
        if event.tool_call_id
        else f"ms.expand({event.seq})"
    )
    return f"\n[preview: the full {result_chars(event):,} chars are in the Event Log; {how}]"


# ---------------------------------------------------------------------- state
@dataclass
class ContextState:
    """One session's context: live seqs, folded seqs, the index and the active turn.

    Everything here is a reference into the Event Log; the log itself is never changed.
    ``to_checkpoint()`` is small (it grows with the view and the index, not the history).
    Events are cached in memory so a view is built without reading the log again.
    """

    session_id: str
    index: EvictionIndex = field(default_factory=EvictionIndex)
    live: list[int] = field(default_factory=list)
    folded: set[int] = field(default_factory=set)
    active_start: int | None = None
    synced_seq: int = 0
    _events: dict[int, Event] = field(default_factory=dict, repr=False, compare=False)
    _stubs: dict[int, tuple[str, int]] = field(default_factory=dict, repr=False, compare=False)
    _notes: dict[int, tuple[str, int]] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def new(cls, session_id: str, *, tier_cap: int = 10) -> ContextState:
        return cls(session_id=session_id, index=EvictionIndex(tier_cap=tier_cap))

    # -------------------------------------------------------------- growth
    def add(self, events: Iterable[Event]) -> None:
        """Make appended events live (in seq order, each once); a user message starts the
        active turn."""
        for event in sorted(events, key=lambda e: e.seq):
            if event.session_id != self.session_id:
                raise ScrollError(
                    f"event {event.seq} belongs to session {event.session_id!r}, "
                    f"not {self.session_id!r}"
                )
            if event.seq <= self.synced_seq:
                continue  # already live, evicted, or seen: a resumed session adds nothing twice
            self.live.append(event.seq)
            self._events[event.seq] = event
            self.synced_seq = event.seq
            if is_user_message(event):
                self.active_start = event.seq

    def sync(self, log: EventStore) -> list[Event]:
        """Make live every event of this session appended since the last sync (O(new))."""
        fresh = log.session_events(self.session_id, after_seq=self.synced_seq, limit=None)
        self.add(fresh)
        return fresh

    def begin_turn(self, seq: int) -> None:
        """Mark ``seq`` (a live event) as the start of the active turn."""
        if seq not in self._live_set():
            raise ScrollError(f"seq {seq} is not live in session {self.session_id!r}")
        self.active_start = seq

    def cached(self, seq: int) -> Event | None:
        """The live event ``seq`` if it is held in memory (no read), else None."""
        return self._events.get(seq)

    def _live_set(self) -> set[int]:
        return set(self.live)

    # -------------------------------------------------------------- reading
    def events(self, log: EventStore, start: int = 0) -> list[Event]:
        """The live events in order (from position ``start`` of ``live``), from the cache
        (reading only what it lacks)."""
        live = self.live[start:] if start else self.live
        missing = [s for s in live if s not in self._events]
        if missing:
            wanted = set(missing)
            for event in log.session_events(
                self.session_id, after_seq=missing[0] - 1, limit=missing[-1] - missing[0] + 1
            ):
                if event.seq in wanted:
                    self._events[event.seq] = event
            lost = [s for s in missing if s not in self._events]
            if lost:
                raise EventNotFound(lost[0])
        return [self._events[s] for s in live]

    def stub(self, event: Event, counter: TokenCounter) -> tuple[str, int]:
        cached = self._stubs.get(event.seq)
        if cached is None:
            text = fold_pointer(event)
            cached = self._stubs[event.seq] = (text, counter.count(text))
        return cached

    def note(self, event: Event, counter: TokenCounter) -> tuple[str, int]:
        cached = self._notes.get(event.seq)
        if cached is None:
            text = _preview_note(event)
            cached = self._notes[event.seq] = (text, counter.count(text))
        return cached

    def drop(self, seqs: Iterable[int]) -> None:
        """Remove seqs from the live view (after eviction); the log keeps them."""
        gone = set(seqs)
        self.live = [s for s in self.live if s not in gone]
        self.folded -= gone
        for seq in gone:
            self._events.pop(seq, None)
            self._stubs.pop(seq, None)
            self._notes.pop(seq, None)
        if self.active_start in gone:
            self.active_start = None

    # -------------------------------------------------------------- checkpoint
    def to_checkpoint(self) -> dict[str, Any]:
        return {
            "version": CHECKPOINT_VERSION,
            "session_id": self.session_id,
            "live": list(self.live),
            "folded": sorted(self.folded),
            "active_start": self.active_start,
            "synced_seq": self.synced_seq,
            "index": self.index.to_checkpoint(),
        }

    @classmethod
    def from_checkpoint(cls, data: Mapping[str, Any]) -> ContextState:
        """Restore a state; a checkpoint that is inconsistent is refused, not repaired."""
        if not isinstance(data, Mapping) or data.get("version") != CHECKPOINT_VERSION:
            version = data.get("version") if isinstance(data, Mapping) else None
            raise ScrollError(f"unsupported context checkpoint version {version!r}")
        try:
            state = cls(
                session_id=str(data["session_id"]),
                index=EvictionIndex.from_checkpoint(data["index"]),
                live=[int(s) for s in data["live"]],
                folded={int(s) for s in data["folded"]},
                active_start=None if data["active_start"] is None else int(data["active_start"]),
                synced_seq=int(data["synced_seq"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ScrollError(f"context checkpoint is malformed: {exc!r}") from None
        live = set(state.live)
        if state.live != sorted(live):
            raise ScrollError("context checkpoint: live seqs are not strictly increasing")
        if not state.folded <= live:
            raise ScrollError("context checkpoint: a folded seq is not live")
        last = state.index.last_seq
        if last is not None and state.live and state.live[0] <= last:
            raise ScrollError("context checkpoint: a live seq is inside the evicted range")
        if state.live and state.synced_seq < state.live[-1]:
            raise ScrollError("context checkpoint: synced_seq is behind the live seqs")
        return state


# ---------------------------------------------------------------------- view
@dataclass(frozen=True)
class ViewEntry:
    """One live event as the view shows it, and what it costs."""

    event: Event
    text: str
    tokens: int
    folded: bool


@dataclass(frozen=True)
class ViewReport:
    """Token count per section of one view, against the window; the console draws this."""

    prefix: int
    index: int
    digest: int
    folded: int
    tail: int
    context_size: int
    trigger_tokens: int
    hard_limit: int
    live_events: int
    folded_events: int
    index_blocks: int
    index_level: RenderLevel

    @property
    def total(self) -> int:
        return self.prefix + self.index + self.digest + self.folded + self.tail

    @property
    def over_trigger(self) -> bool:
        return self.total > self.trigger_tokens

    @property
    def over_hard_limit(self) -> bool:
        return self.total > self.hard_limit

    def sections(self) -> dict[str, int]:
        return {
            "prefix": self.prefix,
            "index": self.index,
            "digest": self.digest,
            "folded": self.folded,
            "tail": self.tail,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.sections(),
            "total": self.total,
            "context_size": self.context_size,
            "trigger_tokens": self.trigger_tokens,
            "hard_limit": self.hard_limit,
            "live_events": self.live_events,
            "folded_events": self.folded_events,
            "index_blocks": self.index_blocks,
            "index_level": self.index_level,
        }


@dataclass(frozen=True)
class _Basis:
    """What a view's entries were built from, so the next view can reuse them."""

    live: list[int]  # a copy of ``ContextState.live`` at the build
    folded: frozenset[int]
    counter: TokenCounter
    folded_tokens: int
    tail_tokens: int


@dataclass(frozen=True)
class WorkingView:
    prefix: Prefix
    archive: str
    entries: tuple[ViewEntry, ...]
    report: ViewReport
    basis: _Basis | None = field(default=None, compare=False, repr=False)

    @property
    def tokens(self) -> int:
        return self.report.total

    def messages(
        self, *, reuse: tuple[WorkingView, list[dict[str, Any]]] | None = None
    ) -> list[dict[str, Any]]:
        """The view as Chat Completions messages (system, archive, live conversation).

        The archive (index, digest, seam banner) goes in front of the live conversation; when
        that starts with a user message the two are joined, so roles still alternate for
        chat templates that insist on it.

        ``reuse``: an earlier view and the messages it gave, left unchanged by whoever used
        them. When this view only extends it (same system prompt and archive, its entries
        first, the same objects, and no tool call that would join the last of its messages)
        those messages are kept and only the new entries converted; the result is a new
        list sharing the earlier one's message dicts. Otherwise (a fold rewrote the middle)
        the leading messages equal to the earlier ones are still the earlier objects, so an
        upstream can tell where the rewrite starts (``TurnFold.rewrite``).
        """
        if reuse is not None:
            extended = self._extending(*reuse)
            if extended is not None:
                return extended
        out: list[dict[str, Any]] = [{"role": "system", "content": self.prefix.system}]
        live = _to_messages(self.entries)
        if self.archive:
            if live and live[0]["role"] == "user":
                live[0] = {**live[0], "content": f"{self.archive}\n\n{live[0]['content']}"}
            else:
                out.append({"role": "user", "content": self.archive})
        out += live
        if reuse is not None:
            sent = reuse[1]
            for i in range(min(len(out), len(sent))):
                if out[i] != sent[i]:
                    break
                out[i] = sent[i]
        return out

    def _extending(
        self, earlier: WorkingView, sent: list[dict[str, Any]]
    ) -> list[dict[str, Any]] | None:
        old, new = earlier.entries, self.entries
        if (
            not old
            or len(new) < len(old)
            or earlier.archive != self.archive
            or earlier.prefix.system != self.prefix.system
        ):
            return None
        head = new[: len(old)]
        if head[-1] is not old[-1] or any(a is not b for a, b in zip(old, head, strict=True)):
            return None
        added = new[len(old) :]
        if added and is_tool_call(added[0].event):
            return None  # it would join the last message: convert it all again
        return [*sent, *_to_messages(added)]


def build_view(
    state: ContextState,
    profile: Profile,
    *,
    log: EventStore,
    prefix: Prefix,
    digest: Digest | str | None = None,
    counter: TokenCounter | None = None,
    previous: WorkingView | None = None,
) -> WorkingView:
    """Assemble the view for the next model call from ``state`` (no side effects on the log).

    ``previous``, a view built earlier from the same ``state``, lets the live entries it
    already holds be reused: when ``state.live`` still starts with its live seqs and no fold
    changed since, only the events appended after them are turned into entries (O(new), not
    O(view)); otherwise, or when it was built with another counter, every entry is rebuilt.
    The index, the digest and the report are assembled afresh either way, so the result is
    the view a full rebuild gives."""
    counter = counter or log.tokens
    entries: list[ViewEntry] = []
    folded_tokens = tail_tokens = 0
    start = 0
    basis = previous.basis if previous is not None else None
    if (
        basis is not None
        and basis.counter is counter
        and len(state.live) >= len(basis.live)
        and state.live[: len(basis.live)] == basis.live
        and state.folded == basis.folded
    ):
        entries = list(previous.entries) if previous is not None else []
        start = len(basis.live)
        folded_tokens, tail_tokens = basis.folded_tokens, basis.tail_tokens
    events = state.events(log, start)

    index_tokens = 0
    archive_parts: list[str] = []
    level: RenderLevel = "empty"
    if len(state.index):
        banner_tokens = _constant_tokens(SEAM_BANNER, counter)
        rendered = state.index.render(
            max(1, profile.index_budget_tokens - banner_tokens), counter, banner=False
        )
        archive_parts.append(rendered.text)
        index_tokens = rendered.tokens + banner_tokens + MESSAGE_OVERHEAD_TOKENS
        level = rendered.level

    section = digest_section(digest)
    if section:
        archive_parts.append(section)
    digest_size = _section_tokens(section, counter)
    if len(state.index):
        archive_parts.append(SEAM_BANNER)

    for event in events:
        if event.seq in state.folded:
            text, tokens = state.stub(event, counter)
            entry = ViewEntry(event, text, tokens + MESSAGE_OVERHEAD_TOKENS, True)
            folded_tokens += entry.tokens
        else:
            text, tokens = event.content, event.tokens
            if event.kind == KIND_TOOL_RESULT and event.is_preview:
                note, note_tokens = state.note(event, counter)
                text, tokens = text + note, tokens + note_tokens
            entry = ViewEntry(event, text, tokens + MESSAGE_OVERHEAD_TOKENS, False)
            tail_tokens += entry.tokens
        entries.append(entry)

    report = ViewReport(
        prefix=prefix.tokens,
        index=index_tokens,
        digest=digest_size,
        folded=folded_tokens,
        tail=tail_tokens,
        context_size=profile.context_size,
        trigger_tokens=profile.trigger_tokens,
        hard_limit=profile.hard_limit,
        live_events=len(entries),
        folded_events=len(state.folded),
        index_blocks=len(state.index),
        index_level=level,
    )
    basis = _Basis(list(state.live), frozenset(state.folded), counter, folded_tokens, tail_tokens)
    return WorkingView(prefix, "\n\n".join(archive_parts), tuple(entries), report, basis)


def digest_section(digest: Digest | str | None) -> str:
    """The namespace digest as the view prints it (header, then the digest), or ``""``."""
    text = digest if isinstance(digest, str) else (digest.render() if digest else "")
    return f"{DIGEST_HEADER}\n{text}" if text.strip() else ""


def digest_tokens(digest: Digest | str | None, counter: TokenCounter) -> int:
    """What a view counts for ``digest``'s section (``ViewReport.digest``); 0 when empty."""
    return _section_tokens(digest_section(digest), counter)


def _section_tokens(section: str, counter: TokenCounter) -> int:
    # Plus one, as the view counts it (replay's DigestStandIn inverts exactly this).
    return counter.count(section) + 1 if section else 0


_CONSTANT_TOKENS: dict[tuple[str, str], int] = {}


def _constant_tokens(text: str, counter: TokenCounter) -> int:
    key = (getattr(counter, "name", type(counter).__name__), text)
    if key not in _CONSTANT_TOKENS:
        _CONSTANT_TOKENS[key] = counter.count(text)
    return _CONSTANT_TOKENS[key]


def _to_messages(entries: Sequence[ViewEntry]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    previous: Event | None = None
    for entry in entries:
        event = entry.event
        if is_tool_call(event):
            call = {
                "id": event.tool_call_id,
                "type": "function",
                "function": {
                    "name": event.name or "tool",
                    "arguments": json.dumps(
                        event.tool_input if event.tool_input is not None else {},
                        ensure_ascii=False,
                    ),
                },
            }
            joins = (
                previous is not None
                and previous.kind == KIND_MODEL_TURN
                and messages
                and messages[-1]["role"] == "assistant"
            )
            if joins:
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif event.kind == KIND_TOOL_RESULT:
            message: dict[str, Any] = {"role": "tool", "content": entry.text}
            if event.tool_call_id:
                message["tool_call_id"] = event.tool_call_id
            messages.append(message)
        elif event.kind == KIND_MODEL_TURN or event.role == "assistant":
            turn: dict[str, Any] = {"role": "assistant", "content": entry.text}
            if event.metadata.get("thinking"):
                # An Anthropic model's thinking blocks, sent back with its turn as they came.
                turn["thinking"] = event.metadata["thinking"]
            messages.append(turn)
        elif event.role == "user":
            messages.append({"role": "user", "content": entry.text})
        else:
            # Mid-conversation system and other messages: many chat templates accept a system
            # message only first, so they travel as tagged user messages.
            tag = event.role or event.kind
            messages.append({"role": "user", "content": f"[{tag}] {entry.text}"})
        previous = event
    return messages
