"""One gateway session: the log, the view and the recall loop behind a client's requests.

``GatewayConversation.handle(request, upstream)`` serves one request:

1. align the client's history with the session's chain (see ``align``): a retry gets the
   logged reply again and appends nothing; a rewrite appends a marker event naming the seqs
   that left the conversation (they stay in the log, recallable) and takes them out of the
   view; then only the new suffix is appended;
2. the client's system prompt and tools are logged once per distinct value (kept out of the
   view: they are its prefix) and the prefix sent upstream is the client's system prompt
   plus Scroll's recall rubric, the client's tools plus ``recall_history_python``;
3. ``compress`` (Algorithm 1) brings the view under the trigger, and the upstream is called
   with it: a context-overflow refusal forces a compress and one retry, as the agent loop
   does;
4. the reply's headline is parsed off and stored (an extractive one when the model wrote
   none); recall calls run in the session's sandboxed kernel and their results are logged
   unsearchable; while a reply holds only recall calls the upstream is called again, up to
   ``max_steps`` calls;
5. the first reply with no recall call, or one that also calls the client's tools, goes back
   to the client with the recall calls taken out (their results reach the upstream with the
   client's tool results on the next request), usage summed over the internal calls; a
   streaming client gets the upstream's text as it is written (``handle``'s ``on_text``).
   A server that passes ``answered`` sends the answer before the reply is committed; the
   session stays locked until it is (see ``handle``).

What each appended event is, and how the chain and the view are rebuilt from the log, is in
``_history`` (the log-facing half of the class).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from .. import wire
from ..agent.cells import AgentKernel, CellOutcome, run_cell
from ..agent.steps import fresh_profile, traced_call, unique_call
from ..errors import ContextOverflow, GatewayRequestInvalid, ScrollError
from ..eviction import CompressRecord, compress
from ..headlines import parse_headline
from ..kernel.manager import KernelManager
from ..kernel.ms import MsCapability
from ..kernel.results import NamespaceDigest
from ..models.base import ModelReply, ToolCall, Usage
from ..profile import Profile
from ..prompts import RECALL_TOOL
from ..store import KIND_CONTEXT_MSG, KIND_MODEL_TURN, KIND_TOOL_RESULT, Event, EventStore
from ..telemetry import session_scope, span, usage
from ..tokens import TokenCounter
from ..view import ContextState, Prefix, WorkingView
from ._history import HistoryLog, Link, Prepared
from ._relay import TextRelay
from ._timing import Stages
from ._types import ClientMessage, ClientReply, ClientRequest, CompactionPoint, GatewayStats
from .align import Alignment, align
from .headline_fallback import extractive_headline
from .stored import replay_chain
from .upstream import OnBlock, OnText, Upstream

__all__ = ["DEFAULT_RECALL_STEPS", "REQUEST_SPAN", "GatewayConversation"]

DEFAULT_RECALL_STEPS = 6
# The root span of every gateway request (GenAI's agent invocation); chat, execute_tool,
# compress and the ms calls of a recall cell are its children.
REQUEST_SPAN = "invoke_agent scroll-gateway"
log = logging.getLogger("scroll.gateway")
BUDGET_NOTICE = "[scroll: the recall step budget ran out before the model answered]"


@dataclass
class _Aligned:
    """A request aligned with the session's chain (``GatewayConversation._align``)."""

    request: ClientRequest
    found: Alignment
    stats: GatewayStats
    prepared: Prepared
    incoming: list[str]

    def __iter__(self) -> Iterator[Any]:
        return iter((self.request, self.found, self.stats, self.prepared))


@dataclass
class _Loop:
    stats: GatewayStats
    usage: Usage = field(default_factory=Usage)  # summed over the loop's upstream calls
    compressions: list[tuple[str, CompressRecord]] = field(default_factory=list)


class GatewayConversation(HistoryLog):
    """The gateway side of one session; see the module docstring. Thread-safe: requests to
    one session are served one at a time."""

    def __init__(
        self,
        log: EventStore,
        *,
        session_id: str,
        agent_id: str,
        profile: Profile,
        kernels: KernelManager | None = None,
        kernel: AgentKernel | None = None,
        counter: TokenCounter | None = None,
        max_steps: int = DEFAULT_RECALL_STEPS,
        profile_source: Callable[[], Profile] | None = None,
        readable_agents: Iterable[str] | Callable[[str], Iterable[str]] = (),
    ) -> None:
        if max_steps < 1:
            raise ScrollError(f"max_steps must be at least 1, got {max_steps!r}")
        self.log = log
        self.session_id = session_id
        self.agent_id = agent_id
        self.profile = profile
        self.profile_source = profile_source
        self.counter = counter or log.tokens
        self.max_steps = max_steps
        self.state = ContextState.new(session_id, tier_cap=profile.tier_cap)
        # The key's agent is the tenant: ms reads its sessions only, plus the agents an
        # operator granted it (asked at every call when a callable, so a revoke applies).
        self.ms = MsCapability(
            log, agent_id=agent_id, session_id=session_id, readable_agents=readable_agents
        )
        self.ms.block_resolver = lambda seq: self.state.index.block_for(seq)
        self.digest: NamespaceDigest | None = None
        self.chain: list[Link] = []
        self.requests = 0
        self.lock = threading.Lock()
        self._kernel = kernel
        self._kernels = kernels
        self._kernel_bound = False
        self._generation = 0
        self._prefix_hash: str | None = None
        self._prefixes: dict[str, Prepared] = {}
        self._view: WorkingView | None = None
        self._recompact = False  # set by ``_load`` for a session a client compacted
        self._sent: tuple[WorkingView, list[dict[str, Any]]] | None = None
        self._stages = Stages()
        self._relay: TextRelay | None = None
        self._on_block: OnBlock | None = None
        self._nonce = ""
        self._idle: Callable[[], AbstractContextManager[object]] = nullcontext
        self._load()

    def __repr__(self) -> str:
        return f"GatewayConversation({self.session_id!r}, links={len(self.chain)})"

    def close(self) -> None:
        self.ms.close()

    @property
    def index(self) -> Any:
        return self.state.index

    @property
    def view(self) -> WorkingView | None:
        return self._view

    # ------------------------------------------------------------------ rebuild
    # ------------------------------------------------------------------ kernel
    @property
    def kernel(self) -> AgentKernel | None:
        """The session's kernel with ``ms`` bound. From a manager it is asked for at every
        cell: an idle kernel the manager reaped comes back fresh rather than dead."""
        if self._kernels is not None:
            return self._kernels.get(self.session_id, host_functions=self.ms.functions())
        if self._kernel is not None and not self._kernel_bound:
            self._kernel.register(self.ms.functions())
            self._kernel_bound = True
        return self._kernel

    # ------------------------------------------------------------------ a request
    def handle(
        self,
        request: ClientRequest,
        upstream: Upstream,
        *,
        model: str,
        stages: Stages | None = None,
        on_text: OnText | None = None,
        idle: Callable[[], AbstractContextManager[object]] | None = None,
        answered: Callable[[ClientReply], None] | None = None,
        on_block: OnBlock | None = None,
    ) -> ClientReply:
        """Serve one request with ``upstream`` (asked for ``model``); see the module
        docstring. Upstream failures propagate as ``ModelError`` after the client's messages
        were logged. ``stages`` gets a lap per stage (``wait`` for the session, ``align``,
        ``prefix``, ``append``, ``compress``, ``messages``, ``trace`` (the chat span around the
        call), ``upstream`` (the call itself), ``log``, ``recall``, ``gate``: waiting to run
        again after a wait given to ``idle``, and with ``answered``, ``answered``: until the
        answer had left, so ``log`` after it is the reply's commit alone).

        With ``on_text`` (a client that streams) every upstream call streams, and the text
        the client may see goes to ``on_text`` as it arrives (see ``TextRelay``: headlines
        held back; the text a recall step wrote before its call reaches the client too, since
        it was sent before the call was known). Recall calls never do: tool calls are handed
        over in the reply, after the upstream is done. The reply's ``content`` is then all
        the text ``on_text`` got, and that is what the log records as the client's.
        ``on_block`` (with ``on_text``: a client that streams) gets every upstream
        call's thinking blocks as they come, before that call's text, as the text goes: a
        recall step's thinking reaches the client too. The log keeps each call's blocks with
        its own turn (sent back upstream with it); the reply's ``thinking`` is the last
        call's. It gets the client's own ``tool_use`` blocks as they come too (under the id
        the reply gives them, the text before them sent first: see ``_block_sink``); recall
        calls never.

        ``idle`` (a context manager factory) is entered around every wait that needs no
        interpreter: the session's turn, the upstream call and a recall cell's run in the
        kernel. A server that caps how many requests run Python at once gives its slot up
        there (see ``dashboard.gateway.service``).

        ``answered`` (a server that sends the answer before the reply is committed): called
        with the reply once it is final, before the reply's events are appended; it returns
        when the answer has left. The session stays locked until the commit is done, so the
        next request of the session sees the reply in the log; a commit that fails then is
        traced (an error span ``scroll.gateway.commit``), logged, and reported in the
        returned reply's ``commit_error``, never raised: the client already has its answer,
        and its next request carries the reply back, where alignment appends it. Without
        ``answered`` the reply is committed before ``handle`` returns and a failure raises."""
        stages = stages or Stages()
        idle = idle or nullcontext
        with idle():  # another request of this session may be using its turn at the cap
            self.lock.acquire()
            stages.lap("wait")
        try:
            stages.lap("gate")
            self._stages = stages
            self._relay = TextRelay(on_text) if on_text is not None else None
            self._on_block = on_block if on_text is not None else None
            self._idle = idle
            return self._handle_locked(request, upstream, model, answered)
        finally:
            self._relay = None
            self._on_block = None
            self._idle = nullcontext
            self.lock.release()

    def _handle_locked(
        self,
        request: ClientRequest,
        upstream: Upstream,
        model: str,
        answered: Callable[[ClientReply], None] | None,
    ) -> ClientReply:
        with (
            session_scope(self.session_id),
            span(
                REQUEST_SPAN,
                {
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": "scroll-gateway",
                    "gen_ai.agent.id": self.agent_id,
                    "gen_ai.request.model": request.model,
                    # The Responses API: the id the client gets (a retry's is its own).
                    "gen_ai.response.id": request.response_id or None,
                },
                session=self.session_id,
                kind="server",
                gateway=True,
                api=request.api,
                agent=self.agent_id,
                client_model=request.model,
                messages=len(request.messages),
                stream=request.stream,
                previous_response_id=request.previous_response_id or None,
            ) as traced,
        ):
            reply, commit = self._handle(request, upstream, model)
            self.requests += 1
            if answered is None:
                if commit is not None:
                    commit()
            else:
                try:
                    answered(reply)
                finally:
                    # The answer's way out (hop back, encode, send): not the commit's time.
                    self._stages.lap("answered")
                    if commit is not None:
                        failure = self._commit_after_answer(commit)
                        if failure:
                            reply = replace(reply, commit_error=failure)
                            traced.set(commit_error=failure)
            traced.set(**{k: v for k, v in reply.stats.to_dict().items() if k != "session_id"})
            traced.set(**{f"stage_{k}_ms": round(v, 3) for k, v in self._stages.snapshot().items()})
            traced.set_attributes(
                usage(
                    reply.usage.input_tokens,
                    reply.usage.output_tokens,
                    response_model=model,
                    cache_read_input_tokens=reply.usage.cache_read_input_tokens,
                    cache_creation_input_tokens=reply.usage.cache_creation_input_tokens,
                )
            )
            return reply

    def _commit_after_answer(self, commit: Callable[[], None]) -> str:
        """Run ``commit`` once the answer has left; a failure is traced and returned (the
        reply comes back with the client's next request and is appended then)."""
        try:
            commit()
        except Exception as exc:
            failure = f"{type(exc).__name__}: {exc}"[:1000]
            log.error("gateway: session %s: the reply's commit failed: %s", self.session_id,
                      failure)  # fmt: skip
            with span("scroll.gateway.commit", session=self.session_id) as traced:
                traced.error(f"the reply's commit failed after the answer left: {failure}",
                             type(exc).__name__)  # fmt: skip
            return failure
        return ""

    def _handle(
        self, request: ClientRequest, upstream: Upstream, model: str
    ) -> tuple[ClientReply, Callable[[], None] | None]:
        """The reply, and what is left to commit of it (None: nothing)."""
        self._refresh_profile()
        self._stages.lap("profile")
        aligned = self._align(request)
        request, found, stats, prepared = aligned
        if found.kind == "retry":
            return self._replayed(request, found.common, stats, prepared), None
        request = self._append_new(aligned)
        return self._recall_loop(request, upstream, model, prepared, _Loop(stats))

    def _align(self, request: ClientRequest) -> _Aligned:
        """Align ``request``'s history with the chain and prepare its prefix (nothing of
        the history appended yet)."""
        continuing = (
            request.continues is not None
            or request.resumes is not None
            or bool(request.conversation_id)
        )
        links: list[Link] = []
        read: dict[int, Any] = {}
        if continuing:
            # From a stored reply, a compaction, or a conversation's items: the chain as it
            # stands (or stood) there.
            if request.continues is not None:
                links, read = self._stored_chain(request.continues)
            elif request.resumes is not None:
                links, read = self._compacted_chain(request.resumes)
            else:
                links, read = list(self.chain), {}
            incoming = [link.fp for link in links]
            incoming += self._fingerprints(request.messages, len(links))
        else:
            incoming = self._fingerprints(request.messages)
        found = align(
            [link.fp for link in self.chain],
            incoming,
            [link.reply is not None for link in self.chain],
        )
        stats = GatewayStats(session_id=self.session_id, context_size=self.profile.context_size)
        self._stages.lap("align")
        prepared = self._prepare(request)
        self._stages.lap("prefix")
        if continuing and found.kind != "retry":
            request = self._continued(request, links, read, found.common)
        return _Aligned(request, found, stats, prepared, incoming)

    def _append_new(self, aligned: _Aligned) -> ClientRequest:
        """Log what ``aligned`` found new (a rewrite's marker first); the request as the
        rest of its handling takes it."""
        request, found, stats, prepared = aligned
        if found.kind == "rewrite":
            new = request.messages[max(0, found.common - request.prior) :]
            self._record_rewrite(found.common, len(aligned.incoming), new)
            stats.rewritten = True
        stats.appended = self._append_messages(
            request.messages, found.common, aligned.incoming, request.prior
        )
        stats.client_tokens = prepared.client_prefix_tokens + sum(
            link.tokens for link in self.chain[: len(aligned.incoming)]
        )
        self._stages.lap("append")
        return request

    # ------------------------------------------------------------------ a compaction
    def compact(
        self,
        request: ClientRequest,
        *,
        stages: Stages | None = None,
        idle: Callable[[], AbstractContextManager[object]] | None = None,
    ) -> tuple[CompactionPoint, ClientReply]:
        """Answer a client's remote compaction (see ``compaction``) with no model call: log
        what its history holds that is new, force an eviction of the view down to its
        protected tail, and log a marker (``gw: compaction``) naming the seqs the compaction
        stands for. The point of the chain it stands for, and the reply's record (no text,
        no usage; its compress steps)."""
        self._stages = stages or Stages()
        idle = idle or nullcontext
        with idle():
            self.lock.acquire()
            self._stages.lap("wait")
        try:
            with (
                session_scope(self.session_id),
                span(
                    "scroll.gateway.compaction",
                    session=self.session_id,
                    agent=self.agent_id,
                    api=request.api,
                    client_model=request.model,
                    messages=len(request.messages),
                    resumed=request.resumes is not None,
                ) as traced,
            ):
                self._refresh_profile()
                aligned = self._align(request)
                if aligned.found.kind == "retry":
                    position = aligned.found.common  # it stands for what the client holds
                else:
                    self._append_new(aligned)
                    position = len(aligned.incoming)
                loop = _Loop(aligned.stats)
                self._sync()
                first = self.chain[0].first_seq if position else self.state.synced_seq
                last = self.state.synced_seq
                self._compress(loop, aligned.prepared, "compaction", force=True)
                evicted = next((r.evicted for _, r in loop.compressions if r.evicted), None)
                marker = self._compaction_marker(position, first, last, evicted)
                point = CompactionPoint(self.session_id, position, marker)
                traced.set(at=position, seq=marker, seq_lo=first, seq_hi=last,
                           evicted=list(evicted) if evicted else None)  # fmt: skip
                self.requests += 1
                reply = ClientReply(
                    "", (), "stop", request.model, Usage(), loop.stats,
                    compressions=tuple(loop.compressions), position=position,
                )  # fmt: skip
                return point, reply
        finally:
            self._idle = nullcontext
            self.lock.release()

    def _compaction_marker(
        self, position: int, first: int, last: int, evicted: tuple[int, int] | None
    ) -> int:
        """Log the marker of a compaction standing for the chain's first ``position``
        messages (seqs ``first``-``last``); its seq. It stays in the view: the model learns
        that the history before is in the log, not lost."""
        note = (
            f"[scroll] The client compacted its context: its first {position} messages "
            f"(seqs {first}-{last}) now stand behind one compaction item. Nothing was "
            f"summarised or lost: they stay in the Event Log, ms.expand({first}, {last})."
        )
        meta: dict[str, Any] = {"gw": "compaction", "at": position, "replaced": [first, last]}
        if evicted:
            meta["evicted"] = list(evicted)
        seqs = self.log.append_many(
            [
                self._event(
                    f"compaction:{uuid.uuid4().hex[:12]}",
                    kind=KIND_CONTEXT_MSG,
                    role="system",
                    content=note,
                    metadata=meta,
                    searchable=False,
                )
            ]
        )
        self._sync()
        return seqs[0]

    def _compacted_chain(self, point: CompactionPoint) -> tuple[list[Link], dict[int, Event]]:
        """The chain's first ``point.position`` links as they stood when the compaction's
        marker was logged, and the events read to find them (by seq): the chain as it stands
        when nothing before the point was rewritten since, else replayed from the log."""
        at = point.position
        if at <= len(self.chain) and (at == 0 or self.chain[at - 1].first_seq < point.seq):
            return self.chain[:at], {}
        events = self.log.session_events(self.session_id, after_seq=0, limit=None)
        marker = next((e for e in events if e.seq == point.seq), None)
        links = replay_chain(events, point.seq) if marker is not None else []
        meta = marker.metadata if marker is not None else None
        if not isinstance(meta, dict) or meta.get("gw") != "compaction" or len(links) < at:
            raise GatewayRequestInvalid(
                "input",
                f"the compaction's point (seq {point.seq}) is not in the log of its session "
                f"{self.session_id!r}; send the history itself instead",
            )
        return links[:at], {e.seq: e for e in events}

    def _replayed(
        self, request: ClientRequest, at: int, stats: GatewayStats, prepared: Prepared
    ) -> ClientReply:
        link = self.chain[at]
        assert link.reply is not None
        content, calls, finish = link.reply
        stats.replayed = True
        stats.client_tokens = prepared.client_prefix_tokens + sum(x.tokens for x in self.chain[:at])
        with span("scroll.gateway.replay", session=self.session_id, seq=link.first_seq):
            # An Anthropic model's thinking blocks come back with the answer they led to.
            meta = self.log.get(link.first_seq).metadata
            return ClientReply(
                content, calls, finish, request.model, Usage(), stats,
                thinking=tuple(meta.get("thinking") or ()), logged_as=str(meta.get("rid", "")),
                position=at,
            )  # fmt: skip

    # ------------------------------------------------------------------ the loop
    def _refresh_profile(self) -> None:
        fresh = fresh_profile(self.profile, self.profile_source, session=self.session_id)
        if fresh is not self.profile:
            self.profile = fresh
            self._prefixes.clear()

    def _compress(
        self, loop: _Loop, prepared: Prepared, reason: str, *, force: bool = False
    ) -> WorkingView:
        """Algorithm 1 on the session's view, under the early prefix until the first eviction
        and the full one (recall tool, rubric) from then on."""
        full = bool(len(self.state.index))
        view: WorkingView | None = None
        for prefix in (prepared.prefix,) if full else (prepared.early, prepared.prefix):
            record = compress(
                self.state,
                self.profile,
                log=self.log,
                prefix=prefix,
                digest=self.digest,
                counter=self.counter,
                force=force,
                previous=self._view,  # its entries are reused: the check costs O(new events)
            )
            loop.compressions.append((reason, record))
            if record.evicted:
                loop.stats.evictions += 1
            assert record.view is not None
            self._view = view = record.view
            if not len(self.state.index):
                break  # nothing evicted yet: the early prefix stands
            force = False  # the first eviction happened: the view counted again with the rest
        self._stages.lap("compress")
        assert view is not None
        return view

    def _recall_loop(
        self,
        request: ClientRequest,
        upstream: Upstream,
        model: str,
        prepared: Prepared,
        loop: _Loop,
    ) -> tuple[ClientReply, Callable[[], None] | None]:
        nonce = self._nonce = uuid.uuid4().hex[:10]
        pos = request.prior + len(request.messages)
        view = self._compress(loop, prepared, "turn_start", force=self._recompact)
        self._recompact = False
        reply: ModelReply | None = None
        for step in range(1, self.max_steps + 1):
            reply, view = self._call(loop, upstream, model, request, prepared, view, step)
            recall = [c for c in reply.tool_calls if c.name == RECALL_TOOL]
            client_calls = self._unique(
                [c for c in reply.tool_calls if c.name != RECALL_TOOL], nonce, step
            )
            final = not recall or bool(client_calls) or step == self.max_steps
            parsed = parse_headline(reply.content)
            text = parsed.text
            if final and not text.strip() and not client_calls:
                text = BUDGET_NOTICE if recall else text
            finish = _client_finish(reply, client_calls)
            shown = text
            if self._relay is not None:
                self._relay.settle(text)
                shown = self._relay.shown
            headline = parsed.stored or extractive_headline(
                request.last_user_text(), text, [c.name for c in reply.tool_calls]
            )
            meta: dict[str, Any] = {
                "gw": "reply" if final else "step",
                "step": step,
                "model": reply.model or model,
                "finish_reason": reply.finish_reason,
                "headline_quality": parsed.quality,
                "input_tokens": reply.usage.input_tokens,
                "output_tokens": reply.usage.output_tokens,
                "view_tokens": view.tokens,
            }
            if reply.usage.cache_reported:  # else the console estimates them from the view
                meta["cache_read_input_tokens"] = reply.usage.cache_read_input_tokens or 0
                meta["cache_creation_input_tokens"] = reply.usage.cache_creation_input_tokens or 0
            if reply.thinking:  # sent back with this turn in every later view
                meta["thinking"] = list(reply.thinking)
            if parsed.quality != "ok":
                meta["headline_source"] = "extractive"
                if parsed.raw:
                    meta["headline_raw"] = parsed.raw
            if final:
                meta.update(
                    pos=pos,
                    client_finish=finish,
                    fp=ClientMessage("assistant", shown, tuple(client_calls)).fingerprint(),
                )
                if shown != text:  # streamed: earlier steps' text reached the client too
                    meta["shown"] = shown
                if request.store and request.response_id:  # a later request may continue it
                    meta["rid"] = request.response_id
            events = [
                self._event(
                    f"{nonce}:s{step}:assistant",
                    kind=KIND_MODEL_TURN,
                    role="assistant",
                    content=text,
                    headline=headline,
                    metadata=meta,
                )
            ]
            # Recall calls first, then the client's, all in one assistant message in the view.
            for j, call in enumerate(recall):
                events.append(
                    self._call_event(
                        f"{nonce}:s{step}:recall{j}",
                        call,
                        {"gw": "step", "step": step},
                        searchable=False,
                    )
                )
            for j, call in enumerate(client_calls):
                events.append(
                    self._call_event(
                        f"{nonce}:s{step}:call{j}", call, {"gw": "reply_call", "pos": pos}
                    )
                )
            loop.stats.recalls += len(recall)  # counted now: a final step's cells run after
            if final:
                reply_out = ClientReply(
                    content=shown,
                    tool_calls=tuple(client_calls),
                    finish_reason=finish,
                    model=request.model,
                    usage=loop.usage,
                    stats=loop.stats,
                    compressions=tuple(loop.compressions),
                    thinking=reply.thinking,
                    logged_as=str(meta.get("rid", "")),
                    position=pos,
                )
                link = Link(
                    meta["fp"],
                    "assistant",
                    0,
                    0,
                    (shown, tuple(client_calls), finish),
                    plain=shown == text and not client_calls,
                )
                commit = partial(self._commit_reply, events, recall, nonce, step, link, loop)
                return reply_out, commit
            self._append_step(events, recall, nonce, step, loop)
            view = self._compress(loop, prepared, "after_step")
        raise AssertionError("unreachable")  # pragma: no cover

    def _append_step(
        self,
        events: list[dict[str, Any]],
        recall: list[ToolCall],
        nonce: str,
        step: int,
        loop: _Loop,
    ) -> tuple[list[int], int]:
        """Append one step's turn and calls, then run its recall cells (their results are
        appended by each); the seqs, and the tokens of all but the recall calls."""
        seqs = self.log.append_many(events)
        fresh = {e.seq: e.tokens for e in self._sync()}
        recall_seqs = set(seqs[1 : len(recall) + 1])
        tokens = sum(fresh.get(s, 0) for s in seqs if s not in recall_seqs)
        self._stages.lap("log")
        for j, call in enumerate(recall):
            self._run_recall(call, f"{nonce}:s{step}:result{j}", step)
            self._stages.lap("recall")
        return seqs, tokens

    def _commit_reply(
        self,
        events: list[dict[str, Any]],
        recall: list[ToolCall],
        nonce: str,
        step: int,
        link: Link,
        loop: _Loop,
    ) -> None:
        """The final reply into the log and the chain (with the session still locked)."""
        seqs, tokens = self._append_step(events, recall, nonce, step, loop)
        link.first_seq, link.tokens = seqs[0], tokens
        self.chain.append(link)

    def _unique(self, calls: list[ToolCall], nonce: str, step: int) -> list[ToolCall]:
        return [unique_call(c, self.log, f"call_{nonce}_{step}_{i}") for i, c in enumerate(calls)]

    def _call(
        self,
        loop: _Loop,
        upstream: Upstream,
        model: str,
        request: ClientRequest,
        prepared: Prepared,
        view: WorkingView,
        step: int,
    ) -> tuple[ModelReply, WorkingView]:
        for attempt in (1, 2):
            # The last view's messages are kept: a view that only grew converts its new
            # entries alone (the upstreams build their bodies without changing them).
            messages = view.messages(reuse=self._sent)
            self._sent = (view, messages)
            self._stages.lap("messages")
            loop.stats.upstream_calls += 1
            loop.stats.upstream_tokens += view.tokens
            loop.stats.peak_view_tokens = max(loop.stats.peak_view_tokens, view.tokens)
            try:
                reply = traced_call(
                    model,
                    partial(self._complete, upstream, messages, view.prefix, model, request, step),
                    session=self.session_id,
                    source="gateway",
                    request=partial(_in_process_request, model, messages, view.prefix),
                    view=partial(wire.view_record, view.report, self.state.index),
                    messages=messages,
                    compacted=bool(self.state.index.blocks),
                    step=step,
                    attempt=attempt,
                    view_tokens=view.tokens,
                    gateway=True,
                    client_api=request.api,
                )
            except ContextOverflow:
                if self._relay is not None:
                    self._relay.settle("")  # drop what was held back of the refused call
                if attempt == 2:
                    raise
                view = self._compress(loop, prepared, "overflow", force=True)
                continue
            loop.usage += reply.usage
            self._stages.lap("trace")
            return reply, view
        raise AssertionError("unreachable")  # pragma: no cover

    def _complete(
        self,
        upstream: Upstream,
        messages: list[dict[str, Any]],
        prefix: Prefix,
        model: str,
        request: ClientRequest,
        step: int,
    ) -> ModelReply:
        tools = prefix.tool_list()
        self._stages.lap("trace")
        with self._idle():
            if self._relay is None:  # a plain upstream need not know about streaming
                reply = upstream.complete(messages, tools, model=model, params=request.params)
            elif self._on_block is not None:
                reply = upstream.complete(
                    messages, tools, model=model, params=request.params,
                    on_text=self._relay.feed, on_block=self._block_sink(self._on_block, step),
                )  # fmt: skip
            else:
                reply = upstream.complete(
                    messages, tools, model=model, params=request.params, on_text=self._relay.feed
                )
            self._stages.lap("upstream")
        self._stages.lap("gate")  # waiting to run again after the upstream answered
        return reply

    def _block_sink(self, on_block: OnBlock, step: int) -> OnBlock:
        """``on_block`` for one upstream call: thinking blocks pass as they come; a
        ``tool_use`` block of the client's passes too, under the id the reply will give it
        (``_unique``), after the text the call wrote before it (``TextRelay.settle_early``:
        a call to the client's tools makes this reply the final one, and its text is complete
        when the block opens); a ``recall_history_python`` block never does."""
        seen = {"client": 0, "passing": True}

        def sink(kind: str, part: dict[str, Any] | None) -> None:
            if kind == "start" and part is not None and part.get("type") == "tool_use":
                seen["passing"] = part.get("name") != RECALL_TOOL
                if not seen["passing"]:
                    return
                fresh = f"call_{self._nonce}_{step}_{seen['client']}"
                seen["client"] += 1
                call = ToolCall(str(part.get("id") or ""), str(part.get("name") or ""))
                part = {**part, "id": unique_call(call, self.log, fresh).id}
                if self._relay is not None:
                    self._relay.settle_early()
            elif kind == "start":
                seen["passing"] = True
            if seen["passing"]:
                on_block(kind, part)

        return sink

    def _run_recall(self, call: ToolCall, key: str, step: int) -> None:
        with self._idle():
            outcome = self._cell(call)
            self._stages.lap("recall")
        self._stages.lap("gate")
        self.digest = outcome.digest
        self.log.append_many(
            [
                self._event(
                    key,
                    kind=KIND_TOOL_RESULT,
                    role="tool",
                    name=call.name,
                    tool_call_id=call.id,
                    content=outcome.output,
                    metadata={"gw": "step", "step": step, **outcome.metadata},
                    searchable=False,
                )
            ]
        )
        self._sync()

    def _cell(self, call: ToolCall) -> CellOutcome:
        return run_cell(
            call,
            kernel=lambda: self.kernel,
            ms=self.ms,
            profile=self.profile,
            counter=self.counter,
            digest=self.digest,
            tools=(RECALL_TOOL,),
        )


def _in_process_request(
    model: str, messages: list[dict[str, Any]], prefix: Prefix
) -> dict[str, Any]:
    """What the record keeps as sent to an upstream that wrote no bytes (one in process)."""
    return {"model": model, "messages": messages, "tools": prefix.tool_list()}


def _client_finish(reply: ModelReply, client_calls: list[ToolCall]) -> str:
    if client_calls:
        return "tool_calls"
    if reply.finish_reason in ("length", "content_filter"):
        return reply.finish_reason
    return "stop"
