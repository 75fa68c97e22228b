"""Anthropic Messages <-> the gateway's shapes: request parsing (a malformed body is a
``GatewayRequestInvalid`` naming the field), the ``message`` reply, its stream events and
error bodies.

A ``system``-role message inside ``messages`` (Claude Code sends its environment section as
one) is a system message of the history where it stands, as a Chat Completions client's
mid-conversation system message is; an Anthropic-format upstream gets it folded into a user
turn as ``[system] ...`` (before any turn: into the system prompt), and its breakpoint goes.
Content blocks map onto the provider-neutral history: ``text`` blocks are text, ``tool_use``
blocks of an assistant turn are its tool calls, and each ``tool_result`` block of a user turn
becomes one tool message (before the user's own text in that turn). ``thinking`` blocks a
client resends are left out of its history (they are the model's, and the log already holds
them: an Anthropic upstream's reply is logged with its thinking blocks, sent back upstream
with that turn, and returned to the client first in the reply, unchanged). The client's
``thinking`` request, its ``output_config`` (effort), ``cache_control`` breakpoints (on its
tools, system blocks and message blocks) and ``anthropic-beta`` header travel in the
request's params
(``upstream.ANTHROPIC_ONLY_PARAMS``) to an Anthropic-format upstream; an OpenAI-format one
drops them. A breakpoint on a server tool is dropped with the tool. Images and documents become a
``[image]``/``[document]`` placeholder. Client tools become function tools for the upstream;
server tools (``web_search_...``) are left out of what the upstream is offered (Claude Code
lists one when web search is on): an OpenAI-compatible upstream cannot run them, and the
gateway has no way to log what an Anthropic one did with them.

The same block and tool converters serve an Anthropic-format upstream the other way round
(``anthropic_tool``, ``anthropic_tool_choice``, ``reply_blocks``, ``FINISH``,
``ERROR_STATUS``; the requests themselves are built in ``anthropic_upstream``).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from ..errors import GatewayRequestInvalid
from ..models.base import ToolCall
from ._types import ClientMessage, ClientReply, ClientRequest
from .openai_api import pieces
from .upstream import CACHE_PARAM, whole_block_events

__all__ = [
    "ERROR_STATUS",
    "FINISH",
    "EventStream",
    "anthropic_tool",
    "anthropic_tool_choice",
    "error_body",
    "message_object",
    "parse_messages_request",
    "reply_blocks",
    "tool_use_call",
]

_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}
# An upstream's stop reason as the gateway's finish reason (refusal: what OpenAI calls a
# content filter; pause_turn only comes from server tools, which the gateway does not offer).
FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "api_error",
    529: "overloaded_error",
}
# The HTTP status an error of each type comes with (an error event in a stream has none).
ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "timeout_error": 504,
    "api_error": 500,
    "overloaded_error": 529,
}


def _need(condition: bool, param: str, message: str) -> None:
    if not condition:
        raise GatewayRequestInvalid(param, message)


def _block_text(block: dict[str, Any], where: str) -> str | None:
    kind = block.get("type")
    if kind == "text":
        _need(isinstance(block.get("text"), str), f"{where}.text", "must be a string")
        return str(block["text"])
    if kind in ("image", "document", "search_result"):
        return f"[{kind}]"
    if kind in ("thinking", "redacted_thinking"):
        return None
    return ""


def tool_use_call(block: dict[str, Any], where: str) -> ToolCall:
    """A ``tool_use`` block as a tool call (a client's history or an upstream's reply)."""
    _need(isinstance(block.get("id"), str) and block["id"], f"{where}.id", "is required")
    _need(isinstance(block.get("name"), str) and block["name"], f"{where}.name", "is required")
    arguments = block.get("input", {})
    _need(isinstance(arguments, dict), f"{where}.input", "must be an object")
    return ToolCall(
        block["id"], block["name"], arguments, json.dumps(arguments, ensure_ascii=False)
    )


def reply_blocks(content: Any, where: str = "content") -> tuple[str, tuple[ToolCall, ...]]:
    """The text (blocks joined as a stream joins their deltas) and tool calls of an
    assistant turn's content blocks; thinking blocks are left out."""
    _need(isinstance(content, list), where, "must be a list of blocks")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for j, block in enumerate(content):
        at = f"{where}.{j}"
        _need(isinstance(block, dict), at, "must be an object")
        if block.get("type") == "tool_use":
            calls.append(tool_use_call(block, at))
        elif block.get("type") == "text":
            texts.append(_block_text(block, at) or "")
    return "".join(texts), tuple(calls)


def _result_text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    _need(isinstance(content, list), f"{where}.content", "must be a string or a list of blocks")
    parts = []
    for k, block in enumerate(content):
        _need(isinstance(block, dict), f"{where}.content.{k}", "must be an object")
        text = _block_text(block, f"{where}.content.{k}")
        if text:
            parts.append(text)
    return "\n".join(parts)


def _mark(block: dict[str, Any], at: str) -> dict[str, Any] | None:
    """A block's ``cache_control`` breakpoint, checked."""
    mark = block.get("cache_control")
    _need(mark is None or isinstance(mark, dict), f"{at}.cache_control", "must be an object")
    return mark or None


def _messages(
    raw: Any, marks: list[list[Any]] | None = None, compacted: list[str] | None = None
) -> list[ClientMessage]:
    """The history; each message a block of which carries a ``cache_control`` breakpoint is
    added to ``marks`` as ``[role, text, cache_control]`` (what ``anthropic_upstream`` needs
    to put it back on the same message in the view). A ``compaction`` block (a handle this
    gateway gave: see ``compaction``) stands for everything before it, which is left out;
    its handle and its place are put in ``compacted``."""
    _need(isinstance(raw, list) and bool(raw), "messages", "must be a non-empty list")
    out: list[ClientMessage] = []
    marks = [] if marks is None else marks
    compacted = [] if compacted is None else compacted
    for i, message in enumerate(raw):
        where = f"messages.{i}"
        _need(isinstance(message, dict), where, "must be an object")
        role = message.get("role")
        _need(
            role in ("user", "assistant", "system"),
            f"{where}.role",
            "must be 'user', 'assistant' or 'system'",
        )
        content = message.get("content")
        if isinstance(content, str):
            if content or role != "system":
                out.append(ClientMessage(role, content))
            continue
        _need(isinstance(content, list), f"{where}.content", "must be a string or a list of blocks")
        texts: list[str] = []
        calls: list[ToolCall] = []
        own_mark: dict[str, Any] | None = None
        compacted_here = False
        for j, block in enumerate(content):
            at = f"{where}.content.{j}"
            _need(isinstance(block, dict), at, "must be an object")
            kind = block.get("type")
            _need(isinstance(kind, str), f"{at}.type", "is required")
            mark = _mark(block, at)
            if kind == "compaction":
                handle = block.get("encrypted_content")
                _need(
                    isinstance(handle, str) and bool(handle),
                    f"{at}.encrypted_content",
                    "is required (the compaction's handle, as this gateway gave it)",
                )
                compacted[:] = [str(handle), f"{at}.encrypted_content"]
                for held in (out, marks, texts, calls):
                    held.clear()
                own_mark, compacted_here = None, True
                continue
            if kind == "tool_use":
                _need(
                    role == "assistant", f"{at}.type", "tool_use blocks belong to assistant turns"
                )
                calls.append(tool_use_call(block, at))
            elif kind == "tool_result":
                _need(role == "user", f"{at}.type", "tool_result blocks belong to user turns")
                call_id = block.get("tool_use_id")
                _need(
                    isinstance(call_id, str) and bool(call_id), f"{at}.tool_use_id", "is required"
                )
                text = _result_text(block.get("content"), at)
                if block.get("is_error"):
                    text = f"[error] {text}"
                out.append(ClientMessage("tool", text, tool_call_id=call_id))
                if mark:
                    marks.append(["tool", text, mark])
                continue
            else:
                shown = _block_text(block, at)
                if shown:
                    texts.append(shown)
            own_mark = mark or own_mark
        if role == "assistant" and (texts or calls or not compacted_here):
            out.append(ClientMessage("assistant", "\n".join(texts), tuple(calls)))
        elif texts:
            out.append(ClientMessage(role, "\n".join(texts)))
        if role == "system":
            continue  # its breakpoint goes: upstream it is folded into a user turn
        if own_mark and (texts or calls):
            marks.append([role, "\n".join(texts), own_mark])
    return out


def _thinking(raw: Any) -> dict[str, Any] | None:
    """The client's extended-thinking request (``{"type": "enabled", "budget_tokens": n}``
    and the like), passed on as it is: the upstream checks its rules."""
    if raw is None:
        return None
    _need(
        isinstance(raw, dict) and isinstance(raw.get("type"), str),
        "thinking",
        "must be an object with a type",
    )
    budget = raw.get("budget_tokens")
    _need(
        budget is None or (isinstance(budget, int) and not isinstance(budget, bool)),
        "thinking.budget_tokens",
        "must be an integer",
    )
    return dict(raw)


def _system(raw: Any) -> str:
    if raw is None:
        return ""
    if isinstance(raw, str):
        return raw
    _need(isinstance(raw, list), "system", "must be a string or a list of text blocks")
    parts = []
    for i, block in enumerate(raw):
        _need(
            isinstance(block, dict) and block.get("type") == "text",
            f"system.{i}",
            "must be a text block",
        )
        _need(isinstance(block.get("text"), str), f"system.{i}.text", "must be a string")
        parts.append(block["text"])
    return "\n\n".join(parts)


def _system_mark(raw: Any) -> dict[str, Any] | None:
    """The last ``cache_control`` breakpoint among the system blocks (checked by ``_system``)."""
    if not isinstance(raw, list):
        return None
    found = None
    for i, block in enumerate(raw):
        found = _mark(block, f"system.{i}") or found
    return found


def _tools(raw: Any, marks: dict[str, dict[str, Any]] | None = None) -> tuple[dict[str, Any], ...]:
    """The client's custom tools as function tools; the ``cache_control`` breakpoint of
    each that has one goes into ``marks`` by the tool's name (a server tool's goes with it)."""
    if raw is None:
        return ()
    _need(isinstance(raw, list), "tools", "must be a list")
    tools = []
    marks = {} if marks is None else marks
    for i, tool in enumerate(raw):
        where = f"tools.{i}"
        _need(isinstance(tool, dict), where, "must be an object")
        if tool.get("type", "custom") not in (None, "custom"):
            continue  # a server tool (web search, ...): the upstream cannot run it
        name = tool.get("name")
        _need(isinstance(name, str) and bool(name), f"{where}.name", "is required")
        mark = _mark(tool, where)
        if mark:
            marks[name] = mark
        schema = tool.get("input_schema")
        _need(isinstance(schema, dict), f"{where}.input_schema", "must be a JSON Schema object")
        function: dict[str, Any] = {"name": name, "parameters": schema}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        tools.append({"type": "function", "function": function})
    return tuple(tools)


def _tool_choice(raw: Any) -> Any:
    if not isinstance(raw, dict):
        return None
    kind = raw.get("type")
    if kind == "any":
        return "required"
    if kind == "tool" and isinstance(raw.get("name"), str):
        return {"type": "function", "function": {"name": raw["name"]}}
    if kind == "none":
        return "none"
    return None


def anthropic_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions function tool as an Anthropic custom tool (``_tools`` inverted)."""
    function = tool.get("function") or {}
    out: dict[str, Any] = {
        "name": str(function.get("name") or ""),
        "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
    }
    if isinstance(function.get("description"), str) and function["description"]:
        out["description"] = function["description"]
    return out


def anthropic_tool_choice(choice: Any, *, parallel: Any = None) -> dict[str, Any] | None:
    """A Chat Completions ``tool_choice`` (and ``parallel_tool_calls``) as Anthropic's
    (``_tool_choice`` inverted); None leaves the upstream's default."""
    out: dict[str, Any] | None = None
    if choice == "auto":
        out = {"type": "auto"}
    elif choice == "required":
        out = {"type": "any"}
    elif choice == "none":
        out = {"type": "none"}
    elif isinstance(choice, dict) and isinstance((choice.get("function") or {}).get("name"), str):
        out = {"type": "tool", "name": choice["function"]["name"]}
    if parallel is False:
        out = out or {"type": "auto"}
        if out["type"] != "none":
            out["disable_parallel_tool_use"] = True
    return out


def parse_messages_request(body: Any, *, counting: bool = False) -> ClientRequest:
    """The gateway request for a ``POST /v1/messages`` body (decoded JSON); ``counting`` for
    ``/v1/messages/count_tokens``, whose body has no ``max_tokens``."""
    _need(isinstance(body, dict), "body", "must be a JSON object")
    model = body.get("model")
    _need(isinstance(model, str) and bool(model.strip()), "model", "is required (a string)")
    max_tokens = body.get("max_tokens", 1 if counting else None)
    _need(max_tokens is not None, "max_tokens", "is required (a positive integer)")
    _need(
        isinstance(max_tokens, int) and not isinstance(max_tokens, bool),
        "max_tokens",
        f"must be a positive integer, not {type(max_tokens).__name__}",
    )
    _need(max_tokens > 0, "max_tokens", f"must be a positive integer, not {max_tokens}")
    stream = body.get("stream", False)
    _need(isinstance(stream, bool) or stream is None, "stream", "must be a boolean")
    marks: list[list[Any]] = []
    compacted: list[str] = []
    messages = _messages(body.get("messages"), marks, compacted)
    _need(
        any(m.role != "system" for m in messages) or bool(compacted),
        "messages",
        "must hold at least one user or assistant message with content",
    )
    compact = _compaction(body) and not counting
    params: dict[str, Any] = {"max_tokens": max_tokens}
    system = _system(body.get("system"))
    system_mark = _system_mark(body.get("system"))
    tool_marks: dict[str, dict[str, Any]] = {}
    tools = _tools(body.get("tools"), tool_marks)
    if marks or system_mark or tool_marks:
        params[CACHE_PARAM] = {"system": system_mark, "messages": marks, "tools": tool_marks}
    thinking = _thinking(body.get("thinking"))
    if thinking is not None:
        params["thinking"] = thinking
    output = body.get("output_config")
    if output is not None:  # passed on as it is (``effort``): the upstream checks its rules
        _need(isinstance(output, dict), "output_config", "must be an object")
        params["output_config"] = dict(output)
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            params[key] = body[key]
    if body.get("stop_sequences"):
        params["stop"] = body["stop_sequences"]
    choice = _tool_choice(body.get("tool_choice"))
    if choice is not None:
        params["tool_choice"] = choice
    return ClientRequest(
        api="anthropic",
        model=model.strip(),
        system=system,
        messages=tuple(messages),
        tools=tools,
        stream=bool(stream),
        params=params,
        compacted=compacted[0] if compacted else "",
        compacted_param=compacted[1] if compacted else "",
        compact=compact,
    )


def _compaction(body: dict[str, Any]) -> bool:
    """Whether the request asks for a compaction (``compaction: {"type": "summarize"}``, the
    Messages API's compaction request): answered from the log (see ``compaction``)."""
    raw = body.get("compaction")
    if raw is None:
        return False
    _need(isinstance(raw, dict) and raw.get("type") == "summarize", "compaction.type",
          "must be 'summarize'")  # fmt: skip
    _need(
        body.get("context_management") is None,
        "compaction",
        "cannot be combined with context_management",
    )
    return True


# What a compaction block says in place of a summary: the gateway writes none.
COMPACTION_NOTE = (
    "[scroll] The conversation before this point is kept whole in Scroll's Event Log and "
    "stays recallable; nothing was summarised or dropped."
)


def compaction_message(model: str, handle: str, reply: ClientReply) -> dict[str, Any]:
    """The answer to a compaction request: one ``compaction`` block, ``stop_reason``
    ``compaction``, no usage (no model call)."""
    return {
        "id": new_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [
            {"type": "compaction", "content": COMPACTION_NOTE, "encrypted_content": handle}
        ],
        "stop_reason": "compaction",
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
        "scroll": reply.stats.to_dict(),
    }


def compaction_events(model: str, handle: str, reply: ClientReply) -> list[tuple[str, Any]]:
    """``compaction_message`` as the events of a stream: the block opens empty and its
    ``compaction_delta`` carries the note and the handle."""
    whole = compaction_message(model, handle, reply)
    head = {**whole, "content": [], "stop_reason": None}
    block = {"type": "compaction", "content": None, "encrypted_content": None}
    delta = {"type": "compaction_delta", "content": COMPACTION_NOTE, "encrypted_content": handle}
    stop = {"stop_reason": "compaction", "stop_sequence": None}
    return [
        ("message_start", {"type": "message_start", "message": head}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": block}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": stop, "usage": whole["usage"],
                           "scroll": whole["scroll"]}),
        ("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip


def new_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


def _content(reply: ClientReply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [dict(b) for b in reply.thinking]  # first, unchanged
    if reply.content:
        blocks.append({"type": "text", "text": reply.content})
    for call in reply.tool_calls:
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
        )
    return blocks


def _usage(reply: ClientReply) -> dict[str, int]:
    used = reply.usage
    if not used.cache_reported:
        return {"input_tokens": used.input_tokens, "output_tokens": used.output_tokens}
    # Anthropic's input_tokens leaves out what the cache read and wrote.
    return {
        "input_tokens": used.uncached_input_tokens,
        "cache_creation_input_tokens": used.cache_creation_input_tokens or 0,
        "cache_read_input_tokens": used.cache_read_input_tokens or 0,
        "output_tokens": used.output_tokens,
    }


def message_object(reply: ClientReply, *, message_id: str | None = None) -> dict[str, Any]:
    """The ``message`` object for a reply, with the extension field ``scroll``."""
    return {
        "id": message_id or new_id(),
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": _content(reply),
        "stop_reason": _STOP.get(reply.finish_reason, "end_turn"),
        "stop_sequence": None,
        "usage": _usage(reply),
        "scroll": reply.stats.to_dict(),
    }


class EventStream:
    """The (event, data) pairs of one streamed message, made as the reply is: ``start()``
    (message_start), ``block(kind, part)`` as a thinking or tool_use block streams (see
    ``upstream.OnBlock``), ``text(piece)`` as text arrives (a text block opened on the
    first), ``end(reply, rest)`` (``rest``: text not sent yet, as a retry's replayed reply
    has; the text block closed, one ``tool_use`` block per call with its input in
    ``input_json_delta`` pieces, message_delta with the stop reason, the usage and the
    extension field, message_stop).

    Thinking blocks (and ``tool_use`` blocks of the client's tools) go out as they come
    (``block``), a thinking block before the text of its upstream call, with this message's
    own block indices; a text block open when one starts (a recall step's
    text) is closed first, and the text after it opens a new block. The gateway joins the
    text of successive upstream calls with a blank line (``_relay``) and a client joins the
    text blocks of a turn it sends back with a newline, so the new block drops one leading
    newline: the text the client sends back is the text the log holds. A reply whose
    thinking never streamed (a replayed one) sends its thinking blocks whole at ``end``,
    before its text, when no text went before them."""

    def __init__(self, model: str, *, message_id: str | None = None) -> None:
        self.model = model
        self.message_id = message_id or new_id()
        self._index = 0
        self._text_open = False
        self._text_sent = False
        self._split = False  # a thinking block closed a text block: the next one is a sequel
        self._thought = False  # thinking blocks streamed
        self._calls: set[str] = set()  # ids of the tool_use blocks streamed

    def start(self) -> list[tuple[str, dict[str, Any]]]:
        message: dict[str, Any] = {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            # Not known until the upstream is done: message_delta carries the totals.
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return [("message_start", {"type": "message_start", "message": message})]

    def block(self, kind: str, part: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
        """A thinking or ``tool_use`` block's start (the block as it opened), delta or stop
        (see ``upstream.OnBlock``)."""
        out: list[tuple[str, dict[str, Any]]] = []
        if kind == "start" and part is not None:
            if self._text_open:
                out.append(self._stop_block())
                self._text_open = False
                self._split = part.get("type") != "tool_use"
            if part.get("type") == "tool_use":
                self._calls.add(str(part.get("id")))
            else:
                self._thought = True
            event = {"type": "content_block_start", "index": self._index, "content_block": part}
            out.append(("content_block_start", event))
        elif kind == "delta":
            event = {"type": "content_block_delta", "index": self._index, "delta": part}
            out.append(("content_block_delta", event))
        else:
            out.append(self._stop_block())
        return out

    def text(self, piece: str) -> list[tuple[str, dict[str, Any]]]:
        if not piece:
            return []
        out: list[tuple[str, dict[str, Any]]] = []
        if not self._text_open:
            if self._split:  # see the class docstring
                self._split = False
                piece = piece[1:] if piece.startswith("\n") else piece
                if not piece:
                    return []
            self._text_open = True
            block = {"type": "text", "text": ""}
            out.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": self._index, "content_block": block},
                )
            )
        self._text_sent = True
        delta = {"type": "text_delta", "text": piece}
        out.append(
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": self._index, "delta": delta},
            )
        )
        return out

    def _stop_block(self) -> tuple[str, dict[str, Any]]:
        event = ("content_block_stop", {"type": "content_block_stop", "index": self._index})
        self._index += 1
        return event

    def end(self, reply: ClientReply, rest: str = "") -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        if not self._thought and not self._text_sent:
            for block in reply.thinking:
                for kind, part in whole_block_events(block):
                    out += self.block(kind, part)
        for piece in pieces(rest):
            out += self.text(piece)
        if self._text_open:
            out.append(self._stop_block())
            self._text_open = False
        for call in reply.tool_calls:
            if call.id in self._calls:
                continue  # streamed as it came
            block = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
            out.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": self._index, "content_block": block},
                )
            )
            for piece in pieces(json.dumps(call.arguments, ensure_ascii=False)):
                delta = {"type": "input_json_delta", "partial_json": piece}
                out.append(
                    (
                        "content_block_delta",
                        {"type": "content_block_delta", "index": self._index, "delta": delta},
                    )
                )
            out.append(self._stop_block())
        stop = {"stop_reason": _STOP.get(reply.finish_reason, "end_turn"), "stop_sequence": None}
        out.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": stop,
                    "usage": _usage(reply),
                    "scroll": reply.stats.to_dict(),
                },
            )
        )
        out.append(("message_stop", {"type": "message_stop"}))
        return out


def error_body(message: str, *, status: int) -> dict[str, Any]:
    """An error in Anthropic's shape."""
    return {
        "type": "error",
        "error": {"type": ERROR_TYPES.get(status, "api_error"), "message": message},
    }
