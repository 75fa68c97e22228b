"""The session's history in the Event Log, as the gateway writes and reads it back.

The prefix sent upstream is the client's system prompt and tools plus Scroll's rubric and
recall tool (``_prepare``, cached per distinct system prompt and tool list, logged once each).
Every event the gateway appends carries ``metadata["gw"]``: ``prefix`` (the client's system
prompt and tools, kept out of the view), ``msg`` (a client message at chain position ``pos``
with fingerprint ``fp``), ``part`` (a tool call of that message), ``reply`` and
``reply_call`` (what the client got), ``step`` (an internal recall step: its text, its calls
and their results), ``rewrite`` (the marker naming the seqs a client's rewrite took out of the
conversation) and ``compaction`` (the marker of a client's remote compaction, naming the seqs
it stands for: see ``compaction``). ``HistoryLog`` keeps the chain of the client's messages
in memory and rebuilds it, and the view's live set, from these when a process first serves a
session.
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import GatewayRequestInvalid, ScrollError
from ..kernel.ms import MsCapability
from ..models.base import ToolCall
from ..profile import Profile
from ..prompts import HEADLINE_INSTRUCTION, RECALL_TOOL, gateway_prompt, recall_tool_definition
from ..store import KIND_CONTEXT_MSG, KIND_MODEL_TURN, KIND_TOOL_RESULT, Event, EventStore
from ..telemetry import span
from ..tokens import TokenCounter
from ..view import ContextState, Prefix
from ._types import ClientMessage, ClientRequest, StoredPlace
from .compaction import client_summary
from .stored import ChainLink as Link
from .stored import chain_at, chain_step, read_back

__all__ = ["HistoryLog", "Link", "Prepared", "client_tokens"]


@dataclass(frozen=True)
class Prepared:
    """The prefix sent upstream for one client system prompt and tool list, and what the
    client's own system prompt and tools cost it. ``early``: the prefix sent until the first
    eviction, the client's own plus the headline instruction alone (no recall tool: nothing
    has left the view yet, so there is nothing to recall)."""

    prefix: Prefix
    client_prefix_tokens: int
    early: Prefix


# Prepared prefixes by (system prompt and tools digest, print cap, token counter), shared by
# the process's conversations: each new conversation counted the gateway prompt and the
# client's prefix (~2.5k tokens, three tiktoken passes) again, ~1 ms of a new conversation's
# CPU under load. Bounded; oldest dropped first.
_PREPARED: dict[tuple[str, int, object], Prepared] = {}
_PREPARED_LOCK = threading.Lock()
PREPARED_KEPT = 256


def _prepared(
    request: ClientRequest, tools_json: str, print_cap: int, counter: TokenCounter
) -> Prepared:
    # The digest sorts the tools' keys; the prefix keeps the client's order, so it is keyed by
    # the tools as the client wrote them.
    exact = json.dumps(list(request.tools), ensure_ascii=False)
    key = (hashlib.sha256(f"{request.system}\0{exact}".encode()).hexdigest(), print_cap, counter)
    with _PREPARED_LOCK:
        cached = _PREPARED.get(key)
    if cached is not None:
        return cached
    client_text = request.system + tools_json if request.tools else request.system
    client_tokens = counter.count(client_text)
    system = gateway_prompt(print_cap=print_cap)
    early = HEADLINE_INSTRUCTION
    if request.system.strip():
        system = f"{request.system}\n\n{system}"
        early = f"{request.system}\n\n{early}"
    prefix = Prefix.build(system, [*request.tools, recall_tool_definition()], counter=counter)
    cached = Prepared(prefix, client_tokens, Prefix.build(early, request.tools, counter=counter))
    with _PREPARED_LOCK:
        if len(_PREPARED) >= PREPARED_KEPT:
            _PREPARED.pop(next(iter(_PREPARED)))
        _PREPARED[key] = cached
    return cached


class HistoryLog:
    """The log-facing half of ``GatewayConversation`` (a mixin: it shares its state)."""

    log: EventStore
    session_id: str
    agent_id: str
    state: ContextState
    ms: MsCapability
    chain: list[Link]
    counter: TokenCounter
    profile: Profile
    _generation: int
    _prefix_hash: str | None
    _pending_prefix: tuple[str, dict[str, Any]] | None
    _prefixes: dict[str, Prepared]
    _recompact: bool
    lock: threading.Lock

    def _load(self) -> None:
        events = self.log.session_events(self.session_id, after_seq=0, limit=None)
        if not events:
            return
        foreign = next((e for e in events if e.agent_id != self.agent_id), None)
        if foreign is not None:
            raise ScrollError(
                f"session {self.session_id!r} holds events of another agent; refusing it"
            )
        hidden: set[int] = set()
        for event in events:
            meta = event.metadata if isinstance(event.metadata, dict) else {}
            kind = meta.get("gw")
            if kind == "prefix":
                hidden.add(event.seq)
                self._prefix_hash = str(meta.get("hash"))
            elif kind == "rewrite":
                lo, hi = meta.get("dropped", [0, -1])
                hidden.update(e.seq for e in events if lo <= e.seq <= hi)
                self._generation += 1
            elif kind == "compaction":
                # The client holds a compacted context: the first view built here is
                # evicted down to its tail again, as it was when the compaction was made.
                self._recompact = True
            else:
                chain_step(self.chain, event)
        self.state.add(events)
        self.state.drop(hidden & set(self.state.live))

    def _prepare(self, request: ClientRequest) -> Prepared:
        """The upstream prefix; when the client's system prompt or tools changed, their event
        is made ready to log (``_pending_prefix``): it goes in the same append as the
        request's new messages (``_append_messages``), so a request that opens a
        conversation commits once before its upstream call, not twice; any other path logs
        it on its own (``_log_prefix``)."""
        tools_json = json.dumps(list(request.tools), sort_keys=True, ensure_ascii=False)
        digest = hashlib.sha256(f"{request.system}\0{tools_json}".encode()).hexdigest()[:24]
        cached = self._prefixes.get(digest)
        if cached is None:
            cached = self._prefixes[digest] = _prepared(
                request, tools_json, self.profile.print_cap, self.counter
            )
        self._pending_prefix = None
        if digest != self._prefix_hash:
            event = self._event(
                f"prefix:{digest}:{uuid.uuid4().hex[:8]}",
                kind=KIND_CONTEXT_MSG,
                role="system",
                content=request.system or "(no system prompt)",
                metadata={"gw": "prefix", "hash": digest, "tools": list(request.tools)},
                searchable=False,
            )
            self._pending_prefix = (digest, event)
        return cached

    def _take_prefix(self) -> tuple[str | None, list[dict[str, Any]]]:
        """The prefix event waiting to be logged (none: ``(None, [])``), no longer waiting."""
        pending, self._pending_prefix = self._pending_prefix, None
        return (pending[0], [pending[1]]) if pending is not None else (None, [])

    def _log_prefix(self) -> None:
        """Log the waiting prefix event on its own (a retry, a rewrite: see ``_prepare``)."""
        digest, events = self._take_prefix()
        if events:
            self.log.append_many(events)
            self._prefix_hash = digest
            self._sync()

    def _event(self, key: str, **fields: Any) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "agent_id": self.agent_id,
            "dedup_key": f"gw:{key}",
            **fields,
        }

    def _sync(self) -> list[Event]:
        """Bring new events into the state; the logged prefixes stay out of the view."""
        fresh = self.state.sync(self.log)
        hidden = [
            e.seq
            for e in fresh
            if isinstance(e.metadata, dict) and e.metadata.get("gw") == "prefix"
        ]
        if hidden:
            self.state.drop(hidden)
        return fresh

    def _record_rewrite(self, common: int, sent: int, new: Sequence[ClientMessage] = ()) -> None:
        """Log a rewrite of the chain from ``common`` on; ``new``, the messages the client
        sends from there, tells a client's own compaction (``compaction.client_summary``)."""
        self._log_prefix()
        self._sync()
        lo = self.chain[common].first_seq
        hi = self.state.synced_seq
        dropped = [s for s in self.state.live if lo <= s <= hi]
        self._generation += 1
        note = (
            f"[scroll] The client rewrote its history from message {common + 1} on: the events "
            f"of seqs {lo}-{hi} are no longer part of this conversation (the client now sends "
            f"{sent} messages). They stay in the Event Log: ms.expand({lo}, {hi})."
        )
        meta: dict[str, Any] = {"gw": "rewrite", "at": common, "dropped": [lo, hi]}
        summary = client_summary(self.chain[common:], new)
        if summary is not None:
            meta["compaction"], meta["summary"] = "client", summary
            note = (
                f"[scroll] The client compacted its history into its own summary (seq "
                f"{summary}): the events of seqs {lo}-{hi} are no longer part of this "
                f"conversation, and what the summary left out is still in the Event Log: "
                f"ms.search(...) finds it, ms.expand({lo}, {hi}) reads it."
            )
        with span(
            "scroll.gateway.rewrite", session=self.session_id, seq_lo=lo, seq_hi=hi, at=common,
            summary=summary,
        ):  # fmt: skip
            self.state.drop(dropped)
            self.log.append_many(
                [
                    self._event(
                        f"rewrite:{self._generation}:{uuid.uuid4().hex[:8]}",
                        kind=KIND_CONTEXT_MSG,
                        role="system",
                        content=note,
                        metadata=meta,
                    )
                ]
            )
            del self.chain[common:]
            self._sync()

    def _stored_chain(self, place: StoredPlace) -> tuple[list[Link], dict[int, Event]]:
        """The chain up to and including the stored reply at ``place``, and the events read
        to find it (by seq). The chain as it stands when it still holds that reply there;
        otherwise (a later rewrite took it out) the chain as it stood when the reply was
        made, replayed from the log (``stored.chain_at``). Refused, naming
        ``previous_response_id``, when the log holds no such reply (its commit failed)."""
        at = place.position
        if at < len(self.chain) and self.chain[at].reply is not None:
            link = self.chain[at]
            if place.logged_as:
                event = self.state.cached(link.first_seq) or self.log.get(link.first_seq)
                meta = event.metadata if isinstance(event.metadata, dict) else {}
                if meta.get("rid") == place.logged_as:
                    return self.chain[: at + 1], {}
            elif link.fp == place.reply_fp:
                return self.chain[: at + 1], {}
        events = self.log.session_events(self.session_id, after_seq=0, limit=None)
        links = chain_at(events, place)
        if links is not None:
            return links, {e.seq: e for e in events}
        raise GatewayRequestInvalid(
            "previous_response_id",
            f"response {place.response_id!r} is not in the log of its session "
            f"{self.session_id!r} (its reply was never committed); send the whole "
            "conversation as input instead",
        )

    def _events_of(self, links: Sequence[Link], read: dict[int, Event]) -> dict[int, Event]:
        """The first event of each of ``links`` that is not a reply (a reply's text is in its
        link), by seq: from ``read``, from memory when live, else in one read of the
        session's events from the first one missing on."""
        held = self.state.cached
        events: dict[int, Event] = {}
        missing: set[int] = set()
        for link in links:
            if link.reply is None:
                event = read.get(link.first_seq) or held(link.first_seq)
                if event is None:
                    missing.add(link.first_seq)
                else:
                    events[event.seq] = event
        if missing:
            after = min(missing) - 1
            events.update(
                (e.seq, e)
                for e in self.log.session_events(self.session_id, after_seq=after, limit=None)
                if e.seq in missing
            )
        return events

    def _continued(
        self, request: ClientRequest, links: list[Link], read: dict[int, Event], common: int
    ) -> ClientRequest:
        """``request``, continuing from the stored reply ``links`` end in, as the rest of the
        request's handling takes it: alignment kept the chain up to ``common``, so only the
        stored messages from there on (those a fork appends again) are read back and put
        before the request's own, ``prior`` counting those before them. When none of the
        messages then holds a user's, the last stored one's text is read for the headline
        (``ClientRequest.last_user_text``)."""
        at = min(common, len(links))
        again = links[at:]
        stored = read_back(again, self._events_of(again, read))
        last_user = ""
        if not any(m.role == "user" for m in (*stored, *request.messages)):
            asked = next((link for link in reversed(links[:at]) if link.role == "user"), None)
            if asked is not None:
                last_user = read_back([asked], self._events_of([asked], read))[0].content
        return replace(
            request,
            messages=(*stored, *request.messages),
            prior=at,
            prior_user_text=last_user,
        )

    def _fingerprints(self, messages: Sequence[ClientMessage], start: int = 0) -> list[str]:
        """The fingerprint of each message. A client resends its whole history every time:
        a message that is exactly the event its chain link logged (same role, text and call
        id, no tool calls) takes the link's fingerprint instead of being hashed again; any
        other is hashed (so whitespace and JSON spelling still compare as the fingerprint
        says). Only live events are held in memory, so an evicted message is hashed too.
        ``messages`` stand at chain positions ``start`` on."""
        out: list[str] = []
        held = self.state.cached
        for pos, message in enumerate(messages, start):
            link = self.chain[pos] if pos < len(self.chain) else None
            if link is not None and link.plain and not message.tool_calls:
                event = held(link.first_seq)
                if (
                    event is not None
                    and event.content == message.content
                    and event.role == message.role
                    and event.tool_call_id == message.tool_call_id
                ):
                    out.append(link.fp)
                    continue
            out.append(message.fingerprint())
        return out

    def _append_messages(
        self, messages: Sequence[ClientMessage], start: int, fps: Sequence[str], prior: int = 0
    ) -> int:
        """Append the messages from chain position ``start`` on; ``messages`` stand at
        positions ``prior`` on (see ``ClientRequest.prior``)."""
        events: list[dict[str, Any]] = []
        owners: list[int] = []
        for pos in range(start, prior + len(messages)):
            message = messages[pos - prior]
            fp = fps[pos]
            key = f"r{self._generation}:p{pos}:{fp[:16]}"
            meta = {"gw": "msg", "pos": pos, "fp": fp}
            if message.role == "user":
                event = self._event(
                    key, kind=KIND_CONTEXT_MSG, role="user", content=message.content, metadata=meta
                )
            elif message.role == "system":
                event = self._event(
                    key,
                    kind=KIND_CONTEXT_MSG,
                    role="system",
                    content=message.content,
                    metadata=meta,
                )
            elif message.role == "tool":
                event = self._event(
                    key,
                    kind=KIND_TOOL_RESULT,
                    role="tool",
                    name=self._tool_name(message.tool_call_id),
                    tool_call_id=message.tool_call_id,
                    content=message.content,
                    metadata=meta,
                )
            else:
                event = self._event(
                    key,
                    kind=KIND_MODEL_TURN,
                    role="assistant",
                    content=message.content,
                    metadata=meta,
                )
            events.append(event)
            owners.append(pos)
            for j, call in enumerate(message.tool_calls):
                events.append(self._call_event(f"{key}:call{j}", call, {"gw": "part", "pos": pos}))
                owners.append(pos)
        digest, prefix = self._take_prefix()
        if not events and not prefix:
            self._sync()
            return 0
        # The prefix (when it changed) first, in the same commit as the messages.
        seqs = self.log.append_many(prefix + events)[len(prefix) :]
        if digest is not None:
            self._prefix_hash = digest
        fresh = {e.seq: e for e in self._sync()}
        for seq, pos, event in zip(seqs, owners, events, strict=True):
            tokens = client_tokens(fresh[seq]) if seq in fresh else 0
            if event["metadata"].get("gw") == "msg":
                message = messages[pos - prior]
                link = Link(event["metadata"]["fp"], message.role, seq, tokens)
                link.plain = not message.tool_calls
                link.calls = list(message.tool_calls)  # as replaying the log gives them
                self.chain.append(link)
            else:
                self.chain[pos].tokens += tokens
        last_user = next(
            (
                s
                for s, e in zip(reversed(seqs), reversed(events), strict=True)
                if e.get("role") == "user"
            ),
            None,
        )
        if last_user is not None and last_user in self.state.live:
            self.state.begin_turn(last_user)
            self.ms.begin_turn(last_user)
        return len(events)

    # ------------------------------------------------------------ a conversation's items
    def items(self) -> list[tuple[int, ClientMessage]]:
        """The chain as the client's messages, read back from the log (the Conversations
        API's items), each with the seq of its first event."""
        with self.lock:
            return self._read_chain(self.chain)

    def add_items(self, messages: Sequence[ClientMessage]) -> list[tuple[int, ClientMessage]]:
        """Append ``messages`` to the chain as a client's messages, no upstream call made
        (items added to a conversation); those appended, each with its first seq."""
        with self.lock, span("scroll.gateway.items", session=self.session_id) as traced:
            start = len(self.chain)
            fps = [link.fp for link in self.chain] + self._fingerprints(messages, start)
            appended = self._append_messages(messages, start, fps, prior=start)
            traced.set(appended=appended, at=start)
            added = zip(self.chain[start:], messages, strict=True)
            return [(link.first_seq, message) for link, message in added]

    def put_items(self, messages: Sequence[ClientMessage]) -> bool:
        """Make the chain exactly ``messages``, no upstream call made (an item deleted from a
        conversation): what they keep is kept, the rest is a rewrite from where they leave
        the chain (its events leave the view, never the log) and what follows is appended
        again. Whether anything was rewritten."""
        with self.lock, span("scroll.gateway.items", session=self.session_id) as traced:
            incoming = self._fingerprints(messages)
            common = 0
            for logged, sent in zip(self.chain, incoming, strict=False):
                if logged.fp != sent:
                    break
                common += 1
            rewritten = common < len(self.chain)
            if rewritten:
                self._record_rewrite(common, len(incoming))
            appended = self._append_messages(messages, common, incoming)
            traced.set(appended=appended, at=common, rewritten=rewritten)
            return rewritten

    def _read_chain(self, links: Sequence[Link]) -> list[tuple[int, ClientMessage]]:
        said = read_back(links, self._events_of(links, {}))
        return [(link.first_seq, m) for link, m in zip(links, said, strict=True)]

    def _tool_name(self, call_id: str | None) -> str | None:
        if not call_id:
            return None
        for event in reversed(self.state.events(self.log)):
            if event.tool_call_id == call_id and event.kind == KIND_MODEL_TURN:
                return event.name
        return None

    def _call_event(
        self, key: str, call: ToolCall, meta: dict[str, Any], *, searchable: bool = True
    ) -> dict[str, Any]:
        code = call.arguments.get("code") if call.name == RECALL_TOOL else None
        return self._event(
            key,
            kind=KIND_MODEL_TURN,
            role="assistant",
            name=call.name,
            tool_call_id=call.id,
            tool_input=call.arguments,
            content=code
            if isinstance(code, str)
            else (call.raw_arguments or json.dumps(call.arguments)),
            metadata=meta,
            searchable=searchable,
        )


def client_tokens(event: Event) -> int:
    """What a message cost the client to send: the log counts a payload's preview only (what a
    view shows), so a payload's full size is estimated at four characters a token."""
    if event.is_preview and event.payload_size:
        return max(event.tokens, event.payload_size // 4)
    return event.tokens
