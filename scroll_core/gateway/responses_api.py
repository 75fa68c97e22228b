"""OpenAI Responses API <-> the gateway's shapes: a ``POST /v1/responses`` body parsed into the
provider-neutral request (a malformed or unservable body is a ``GatewayRequestInvalid``
naming the field) and the ``response`` object of a reply. The stream's events are
``responses_stream``.

Both forms of the API are served. In the stateless one, the one agents that keep their own
history use (``store: false``, the whole conversation in ``input``), nothing is kept beyond the
log. A stored reply (``store`` is true unless a request says otherwise, as with OpenAI) can be
continued from: a request naming it as ``previous_response_id`` sends only what follows it,
and the server puts the conversation up to it back in front (``ClientRequest.continues``,
read from the session's log by ``stored``). As with OpenAI, the earlier request's
``instructions`` and tools are not carried over. A request naming a ``conversation`` (the
Conversations API) adds to it: the server serves it in that conversation's session, whose
chain is the conversation's items (``ClientRequest.conversation_id``). Background responses
and ``item_reference`` items are refused by name.

How items map:

- ``instructions`` and the leading system or developer messages form the system text; a
  later one is a system message of the history.
- an assistant ``message`` and the ``function_call`` items that follow it are one assistant
  message with tool calls (what the gateway's reply was); a ``function_call`` with no
  assistant text before it is an assistant message of its own.
- a ``function_call_output`` is a tool result; ``reasoning`` items are left out (the gateway
  relays no reasoning, so none of its own replies carries one).
- a custom tool (free-text input, as Codex's ``apply_patch``) is offered upstream as a
  function with one string argument, ``input``, described by the tool's format; its calls
  go to the client as ``custom_tool_call`` items and come back as calls with that argument.
- hosted tools (web search, file search, ...) run at OpenAI and are not offered upstream, as
  the Anthropic route leaves out server tools; forcing one is refused.
- a ``compaction`` item (a handle this gateway gave, see ``compaction``) stands for the
  history before it: the items before it but the system text are left out; an input ending
  with a ``compaction_trigger`` item asks for a compaction.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from typing import Any

from ..errors import GatewayRequestInvalid
from ..models.base import ToolCall
from ._types import ClientMessage, ClientReply, ClientRequest
from .openai_api import content_text, decode_call

__all__ = [
    "FREE_TEXT_FIELD",
    "free_text_input",
    "input_items",
    "item_id",
    "item_page",
    "parse_items",
    "parse_responses_request",
    "response_object",
    "response_tools",
]

_MESSAGE_ROLES = ("user", "assistant", "system", "developer")
# Options passed upstream under their Chat Completions names (anything else is dropped).
_SAME_NAME = ("temperature", "top_p", "parallel_tool_calls")
_UNSERVED = (
    "this gateway runs no background responses; send the request without it and wait for "
    "the answer (or stream it)"
)
# The one argument of the function a custom (free-text) tool is offered upstream as.
FREE_TEXT_FIELD = "input"
# Why a finish reason leaves a response incomplete, in the API's words.
INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def _need(condition: bool, param: str, message: str) -> None:
    if not condition:
        raise GatewayRequestInvalid(param, message)


def _free_text_function(tool: dict[str, Any], where: str) -> dict[str, Any]:
    """A custom tool (its input free text, or text in a grammar) as the function tool the
    upstream is offered: one string parameter, ``input``, described by the tool's format."""
    fmt = tool.get("format") or {"type": "text"}
    _need(isinstance(fmt, dict), f"{where}.format", "must be an object")
    if fmt.get("type") == "grammar":
        about = f"Text in this {fmt.get('syntax') or ''} grammar:\n{fmt.get('definition') or ''}"
    else:
        about = "Free text."
    function: dict[str, Any] = {"name": tool["name"]}
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    function["parameters"] = {
        "type": "object",
        "properties": {FREE_TEXT_FIELD: {"type": "string", "description": about}},
        "required": [FREE_TEXT_FIELD],
        "additionalProperties": False,
    }
    return function


def _tools(raw: Any) -> tuple[tuple[dict[str, Any], ...], frozenset[str]]:
    """The client's function and custom tools as OpenAI function-tool schemas (the request's
    shape), and the names of the custom ones. A hosted tool (web search, file search, ...)
    runs at OpenAI: it is not offered upstream."""
    if raw is None:
        return (), frozenset()
    _need(isinstance(raw, list), "tools", "must be a list")
    tools, free_text = [], set()
    for i, tool in enumerate(raw):
        where = f"tools.{i}"
        _need(isinstance(tool, dict), where, "must be an object")
        kind = tool.get("type")
        _need(isinstance(kind, str) and bool(kind), f"{where}.type", "is required")
        if kind not in ("function", "custom"):
            continue  # hosted: see the docstring
        name = tool.get("name")
        _need(isinstance(name, str) and bool(name), f"{where}.name", "is required")
        if kind == "custom":
            free_text.add(name)
            tools.append({"type": "function", "function": _free_text_function(tool, where)})
            continue
        params = tool.get("parameters")
        _need(
            params is None or isinstance(params, dict),
            f"{where}.parameters",
            "must be a JSON Schema object",
        )
        function: dict[str, Any] = {"name": name}
        for field in ("description", "parameters", "strict"):
            if tool.get(field) is not None:
                function[field] = tool[field]
        tools.append({"type": "function", "function": function})
    return tuple(tools), frozenset(free_text)


def response_tools(request: ClientRequest) -> list[dict[str, Any]]:
    """The request's tools as a response echoes them (the Responses API's flat shape)."""
    echoed = []
    for tool in request.tools:
        function = tool["function"]
        if function["name"] in request.free_text_tools:
            echoed.append({"type": "custom", "name": function["name"],
                           "description": function.get("description")})  # fmt: skip
        else:
            echoed.append({"type": "function", **function})
    return echoed


def _tool_choice(raw: Any) -> Any:
    if raw is None or raw in ("auto", "none", "required"):
        return raw
    _need(isinstance(raw, dict), "tool_choice", "must be 'auto', 'none', 'required' or an object")
    _need(
        raw.get("type") in ("function", "custom")
        and isinstance(raw.get("name"), str)
        and bool(raw["name"]),
        "tool_choice",
        "only a function or custom tool can be forced (a hosted tool is not offered upstream)",
    )
    return {"type": "function", "function": {"name": raw["name"]}}


def _echoed_choice(choice: Any) -> Any:
    """A tool choice as the request gave it (the params hold it in Chat Completions' shape)."""
    if isinstance(choice, dict):
        return {"type": "function", "name": choice["function"]["name"]}
    return choice


def _response_format(raw: Any) -> dict[str, Any] | None:
    """``text.format`` as a Chat Completions ``response_format`` (None for plain text)."""
    if raw is None:
        return None
    _need(isinstance(raw, dict), "text", "must be an object")
    fmt = raw.get("format")
    if fmt is None:
        return None
    _need(isinstance(fmt, dict), "text.format", "must be an object")
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    _need(kind == "json_schema", "text.format.type", "must be text, json_object or json_schema")
    _need(isinstance(fmt.get("name"), str), "text.format.name", "is required")
    _need(isinstance(fmt.get("schema"), dict), "text.format.schema", "must be an object")
    schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
    return {"type": "json_schema", "json_schema": schema}


def _params(body: dict[str, Any]) -> dict[str, Any]:
    params = {k: body[k] for k in _SAME_NAME if body.get(k) is not None}
    limit = body.get("max_output_tokens")
    if limit is not None:
        _need(
            isinstance(limit, int) and not isinstance(limit, bool) and limit > 0,
            "max_output_tokens",
            "must be a positive integer",
        )
        params["max_tokens"] = limit
    choice = _tool_choice(body.get("tool_choice"))
    if choice is not None:
        params["tool_choice"] = choice
    reasoning = body.get("reasoning")
    if reasoning is not None:
        _need(isinstance(reasoning, dict), "reasoning", "must be an object")
        if reasoning.get("effort") is not None:
            params["reasoning_effort"] = reasoning["effort"]
    response_format = _response_format(body.get("text"))
    if response_format is not None:
        params["response_format"] = response_format
    return params


class _History:
    """The input items made into the gateway's messages (see the module docstring).
    ``field`` names the list in errors; ``chained``: a leading system message is a message
    of the history too (a conversation's items), not part of the system text."""

    def __init__(self, instructions: str, field: str = "input", *, chained: bool = False) -> None:
        self.system = [instructions] if instructions else []
        self.messages: list[ClientMessage] = []
        self._open_reply = False  # the last message is an assistant's that calls may join
        self._field = field
        self._chained = chained
        self.compacted = ""  # the handle of the last compaction item (see ``_compaction``)
        self.compacted_param = ""

    def add(self, item: Any, index: int | None) -> None:
        """Item ``index`` of ``input`` (None: ``input`` was the item itself). A client
        resends its whole history on every call, so the common item (a user's or an
        assistant's message with string content) takes a short path, and the field names an
        error needs are only spelt out on the other."""
        if type(item) is dict and item.get("type", "message") == "message":
            role, content = item.get("role"), item.get("content")
            if type(content) is str and (role == "user" or role == "assistant"):
                self._open_reply = role == "assistant"
                self.messages.append(ClientMessage(role, content))
                return
        self._add(item, self._field if index is None else f"{self._field}.{index}")

    def _add(self, item: Any, where: str) -> None:
        _need(isinstance(item, dict), where, "must be an object")
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            self._message(item, where)
        elif kind == "function_call":
            self._call(item, where)
        elif kind == "custom_tool_call":
            self._call(item, where, free_text=True)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = item.get("call_id")
            _need(isinstance(call_id, str) and bool(call_id), f"{where}.call_id", "is required")
            output = item.get("output")
            text = content_text(output, f"{where}.output")
            self.messages.append(ClientMessage("tool", text, tool_call_id=call_id))
            self._open_reply = False
        elif kind == "reasoning":
            return  # the gateway relays no reasoning (see the module docstring)
        elif kind == "compaction" and not self._chained:
            self._compaction(item, where)
        elif kind == "item_reference":
            raise GatewayRequestInvalid(
                f"{where}.type",
                "an item_reference is not served: send the item itself, or continue from a "
                "previous_response_id or a conversation",
            )
        else:
            raise GatewayRequestInvalid(
                f"{where}.type",
                f"unknown or unserved input item type {kind!r} (message, function_call, "
                "function_call_output and reasoning are served)",
            )

    def _compaction(self, item: dict[str, Any], where: str) -> None:
        """A compaction item stands for the history before it (see ``compaction``): the
        messages so far are the client's restatement of it and are left out; the system
        text stays."""
        handle = item.get("encrypted_content")
        _need(
            isinstance(handle, str) and bool(handle),
            f"{where}.encrypted_content",
            "is required (the compaction's handle, as this gateway gave it)",
        )
        self.compacted, self.compacted_param = str(handle), f"{where}.encrypted_content"
        self.messages.clear()
        self._open_reply = False

    def _message(self, item: dict[str, Any], where: str) -> None:
        role = item.get("role")
        _need(
            role in _MESSAGE_ROLES, f"{where}.role", f"must be one of {', '.join(_MESSAGE_ROLES)}"
        )
        text = content_text(item.get("content"), f"{where}.content", allow_none=role == "assistant")
        self._open_reply = role == "assistant"
        if role in ("system", "developer"):
            if self.messages or self._chained:
                self.messages.append(ClientMessage("system", text))
            else:
                self.system.append(text)
        else:
            self.messages.append(ClientMessage(str(role), text))

    def _call(self, item: dict[str, Any], where: str, *, free_text: bool = False) -> None:
        call_id, name = item.get("call_id"), item.get("name")
        _need(isinstance(call_id, str) and bool(call_id), f"{where}.call_id", "is required")
        _need(isinstance(name, str) and bool(name), f"{where}.name", "is required")
        if free_text:
            text = item.get("input")
            _need(isinstance(text, str), f"{where}.input", "must be a string")
            arguments = {FREE_TEXT_FIELD: text}
            call = ToolCall(str(call_id), str(name), arguments, json.dumps(arguments))
        else:
            call = decode_call(str(call_id), str(name), item.get("arguments"))
        if self._open_reply:
            last = self.messages[-1]
            self.messages[-1] = ClientMessage("assistant", last.content, (*last.tool_calls, call))
        else:
            self.messages.append(ClientMessage("assistant", "", (call,)))
            self._open_reply = True


def parse_responses_request(
    body: Any, *, counting: bool = False, compacting: bool = False
) -> ClientRequest:
    """The gateway request for a ``POST /v1/responses`` body (decoded JSON); ``counting`` for
    ``/v1/responses/input_tokens``, whose body may leave out ``model`` and ``input``;
    ``compacting`` for ``/v1/responses/compact`` (the request asks for a compaction, as one
    whose input ends with a ``compaction_trigger`` item does)."""
    _need(isinstance(body, dict), "body", "must be a JSON object")
    model = body.get("model", "" if counting else None)
    _need(
        isinstance(model, str) and (counting or bool(model.strip())),
        "model",
        "is required (a string)" if not counting else "must be a string",
    )
    conversation = _conversation_id(body.get("conversation"))
    _need(not body.get("background"), "background", f"is not served: {_UNSERVED}")
    store = body.get("store", True)
    _need(isinstance(store, bool) or store is None, "store", "must be a boolean")
    previous = body.get("previous_response_id")
    _need(
        previous is None or (isinstance(previous, str) and bool(previous.strip())),
        "previous_response_id",
        "must be a response id (a non-empty string)",
    )
    _need(
        not (previous and conversation),
        "previous_response_id",
        "cannot be used with conversation: a conversation already continues from its last item",
    )
    stream = body.get("stream", False)
    _need(isinstance(stream, bool) or stream is None, "stream", "must be a boolean")
    instructions = body.get("instructions")
    _need(
        instructions is None or isinstance(instructions, str),
        "instructions",
        "must be a string",
    )
    history = _History(instructions or "")
    raw = body.get("input")
    compact = compacting
    if isinstance(raw, str):
        history.add({"role": "user", "content": raw}, None)
    elif not (counting and raw is None):
        _need(isinstance(raw, list) and bool(raw), "input", "must be a string or a non-empty list")
        last = len(raw) - 1
        for i, item in enumerate(raw):
            if type(item) is dict and item.get("type") == "compaction_trigger":
                # Remote compaction v2: the input ends with it (see ``compaction``).
                _need(i == last, f"input.{i}.type", "a compaction_trigger must be the last item")
                compact = True
                continue
            history.add(item, i)
    if not counting:
        _need(
            bool(history.messages) or bool(history.compacted),
            "input",
            "must hold at least one non-system item",
        )
    _need(
        not (history.compacted and (previous or conversation)),
        history.compacted_param,
        "a compaction item cannot be used with previous_response_id or conversation: it "
        "already stands for the history before it",
    )
    tools, free_text = _tools(body.get("tools"))
    return ClientRequest(
        api="responses",
        model=model.strip(),
        system="\n\n".join(history.system),
        messages=tuple(history.messages),
        tools=tools,
        stream=bool(stream),
        params=_params(body),
        free_text_tools=free_text,
        response_id=new_response_id(),
        created_at=int(time.time()),
        store=store is not False,
        previous_response_id=previous.strip() if previous else "",
        conversation_id=conversation,
        compacted=history.compacted,
        compacted_param=history.compacted_param,
        compact=compact and not counting,
    )


def _conversation_id(raw: Any) -> str:
    """The ``conversation`` a request adds to: its id, given as a string or as ``{"id": ...}``
    (``""``: none)."""
    if raw is None:
        return ""
    given = raw.get("id") if isinstance(raw, dict) else raw
    _need(
        isinstance(given, str) and bool(given.strip()),
        "conversation",
        "must be a conversation id (a non-empty string, or an object with one as its id)",
    )
    return str(given).strip()


def parse_items(raw: Any, field: str, *, most: int) -> list[ClientMessage]:
    """The messages of a list of input items added to a conversation (its ``items``), at
    most ``most`` of them; a system message is one of them wherever it stands."""
    _need(isinstance(raw, list), field, "must be a list of items")
    _need(len(raw) <= most, field, f"takes at most {most} items at a time")
    history = _History("", field, chained=True)
    for i, item in enumerate(raw):
        history.add(item, i)
    return history.messages


def new_response_id() -> str:
    return f"resp_{uuid.uuid4().hex[:24]}"


def item_id(response_id: str, prefix: str, index: int) -> str:
    """Output item ``index`` of response ``response_id``: the same id however often the
    response is written (streamed, returned whole, retrieved)."""
    return f"{prefix}_{response_id.removeprefix('resp_')}_{index}"


def message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": [part] if status == "completed" else [],
    }


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def free_text_input(call: ToolCall) -> str:
    """What a call to a custom tool gives the client: its ``input`` argument, or, when the
    model wrote something else, its arguments as written."""
    text = call.arguments.get(FREE_TEXT_FIELD) if call.arguments_error is None else None
    if isinstance(text, str) and len(call.arguments) == 1:
        return text
    return call.to_message()["function"]["arguments"]


def custom_call_item(item_id: str, call: ToolCall, text: str) -> dict[str, Any]:
    return {"type": "custom_tool_call", "id": item_id, "call_id": call.id,
            "name": call.name, "input": text}  # fmt: skip


def reply_items(request: ClientRequest, reply: ClientReply) -> list[dict[str, Any]]:
    """The output items of a whole reply: its text, then each tool call (a custom tool's as
    a ``custom_tool_call``)."""
    items: list[dict[str, Any]] = []
    rid = request.response_id or new_response_id()
    if reply.content or not reply.tool_calls:
        items.append(message_item(item_id(rid, "msg", 0), reply.content))
    for call in reply.tool_calls:
        at = len(items)
        if call.name in request.free_text_tools:
            items.append(custom_call_item(item_id(rid, "ctc", at), call, free_text_input(call)))
            continue
        arguments = call.to_message()["function"]["arguments"]
        items.append(call_item(item_id(rid, "fc", at), call.id, call.name, arguments, "completed"))
    return items


def usage(reply: ClientReply) -> dict[str, Any]:
    return {
        "input_tokens": reply.usage.input_tokens,
        # Like prompt_tokens, input_tokens already counts them.
        "input_tokens_details": {"cached_tokens": reply.usage.cache_read_input_tokens or 0},
        "output_tokens": reply.usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": reply.usage.input_tokens + reply.usage.output_tokens,
    }


def response_object(
    request: ClientRequest,
    *,
    response_id: str,
    created_at: int,
    status: str,
    output: list[dict[str, Any]],
    reply: ClientReply | None = None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``response`` object; ``reply`` is None while it is in progress or when it failed.
    A finished reply carries its usage and the extension field ``scroll``."""
    reason = INCOMPLETE.get(reply.finish_reason) if reply is not None else None
    body: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": "incomplete" if reason else status,
        "error": error,
        "incomplete_details": {"reason": reason} if reason else None,
        "instructions": None,
        "model": reply.model if reply is not None else request.model,
        "output": output,
        "parallel_tool_calls": request.params.get("parallel_tool_calls", True),
        "tool_choice": _echoed_choice(request.params.get("tool_choice", "auto")),
        "tools": response_tools(request),
        "store": request.store,
        "previous_response_id": request.previous_response_id or None,
        "conversation": {"id": request.conversation_id} if request.conversation_id else None,
        "usage": usage(reply) if reply is not None else None,
    }
    if reply is not None:
        body["scroll"] = reply.stats.to_dict()
    return body


def whole_response(request: ClientRequest, reply: ClientReply) -> dict[str, Any]:
    """The ``response`` object of a reply that was not streamed."""
    return response_object(
        request,
        response_id=request.response_id or new_response_id(),
        created_at=request.created_at or int(time.time()),
        status="completed",
        output=reply_items(request, reply),
        reply=reply,
    )


def input_items(conversation: Sequence[tuple[int, ClientMessage]]) -> list[dict[str, Any]]:
    """The input of a stored response as the API lists it (``/v1/responses/{id}/input_items``),
    earlier turns included, in conversation order: ``conversation`` is each message with the
    seq of its first event in the log, from which each item's id is made, so an id holds from
    call to call. A call to a custom tool is listed as the function it was offered as."""
    items: list[dict[str, Any]] = []
    for seq, message in conversation:
        if message.role == "tool":
            items.append({"type": "function_call_output", "id": f"fco_{seq}",
                          "call_id": message.tool_call_id or "", "output": message.content,
                          "status": "completed"})  # fmt: skip
        elif message.role == "assistant":
            if message.content or not message.tool_calls:
                items.append(message_item(f"msg_{seq}", message.content))
            for j, call in enumerate(message.tool_calls):
                arguments = call.to_message()["function"]["arguments"]
                items.append(call_item(f"fc_{seq}_{j}", call.id, call.name, arguments, "completed"))
        else:
            part = {"type": "input_text", "text": message.content}
            items.append({"type": "message", "id": f"msg_{seq}", "role": message.role,
                          "status": "completed", "content": [part]})  # fmt: skip
    return items


def item_page(
    items: list[dict[str, Any]], *, order: str = "desc", limit: int = 20, after: str | None = None
) -> dict[str, Any]:
    """One page of ``items`` as the API lists them: ``order`` ``asc`` or ``desc`` (the API's
    default), at most ``limit`` (1-100), those after the item ``after`` in that order. A
    bad value is a ``GatewayRequestInvalid`` naming the query parameter."""
    _need(order in ("asc", "desc"), "order", "must be asc or desc")
    _need(1 <= limit <= 100, "limit", "must be between 1 and 100")
    ordered = items if order == "asc" else items[::-1]
    start = 0
    if after is not None:
        ids = [item["id"] for item in ordered]
        _need(after in ids, "after", f"no item {after!r} in this list")
        start = ids.index(after) + 1
    page = ordered[start : start + limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": start + limit < len(ordered),
    }
