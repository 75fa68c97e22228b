"""The gateway's provider-neutral shapes: a client's request, one of its messages, the reply
the client gets, and the figures the extension field reports."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ..models.base import ToolCall, Usage

__all__ = [
    "ClientMessage",
    "ClientReply",
    "ClientRequest",
    "CompactionPoint",
    "GatewayStats",
    "StoredPlace",
    "canonical_args",
]

Api = Literal["openai", "responses", "anthropic"]


def canonical_args(call: ToolCall) -> str:
    """A tool call's arguments in one canonical JSON form (clients re-serialise them)."""
    if call.arguments_error is not None:
        return call.raw_arguments or ""
    return json.dumps(call.arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


@dataclass(slots=True, unsafe_hash=True)
class ClientMessage:
    """One message of the history a client sent, in either provider's format.

    ``role`` is ``user``, ``assistant``, ``tool`` or ``system`` (a system message after the
    first user message; the leading ones form ``ClientRequest.system``).

    A value: never changed once made. Not declared ``frozen``: a frozen dataclass sets each
    field through ``object.__setattr__``, three times slower, and a request builds one per
    message of the history it resends (hundreds).
    """

    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def fingerprint(self) -> str:
        """What alignment compares: role, text, tool calls and the result's call id, with the
        whitespace and JSON spelling clients change on the way back left out."""
        parts = [self.role, self.content.strip(), self.tool_call_id or ""]
        for c in self.tool_calls:
            parts += [c.id, c.name, canonical_args(c)]
        # Unit separators cannot occur in JSON-decoded text by accident of formatting, and a
        # joined string hashes far faster than a JSON dump (a request re-hashes its history).
        text = "\x1f".join(parts)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class StoredPlace:
    """Where a stored reply sits in its session's chain of client messages: the request that
    continues from it (the Responses API's ``previous_response_id``) sends only what follows.

    ``position`` is the reply's place in the chain, ``reply_fp`` its fingerprint, and
    ``logged_as`` the response id its event in the log is tagged with (``""`` when the log
    holds it untagged: a reply first made unstored and replayed to a stored request)."""

    response_id: str
    position: int
    reply_fp: str
    logged_as: str


@dataclass(frozen=True)
class CompactionPoint:
    """The point of a session's chain a remote compaction stands for (Codex's compaction
    item): the first ``position`` messages of the chain as it stood when the compaction's
    marker event (``seq``) was logged. A request carrying the item continues from there."""

    session_id: str
    position: int
    seq: int


@dataclass(frozen=True)
class ClientRequest:
    """A chat request as the gateway serves it, whichever API it came through.

    ``tools`` are the client's own tools as OpenAI function-tool schemas; ``params`` the
    sampling options passed to the upstream as they are (temperature, top_p, max_tokens,
    stop, tool_choice, ...).
    """

    api: Api
    model: str
    system: str
    messages: tuple[ClientMessage, ...]
    tools: tuple[dict[str, Any], ...] = ()
    stream: bool = False
    params: dict[str, Any] = field(default_factory=dict)
    include_usage: bool = False
    # Tools whose calls the client takes as free text (the Responses API's custom tools):
    # offered upstream as a function of one string argument (see ``responses_api``).
    free_text_tools: frozenset[str] = frozenset()
    # The Responses API: the id the reply will have (decided before it is made: a stream
    # names it first), when it was asked for, and whether the reply is stored (``store``),
    # so that a later request can continue from it. ``continues`` is the stored reply a
    # request continues from (``previous_response_id``, resolved by the server to its place);
    # its ``messages`` are then only the new ones.
    response_id: str = ""
    created_at: int = 0
    store: bool = False
    previous_response_id: str = ""
    continues: StoredPlace | None = None
    # The Conversations API: the conversation the request adds to (the server serves it in
    # that conversation's session); its ``messages`` follow the session's chain as it stands.
    conversation_id: str = ""
    # Set while a continuing request is handled: how many messages of the conversation come
    # before ``messages`` (kept in the chain, not read back), and the last user message's
    # text when none of ``messages`` is a user's.
    prior: int = 0
    prior_user_text: str = ""
    # Remote compaction (the Responses API, as Codex uses it): ``compacted`` is the handle
    # of the last ``compaction`` item in the input (``compacted_param`` names it in errors;
    # the messages are then only those after it), resolved by the server to ``resumes``;
    # ``compact``: the client asks for a compaction (``/v1/responses/compact``, or an input
    # ending in a ``compaction_trigger`` item) and gets a handle, no model call made.
    compacted: str = ""
    compacted_param: str = ""
    resumes: CompactionPoint | None = None
    compact: bool = False

    def first_user_text(self) -> str:
        return next((m.content for m in self.messages if m.role == "user"), "")

    def last_user_text(self) -> str:
        return next(
            (m.content for m in reversed(self.messages) if m.role == "user"), self.prior_user_text
        )

    def tool_names(self) -> set[str]:
        return {str(t.get("function", {}).get("name", "")) for t in self.tools}


@dataclass
class GatewayStats:
    """The documented extension field (``scroll`` in every reply): what Scroll did for this
    request. ``client_tokens`` counts the history as the client sent it (system, tools and
    every message); ``upstream_tokens`` sums the views sent upstream over the internal calls;
    ``peak_view_tokens`` is the largest of them, against ``context_size``."""

    session_id: str = ""
    client_tokens: int = 0
    upstream_tokens: int = 0
    upstream_calls: int = 0
    peak_view_tokens: int = 0
    context_size: int = 0
    evictions: int = 0
    recalls: int = 0
    appended: int = 0
    rewritten: bool = False
    replayed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ClientReply:
    """What goes back to the client: the final upstream reply with the recall calls and the
    headline taken out, usage summed over the internal calls, and the stats."""

    content: str
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str
    model: str
    usage: Usage
    stats: GatewayStats
    compressions: tuple[tuple[str, Any], ...] = ()
    thinking: tuple[dict[str, Any], ...] = ()  # Anthropic thinking blocks, as the model sent them
    # Set when the reply's commit failed after the answer had left (see
    # ``GatewayConversation.handle``'s ``answered``); never sent to the client.
    commit_error: str = ""
    # The response id the reply's event in the log is tagged with: the request's when it is
    # stored, the first request's when the reply is a replay (``""``: untagged).
    logged_as: str = ""
    # The reply's place in the session's chain of client messages (``StoredPlace.position``).
    position: int = 0

    def message(self) -> ClientMessage:
        """This reply as the client will send it back in its next request."""
        return ClientMessage("assistant", self.content, self.tool_calls)
