"""The chain of a session's client messages rebuilt from its events in the log, and read back
as messages: what a request continuing from a stored reply (the Responses API's
``previous_response_id``) did not send.

The gateway tags the events it appends (see ``_history``): a client message is a ``msg`` event
at chain position ``pos``, a reply a ``reply`` event, and each carries its fingerprint ``fp``;
the tool calls of either follow as ``part`` or ``reply_call`` events of the same position. A
later event at a position replaces the chain from there on (a client's rewrite), so replaying
the events in log order up to a reply gives the chain exactly as it stood when that reply was
made, whatever was rewritten since.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..models.base import ToolCall
from ..store import Event
from ._types import ClientMessage, StoredPlace

__all__ = [
    "ChainLink",
    "chain_at",
    "chain_step",
    "conversation_before",
    "read_back",
    "replay_chain",
]


@dataclass
class ChainLink:
    """One message of the client's history as the log holds it.

    ``plain``: the message is its first event alone (no tool calls) and ``fp`` is the
    fingerprint of that event's role, content and call id as the client sent them, so a
    resent message equal to the event has this fingerprint without hashing it again.
    ``calls`` are the tool calls of a client's own assistant message (a reply keeps its own
    in ``reply``)."""

    fp: str
    role: str
    first_seq: int
    tokens: int = 0
    reply: tuple[str, tuple[ToolCall, ...], str] | None = None  # content, calls, finish
    plain: bool = False
    calls: list[ToolCall] = field(default_factory=list)


def _gateway_tag(event: Event) -> tuple[Any, Any, dict[str, Any]]:
    meta = event.metadata if isinstance(event.metadata, dict) else {}
    return meta.get("gw"), meta.get("pos"), meta


def _call_of(event: Event) -> ToolCall:
    args = event.tool_input if isinstance(event.tool_input, dict) else {}
    return ToolCall(event.tool_call_id or "", event.name or "", args)


def chain_step(chain: list[ChainLink], event: Event) -> None:
    """Apply one logged event to ``chain`` (events are applied in log order)."""
    kind, pos, meta = _gateway_tag(event)
    if not isinstance(pos, int) or isinstance(pos, bool) or pos < 0:
        return
    if kind in ("msg", "reply"):
        del chain[pos:]
        link = ChainLink(str(meta.get("fp")), event.role or "", event.seq, event.tokens)
        link.plain = "shown" not in meta  # a streamed reply's event is not what was shown
        if kind == "reply":
            finish = str(meta.get("client_finish") or "stop")
            link.reply = (str(meta.get("shown", event.content)), (), finish)
        chain.append(link)
    elif kind in ("part", "reply_call") and pos < len(chain):
        link = chain[pos]
        link.tokens += event.tokens
        link.plain = False
        call = _call_of(event)
        if kind == "reply_call" and link.reply is not None:
            content, calls, finish = link.reply
            link.reply = (content, (*calls, call), finish)
        elif kind == "part":
            link.calls.append(call)


def replay_chain(events: Iterable[Event], until_seq: int | None = None) -> list[ChainLink]:
    """The chain as it stood once the events up to ``until_seq`` (all: None) were logged.
    The tool calls of the last reply follow its event, so they are taken too."""
    chain: list[ChainLink] = []
    for event in events:
        if until_seq is not None and event.seq > until_seq:
            kind, pos, _ = _gateway_tag(event)
            if kind in ("msg", "reply"):
                break  # the next change of the chain
            if kind != "reply_call" or pos != len(chain) - 1:
                continue  # recall steps, results, markers: not the chain's
        chain_step(chain, event)
    return chain


def _full_text(event: Event) -> str:
    """An event's whole text: a long message's content is a preview of its payload."""
    if event.is_preview and event.payload is not None:
        loaded = event.payload.load()
        return loaded if isinstance(loaded, str) else str(loaded)
    return event.content


def read_back(links: Sequence[ChainLink], events: dict[int, Event]) -> tuple[ClientMessage, ...]:
    """The client messages of ``links`` as the client sent (or got) them; ``events`` holds at
    least each non-reply link's first event, by seq."""
    out = []
    for link in links:
        if link.reply is not None:
            content, calls, _ = link.reply
            out.append(ClientMessage("assistant", content, calls))
            continue
        event = events[link.first_seq]
        out.append(
            ClientMessage(
                link.role or event.role or "user",
                _full_text(event),
                tuple(link.calls),
                event.tool_call_id,
            )
        )
    return tuple(out)


def chain_at(events: Sequence[Event], place: StoredPlace) -> list[ChainLink] | None:
    """The chain as it stood when the stored reply at ``place`` was made, that reply its last
    link, replayed from a session's events in log order; None when they hold no such reply.
    The reply is the event tagged with its response id, or, untagged, the last reply at its
    place with its fingerprint."""
    made: Event | None = None
    for event in events:
        kind, pos, meta = _gateway_tag(event)
        if kind != "reply" or pos != place.position:
            continue
        if place.logged_as:
            if meta.get("rid") == place.logged_as:
                made = event
                break
        elif meta.get("fp") == place.reply_fp:
            made = event
    if made is None:
        return None
    links = replay_chain(events, made.seq)
    if len(links) != place.position + 1 or links[-1].first_seq != made.seq:
        return None
    return links


def conversation_before(
    events: Sequence[Event], place: StoredPlace, *, through: bool = False
) -> list[tuple[int, ClientMessage]] | None:
    """The messages that came before the stored reply at ``place`` (the input it answered,
    earlier turns included; ``through``: and the reply itself), each with the seq of its
    first event, read from a session's events in log order; None when they hold no such
    reply (see ``chain_at``)."""
    links = chain_at(events, place)
    if links is None:
        return None
    kept = links if through else links[: place.position]
    by_seq = {e.seq: e for e in events}
    return list(zip([link.first_seq for link in kept], read_back(kept, by_seq), strict=True))
