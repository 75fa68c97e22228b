"""Scroll: context as an environment for long-running LLM agents.

The framework-free core: the append-only Event Log, payload store, token counting and
(in later modules) the kernel, the working view and eviction.
"""

from __future__ import annotations

from .errors import (
    AppendOnlyViolation,
    ConfigError,
    EventLogError,
    EventNotFound,
    IngestError,
    InvalidEvent,
    PayloadCorrupt,
    PayloadError,
    PayloadMissing,
    ScrollError,
)
from .eventlog import (
    KIND_CONTEXT_MSG,
    KIND_MODEL_TURN,
    KIND_TOOL_RESULT,
    Event,
    EventLog,
    Hit,
    SessionSummary,
)
from .payloads import ArtifactRef, PayloadStore, ToolResultRef
from .tokens import CharRatioCounter, TiktokenCounter, TokenCounter

__all__ = [
    "KIND_CONTEXT_MSG",
    "KIND_MODEL_TURN",
    "KIND_TOOL_RESULT",
    "AppendOnlyViolation",
    "ArtifactRef",
    "CharRatioCounter",
    "ConfigError",
    "Event",
    "EventLog",
    "EventLogError",
    "EventNotFound",
    "Hit",
    "IngestError",
    "InvalidEvent",
    "PayloadCorrupt",
    "PayloadError",
    "PayloadMissing",
    "PayloadStore",
    "ScrollError",
    "SessionSummary",
    "TiktokenCounter",
    "TokenCounter",
    "ToolResultRef",
]
