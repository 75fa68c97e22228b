"""Scroll: context as an environment for long-running LLM agents.

The framework-free core: the append-only Event Log, payload store, token counting and
(in later modules) the kernel, the working view and eviction.
"""

from __future__ import annotations

from .errors import (
    AppendOnlyViolation,
    ConfigError,
    ContextWindowUnfit,
    EventLogError,
    EventNotFound,
    EvictionIndexError,
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
    Seqs,
    SessionSummary,
)
from .eviction import CompressRecord, compress
from .headlines import Headline, HeadlineParse, format_headline, parse_headline
from .index import SEAM_BANNER, EvictionIndex, IndexBlock, IndexRender
from .payloads import ArtifactRef, PayloadStore, ToolResultRef
from .profile import Profile
from .tokens import CharRatioCounter, TiktokenCounter, TokenCounter
from .view import ContextState, Prefix, ViewReport, WorkingView, build_view

__all__ = [
    "KIND_CONTEXT_MSG",
    "KIND_MODEL_TURN",
    "KIND_TOOL_RESULT",
    "SEAM_BANNER",
    "AppendOnlyViolation",
    "ArtifactRef",
    "CharRatioCounter",
    "CompressRecord",
    "ConfigError",
    "ContextState",
    "ContextWindowUnfit",
    "Event",
    "EventLog",
    "EventLogError",
    "EventNotFound",
    "EvictionIndex",
    "EvictionIndexError",
    "Headline",
    "HeadlineParse",
    "Hit",
    "IndexBlock",
    "IndexRender",
    "IngestError",
    "InvalidEvent",
    "PayloadCorrupt",
    "PayloadError",
    "PayloadMissing",
    "PayloadStore",
    "Prefix",
    "Profile",
    "ScrollError",
    "Seqs",
    "SessionSummary",
    "TiktokenCounter",
    "TokenCounter",
    "ToolResultRef",
    "ViewReport",
    "WorkingView",
    "build_view",
    "compress",
    "format_headline",
    "parse_headline",
]
