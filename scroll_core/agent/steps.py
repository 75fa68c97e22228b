"""Pieces of a model step that Scroll's own loop (``Session``) and the gateway's recall loop
(``gateway.GatewayConversation``) share: the profile re-read before a compress, the model
call as a ``chat`` span, and a tool call's id kept unique in the log."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .. import wire
from ..headlines import parse_headline
from ..models.base import ModelReply, ToolCall
from ..profile import Profile
from ..store import EventStore
from ..telemetry import chat_input, chat_output, chat_span, span, usage

__all__ = ["fresh_profile", "traced_call", "unique_call"]


def fresh_profile(
    current: Profile, source: Callable[[], Profile] | None, *, session: str
) -> Profile:
    """The profile ``source`` gives now (an operator's edit applies at the next compress), or
    ``current`` when there is no source or it fails (the session goes on; a span says so)."""
    if source is None:
        return current
    try:
        fresh = source()
    except Exception as exc:  # the source is the operator's; the session must go on
        with span("scroll.profile.unavailable", session=session, error=repr(exc)):
            return current
    if fresh == current:
        return current
    old = current.to_dict()
    changed = sorted(k for k, v in fresh.to_dict().items() if old.get(k) != v)
    with span("scroll.profile.applied", session=session, fields=changed):
        return fresh


def traced_call(
    model: str,
    call: Callable[[], ModelReply],
    *,
    session: str,
    source: str = "run",
    request: Callable[[], dict[str, Any]] | None = None,
    view: Callable[[], dict[str, Any]] | None = None,
    messages: Sequence[Mapping[str, Any]] = (),
    **attributes: Any,
) -> ModelReply:
    """Run ``call`` (one model call) as a ``chat {model}`` span: GenAI's usage attributes,
    the finish reason, and the headline the console's headline-quality alert reads. With
    content capture on (``telemetry.chat_input``), also ``messages`` (what ``call`` sends)
    and the reply, set before the call so that a failed one still shows what it sent.

    Inside ``wire.collecting`` the call is also captured for the record: what the transport
    sent (``request()`` for a model served in process), the reply, the usage, ``view`` (the
    working view's section sizes, built only then) and the span it ran in; ``source`` says
    whose loop made it (``run``, ``gateway``)."""
    capture = wire.calling(
        model, session=session, source=source, request=request, view=view,
        turn=attributes.get("turn"), step=attributes.get("step"),
        attempt=attributes.get("attempt", 1),
    )  # fmt: skip
    with capture as captured, chat_span(model, session=session, **attributes) as traced:
        if captured is not None:
            captured.trace_id, captured.span_id = traced.trace_id, traced.span_id
        if traced.recording:
            traced.set_content(chat_input(model, messages))
        reply = call()
        if captured is not None:
            captured.reply, captured.usage = wire.reply_record(reply)
        if traced.recording:
            parsed = parse_headline(reply.content)
            traced.set_attributes(
                usage(
                    reply.usage.input_tokens,
                    reply.usage.output_tokens,
                    response_model=reply.model or None,
                    finish_reasons=[reply.finish_reason],
                    cache_read_input_tokens=reply.usage.cache_read_input_tokens,
                    cache_creation_input_tokens=reply.usage.cache_creation_input_tokens,
                )
            )
            traced.set_content(
                chat_output(
                    reply.to_message(),
                    reply.finish_reason,
                    reply.usage.input_tokens,
                    reply.usage.output_tokens,
                )
            )
            traced.set(
                tool_calls=len(reply.tool_calls),
                headline=parsed.stored,
                headline_quality=parsed.quality,
            )
        return reply


def unique_call(call: ToolCall, log: EventStore, fresh_id: str) -> ToolCall:
    """``call`` with its provider's id kept unless it has none or the log already holds it
    (some local servers number calls from zero every time), else renamed ``fresh_id``: a
    result always pairs with its own call."""
    if call.id and not log.by_tool_call(call.id):
        return call
    return ToolCall(fresh_id, call.name, call.arguments, call.raw_arguments, call.arguments_error)
