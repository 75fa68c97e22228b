"""Every exception Scroll raises, in one place.

Hierarchy::

    ScrollError
    ├── ConfigError            a setting or profile value is out of range
    ├── EventLogError          the Event Log refused or could not serve a request
    │   ├── AppendOnlyViolation    an UPDATE or DELETE reached the events table
    │   ├── InvalidEvent           an event failed validation before it was written
    │   ├── EventNotFound          no event has the requested seq
    │   ├── EventLogUnavailable    the log's database cannot be reached now (retry later)
    │   ├── SearchTimeout          a search ran past its time limit and was stopped
    │   └── SearchIndexCorrupt     the full-text index does not match the events
    ├── PayloadError           a payload reference could not be loaded
    │   ├── PayloadMissing         the payload file is gone
    │   └── PayloadCorrupt         the payload file no longer matches its hash
    ├── IngestError            an import file is malformed; nothing of it was ingested
    ├── EvictionIndexError     an eviction index operation or checkpoint breaks its invariant
    ├── ContextWindowUnfit     the working view cannot be brought under the hard limit
    ├── KernelError            a kernel could not be started or driven
    │   ├── SandboxUnavailable     the required sandbox tier cannot run here (fail closed)
    │   ├── KernelProtocolError    the kernel sent something the host will not accept
    │   ├── KernelUnresponsive     the kernel stopped reading or answering by a deadline
    │   └── HostFunctionRefused    a host-function name or call was rejected
    ├── QueryRefused           ms.sql_query will not run a statement (write, pragma, too long)
    ├── AgentNotReadable       an ms call named an agent outside the session's readable set
    ├── GatewayRequestInvalid  a client's request to the gateway is malformed (names the field)
    └── ModelError             a model provider failed or refused a request (status, message)
        └── ContextOverflow        the provider says the prompt exceeds its context window
"""

from __future__ import annotations

__all__ = [
    "AgentNotReadable",
    "AppendOnlyViolation",
    "ConfigError",
    "ContextOverflow",
    "ContextWindowUnfit",
    "EventLogError",
    "EventLogUnavailable",
    "EventNotFound",
    "EvictionIndexError",
    "GatewayRequestInvalid",
    "HostFunctionRefused",
    "IngestError",
    "InvalidEvent",
    "KernelError",
    "KernelProtocolError",
    "KernelUnresponsive",
    "ModelError",
    "PayloadCorrupt",
    "PayloadError",
    "PayloadMissing",
    "QueryRefused",
    "SandboxUnavailable",
    "ScrollError",
    "SearchIndexCorrupt",
    "SearchTimeout",
]


class ScrollError(Exception):
    """Base class of every error Scroll raises on purpose."""


class ConfigError(ScrollError, ValueError):
    """A setting or profile value is invalid."""


class EventLogError(ScrollError):
    """The Event Log refused or could not serve a request."""


class AppendOnlyViolation(EventLogError):
    """Something tried to change or remove an event; the log only grows."""


class InvalidEvent(EventLogError, ValueError):
    """An event failed validation; nothing was written."""


class EventLogUnavailable(EventLogError):
    """The log's database server could not be reached (down, restarting, refusing
    connections): nothing was read or written, and the same call may succeed later."""


class EventNotFound(EventLogError, LookupError):
    """No event carries the requested seq."""

    def __init__(self, seq: int) -> None:
        super().__init__(f"no event with seq {seq}")
        self.seq = seq


class SearchTimeout(EventLogError):
    """A search ran past its time (or step) limit; it was interrupted and returned nothing."""

    def __init__(self, limit: str) -> None:
        super().__init__(f"search stopped after {limit}; narrow the query")
        self.limit = limit


class SearchIndexCorrupt(EventLogError):
    """The FTS index is damaged or does not cover exactly the searchable events.

    ``EventLog.fts_rebuild()`` (``manage.py scroll_fts rebuild``) rebuilds it from the
    events, which are never touched.
    """


class PayloadError(ScrollError):
    """A payload reference could not be loaded."""

    def __init__(self, ref: str, reason: str) -> None:
        super().__init__(f"payload {ref}: {reason}")
        self.ref = ref
        self.reason = reason


class PayloadMissing(PayloadError):
    """The payload file named by a reference does not exist."""


class PayloadCorrupt(PayloadError):
    """The payload file no longer hashes to its reference."""


class IngestError(ScrollError, ValueError):
    """An import file is malformed. Nothing of that file was ingested."""

    def __init__(self, path: str, location: str | None, reason: str) -> None:
        where = f"{path}:{location}" if location else path
        super().__init__(f"{where}: {reason}")
        self.path = path
        self.location = location
        self.reason = reason


class ModelError(ScrollError):
    """A model call failed: the provider answered with an error, or could not be reached.

    ``status`` is the HTTP status when the provider answered (None for timeouts and
    connection failures), ``code`` the provider's error code when it gave one.
    """

    def __init__(
        self,
        message: str,
        *,
        model: str | None = None,
        status: int | None = None,
        code: str | None = None,
    ) -> None:
        parts = [f"model {model}" if model else "model call"]
        if status is not None:
            parts.append(f"HTTP {status}")
        if code:
            parts.append(code)
        super().__init__(f"{': '.join(parts)}: {message}")
        self.message = message
        self.model = model
        self.status = status
        self.code = code


class ContextOverflow(ModelError):
    """The provider refused the prompt as longer than its context window.

    The agent loop answers this with a forced compress and one retry.
    """


class EvictionIndexError(ScrollError, ValueError):
    """An eviction index operation or checkpoint would break its invariant (blocks tile the
    evicted range with no gap); nothing was changed."""


class ContextWindowUnfit(ScrollError):
    """Even after folding and eviction the working view is over the hard limit.

    The numbers say what does not fit: usually the fixed prefix or the active turn alone
    (a single huge message) is larger than the window allows.
    """

    def __init__(
        self, *, tokens: int, hard_limit: int, context_size: int, sections: dict[str, int]
    ) -> None:
        parts = ", ".join(f"{name} {count:,}" for name, count in sections.items())
        super().__init__(
            f"context window unfit: the view needs {tokens:,} tokens but the hard limit is "
            f"{hard_limit:,} (context size {context_size:,} minus the output reserve) after "
            f"folding every tool result and evicting everything before the active turn "
            f"({parts})"
        )
        self.tokens = tokens
        self.hard_limit = hard_limit
        self.context_size = context_size
        self.sections = dict(sections)


class KernelError(ScrollError):
    """A kernel could not be started or driven."""


class SandboxUnavailable(KernelError):
    """The requested sandbox tier is not available; no kernel was started."""


class KernelProtocolError(KernelError):
    """The kernel broke the wire protocol (malformed, oversized or unexpected message)."""


class KernelUnresponsive(KernelError):
    """The kernel did not take a message or answer one by its deadline; it is replaced."""


class HostFunctionRefused(KernelError, ValueError):
    """A host-function name is invalid, or a call named a function that is not registered."""


class QueryRefused(ScrollError, ValueError):
    """A query the read-only connection will not run (writes, pragmas, attach, too long)."""


class AgentNotReadable(ScrollError, PermissionError):
    """An ``ms`` call named an agent this session may not read (no grant), or an invalid id."""


class GatewayRequestInvalid(ScrollError, ValueError):
    """A client's request to the gateway is malformed; ``param`` names the offending field
    (a dotted path such as ``messages.2.content``) so the client's error says where."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message
