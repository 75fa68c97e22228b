"""Scroll: context as an environment for long-running LLM agents.

The framework-free core: the append-only Event Log, payload store, token counting and
(in later modules) the kernel, the working view and eviction.
"""

from __future__ import annotations

from .agent import Session, StepRecord, TurnResult
from .errors import (
    AgentNotReadable,
    AppendOnlyViolation,
    ConfigError,
    ContextOverflow,
    ContextWindowUnfit,
    EventLogError,
    EventNotFound,
    EvictionIndexError,
    GatewayRequestInvalid,
    HostFunctionRefused,
    IngestError,
    InvalidEvent,
    KernelError,
    KernelProtocolError,
    KernelUnresponsive,
    ModelError,
    PayloadCorrupt,
    PayloadError,
    PayloadMissing,
    QueryRefused,
    SandboxUnavailable,
    ScrollError,
    SearchIndexCorrupt,
    SearchTimeout,
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
from .eventstore import EventStore, open_event_store
from .eviction import CompressRecord, compress
from .headlines import Headline, HeadlineParse, format_headline, parse_headline
from .index import SEAM_BANNER, EvictionIndex, IndexBlock, IndexRender
from .models import (
    POLICY_NAME,
    ChatModel,
    ModelReply,
    OpenAICompatibleModel,
    PolicyModel,
    ToolCall,
    Usage,
)
from .payloads import ArtifactRef, PayloadStore, ToolResultRef
from .profile import Profile
from .prompts import ABSTENTION, RECALL_TOOL, REPL_TOOL, system_prompt, tool_definitions
from .scoped import ScopedReader
from .search import SearchTuning, TermStats
from .tokens import CharRatioCounter, TiktokenCounter, TokenCounter
from .view import ContextState, Prefix, ViewReport, WorkingView, build_view

__all__ = [
    "ABSTENTION",
    "KIND_CONTEXT_MSG",
    "KIND_MODEL_TURN",
    "KIND_TOOL_RESULT",
    "POLICY_NAME",
    "RECALL_TOOL",
    "REPL_TOOL",
    "SEAM_BANNER",
    "AgentNotReadable",
    "AppendOnlyViolation",
    "ArtifactRef",
    "CharRatioCounter",
    "ChatModel",
    "CompressRecord",
    "ConfigError",
    "ContextOverflow",
    "ContextState",
    "ContextWindowUnfit",
    "Event",
    "EventLog",
    "EventLogError",
    "EventNotFound",
    "EventStore",
    "EvictionIndex",
    "EvictionIndexError",
    "GatewayRequestInvalid",
    "Headline",
    "HeadlineParse",
    "Hit",
    "HostFunctionRefused",
    "IndexBlock",
    "IndexRender",
    "IngestError",
    "InvalidEvent",
    "KernelError",
    "KernelProtocolError",
    "KernelUnresponsive",
    "ModelError",
    "ModelReply",
    "OpenAICompatibleModel",
    "PayloadCorrupt",
    "PayloadError",
    "PayloadMissing",
    "PayloadStore",
    "PolicyModel",
    "Prefix",
    "Profile",
    "QueryRefused",
    "SandboxUnavailable",
    "ScopedReader",
    "ScrollError",
    "SearchIndexCorrupt",
    "SearchTimeout",
    "SearchTuning",
    "Seqs",
    "Session",
    "SessionSummary",
    "StepRecord",
    "TermStats",
    "TiktokenCounter",
    "TokenCounter",
    "ToolCall",
    "ToolResultRef",
    "TurnResult",
    "Usage",
    "ViewReport",
    "WorkingView",
    "build_view",
    "compress",
    "format_headline",
    "open_event_store",
    "parse_headline",
    "system_prompt",
    "tool_definitions",
]
