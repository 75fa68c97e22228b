"""The events of one streamed ``POST /v1/responses`` reply, made as the reply is.

The Responses API streams typed events, each with its ``sequence_number``: the response is
created and in progress, then each output item is added, grows and is done (a message item
through its one ``output_text`` part; a ``function_call`` item through its arguments), and
the response ends ``response.completed`` (``response.incomplete`` when the reply was cut at
its token limit, ``response.failed`` when the request failed after the stream began). The
final response holds the items as they were streamed, with usage and the extension field
``scroll``.
"""

from __future__ import annotations

import time
from typing import Any

from ..models.base import ToolCall
from ._types import ClientReply, ClientRequest
from .openai_api import pieces
from .responses_api import (
    call_item,
    custom_call_item,
    free_text_input,
    item_id,
    message_item,
    new_response_id,
    response_object,
)

__all__ = ["ResponseEvents"]


class ResponseEvents:
    """``start()``; ``text(piece)`` as text arrives; ``block(kind, part)`` as a client tool
    call streams (see ``upstream.OnBlock``; thinking is left out, as in a chat chunk);
    ``end(reply, rest)`` with the reply's text not streamed yet, or ``failed(error)``."""

    def __init__(self, request: ClientRequest) -> None:
        self.request = request
        self.id = request.response_id or new_response_id()
        self.created_at = request.created_at or int(time.time())
        self.output: list[dict[str, Any]] = []  # every item so far, in output order
        self._seq = 0
        self._text_at: int | None = None  # the output index of the message streaming now
        self._text = ""
        self._call_at: int | None = None  # the output index of the call streaming now
        self._arguments = ""
        self._streamed: set[str] = set()  # the call ids streamed as they came
        # A call to a custom tool began: its input is free text, known only when the call
        # is whole, so it and every call after it (their order kept) go out at the end.
        self._holding = False

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return event

    def _response(self, status: str, **kw: Any) -> dict[str, Any]:
        return response_object(
            self.request,
            response_id=self.id,
            created_at=self.created_at,
            status=status,
            output=[dict(item) for item in self.output],
            **kw,
        )

    def start(self) -> list[dict[str, Any]]:
        return [
            self._event("response.created", response=self._response("in_progress")),
            self._event("response.in_progress", response=self._response("in_progress")),
        ]

    # -- text -----------------------------------------------------------------------------
    def text(self, piece: str) -> list[dict[str, Any]]:
        if not piece:
            return []
        out = self._close_call()
        if self._text_at is None:
            out += self._open_text()
        self._text += piece
        out.append(
            self._event(
                "response.output_text.delta", **self._text_place(), delta=piece, logprobs=[]
            )
        )
        return out

    def _text_place(self) -> dict[str, Any]:
        at = self._text_at
        assert at is not None
        return {"item_id": self.output[at]["id"], "output_index": at, "content_index": 0}

    def _open_text(self) -> list[dict[str, Any]]:
        at = self._text_at = len(self.output)
        item = message_item(item_id(self.id, "msg", at), "", status="in_progress")
        self.output.append(item)
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return [
            self._event("response.output_item.added", output_index=at, item=dict(item)),
            self._event("response.content_part.added", **self._text_place(), part=part),
        ]

    def _close_text(self) -> list[dict[str, Any]]:
        at, text = self._text_at, self._text
        if at is None:
            return []
        place = self._text_place()
        done = self.output[at] = message_item(place["item_id"], text)
        self._text_at, self._text = None, ""
        return [
            self._event("response.output_text.done", **place, text=text, logprobs=[]),
            self._event("response.content_part.done", **place, part=done["content"][0]),
            self._event("response.output_item.done", output_index=at, item=dict(done)),
        ]

    # -- tool calls -----------------------------------------------------------------------
    def block(self, kind: str, part: dict[str, Any] | None) -> list[dict[str, Any]]:
        """A block of the reply as it streams: a ``tool_use`` block's start opens a
        ``function_call`` item (the message before it is done), its ``input_json_delta``
        pieces are the call's arguments (``{}`` when it closes with none); anything else
        (thinking) sends nothing. A call to a custom tool, and every call after it, goes
        out whole at the end."""
        if self._holding:
            return []
        if kind == "delta" and part is not None and self._call_at is not None:
            piece = part.get("partial_json") if part.get("type") == "input_json_delta" else None
            return self._arguments_piece(piece) if piece else []
        out = self._close_call()  # a block's stop, or the start of another
        if kind == "start" and part is not None and part.get("type") == "tool_use":
            out += self._close_text()
            if str(part.get("name")) in self.request.free_text_tools:
                self._holding = True  # see __init__
            else:
                out += self._open_call(str(part.get("id")), str(part.get("name")))
        return out

    def _open_call(self, call_id: str, name: str) -> list[dict[str, Any]]:
        at = self._call_at = len(self.output)
        item = call_item(item_id(self.id, "fc", at), call_id, name, "", "in_progress")
        self.output.append(item)
        self._streamed.add(call_id)
        return [self._event("response.output_item.added", output_index=at, item=dict(item))]

    def _arguments_piece(self, piece: str) -> list[dict[str, Any]]:
        at = self._call_at
        assert at is not None
        self._arguments += piece
        item_id = self.output[at]["id"]
        return [
            self._event(
                "response.function_call_arguments.delta",
                item_id=item_id,
                output_index=at,
                delta=piece,
            )
        ]

    def _close_call(self) -> list[dict[str, Any]]:
        at = self._call_at
        if at is None:
            return []
        out = [] if self._arguments.strip() else self._arguments_piece("{}")
        item = self.output[at]
        done = self.output[at] = {**item, "arguments": self._arguments, "status": "completed"}
        self._call_at, self._arguments = None, ""
        out += [
            self._event(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=at,
                name=item["name"],
                arguments=done["arguments"],
            ),
            self._event("response.output_item.done", output_index=at, item=dict(done)),
        ]
        return out

    def _custom_call(self, call: ToolCall) -> list[dict[str, Any]]:
        """A whole call to a custom tool: its item, its input in pieces, done."""
        at, text = len(self.output), free_text_input(call)
        item = custom_call_item(item_id(self.id, "ctc", at), call, "")
        self.output.append({**item, "input": text})
        place = {"item_id": item["id"], "output_index": at}
        out = [self._event("response.output_item.added", output_index=at, item=item)]
        for piece in pieces(text):
            out.append(self._event("response.custom_tool_call_input.delta", **place, delta=piece))
        out.append(self._event("response.custom_tool_call_input.done", **place, input=text))
        out.append(self._event("response.output_item.done", output_index=at, item=self.output[at]))
        return out

    # -- the end --------------------------------------------------------------------------
    def end(self, reply: ClientReply, rest: str = "") -> list[dict[str, Any]]:
        """The reply's text not streamed yet, each tool call not streamed (whole), and the
        final response: ``response.completed``, or ``response.incomplete`` for a reply cut
        at its token limit."""
        out: list[dict[str, Any]] = []
        for piece in pieces(rest):
            out += self.text(piece)
        out += self._close_call()
        for call in reply.tool_calls:
            if call.id in self._streamed:
                continue
            out += self._close_text()
            if call.name in self.request.free_text_tools:
                out += self._custom_call(call)
                continue
            out += self._open_call(call.id, call.name)
            for piece in pieces(call.to_message()["function"]["arguments"]):
                out += self._arguments_piece(piece)
            out += self._close_call()
        if not self.output:  # an empty reply: one empty message, as a whole reply has
            out += self._open_text()
        out += self._close_text()
        final = self._response("completed", reply=reply)
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        out.append(self._event(kind, response=final))
        return out

    def failed(self, error: dict[str, Any]) -> list[dict[str, Any]]:
        """The request failed after the stream began: ``error`` holds its code and message."""
        out = self._close_call() + self._close_text()
        out.append(self._event("response.failed", response=self._response("failed", error=error)))
        return out

    def compaction(self, item: dict[str, Any], reply: ClientReply) -> list[dict[str, Any]]:
        """A remote compaction's answer after ``start()``: its one ``compaction`` item, added
        and done whole, and the completed response (see ``compaction``)."""
        at = len(self.output)
        self.output.append(item)
        return [
            self._event("response.output_item.added", output_index=at, item=dict(item)),
            self._event("response.output_item.done", output_index=at, item=dict(item)),
            self._event("response.completed", response=self._response("completed", reply=reply)),
        ]
