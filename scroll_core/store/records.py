"""The records of the Event Log as every backend hands them out: ``Event`` (one stored row),
``Seqs`` (what an append returns) and ``SessionSummary``; and the kinds of event Scroll
writes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .payloads import MEDIA_BYTES, MEDIA_TEXT, ArtifactRef, PayloadSource, ToolResultRef

__all__ = [
    "KIND_CONTEXT_MSG",
    "KIND_MODEL_TURN",
    "KIND_TOOL_RESULT",
    "Event",
    "Seqs",
    "SessionSummary",
]

KIND_CONTEXT_MSG = "context_msg"
KIND_MODEL_TURN = "model_turn"
KIND_TOOL_RESULT = "tool_result"


@dataclass(frozen=True)
class Event:
    """One row of the log, exactly as stored."""

    seq: int
    session_id: str
    agent_id: str
    kind: str
    role: str | None
    name: str | None
    content: str
    tool_call_id: str | None
    tool_input: Any
    payload_ref: str | None
    payload_size: int | None
    payload_media: str | None
    headline: str | None
    metadata: dict[str, Any]
    created_at: str
    tokens: int
    dedup_key: str | None
    _store: PayloadSource | None = field(default=None, repr=False, compare=False)

    @property
    def payload(self) -> ToolResultRef | ArtifactRef | None:
        """A lazy handle on the full payload, or None when the content is all there is."""
        if self.payload_ref is None or self._store is None:
            return None
        handle = ArtifactRef if self.payload_media == MEDIA_BYTES else ToolResultRef
        return handle(
            self.payload_ref, self.payload_size or 0, self.payload_media or "", self._store
        )

    @property
    def is_preview(self) -> bool:
        """True when ``content`` is a bounded preview of a larger text payload."""
        return self.payload_ref is not None and self.payload_media == MEDIA_TEXT

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "session_id": self.session_id,
            "agent_id": self.agent_id,
            "kind": self.kind,
            "role": self.role,
            "name": self.name,
            "content": self.content,
            "tool_call_id": self.tool_call_id,
            "tool_input": self.tool_input,
            "payload_ref": self.payload_ref,
            "payload_size": self.payload_size,
            "headline": self.headline,
            "metadata": self.metadata,
            "created_at": self.created_at,
            "tokens": self.tokens,
        }


class Seqs(list[int]):
    """The seqs of an append, in input order; ``inserted`` counts the events that were new
    (the rest repeated a dedup key already in the log)."""

    inserted: int = 0


@dataclass(frozen=True)
class SessionSummary:
    session_id: str
    agent_id: str
    events: int
    tokens: int
    first_seq: int
    last_seq: int
    first_at: str
    last_at: str
