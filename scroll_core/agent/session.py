"""The agent loop: one ``Session`` ties an Event Log, a kernel, a profile and a model.

``ask(text)`` runs one turn:

1. append the user message (``context_msg``); search leaves out the active turn from here;
2. ``compress`` (it syncs the new events into the view and runs Algorithm 1), which yields
   the working view: fixed prefix, eviction index, namespace digest, protected tail;
3. call the model with the two tools, ``repl_exec(code)`` and ``recall_history_python(code)``;
   a provider's context-overflow refusal forces a compress and exactly one retry;
4. append the reply as a ``model_turn`` (its headline parsed off and stored on the event, a
   missing or malformed one recorded in ``metadata``) and one ``model_turn`` per tool call;
5. run each call in the session's kernel and append its output as a ``tool_result``; recall
   cells and their results are appended with ``searchable=False`` so ``ms.search`` never
   matches the agent's own queries; an unknown tool or malformed arguments get an error
   result, never an exception; a timeout or a killed kernel is reported as the kernel says;
6. compress, and repeat from 3 until a reply without tool calls (the answer) or ``max_steps``
   model calls.

Every appended event carries a dedup key built from the session's run id, the turn, the step
and the role, so a session resumed from a checkpoint appends nothing twice: steps already in
the log are replayed from it (no second model call, no second cell) and the turn continues.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from .. import wire
from ..errors import (
    ContextOverflow,
    ContextWindowUnfit,
    ModelError,
    ScrollError,
)
from ..eviction import compress
from ..headlines import parse_headline
from ..kernel.manager import KernelManager
from ..kernel.ms import MsCapability
from ..kernel.results import NamespaceDigest
from ..models.base import ChatModel, ModelReply, ToolCall, Usage
from ..profile import Profile
from ..prompts import RECALL_TOOL, system_prompt, tool_definitions
from ..store import KIND_CONTEXT_MSG, KIND_MODEL_TURN, KIND_TOOL_RESULT, Event, EventStore
from ..telemetry import span
from ..tokens import TokenCounter
from ..view import ContextState, Prefix, WorkingView
from .cells import AgentKernel, run_cell
from .records import (
    CompressReason,
    CompressStep,
    ModelCallRecord,
    StepRecord,
    StopReason,
    ToolExecRecord,
    TurnResult,
)
from .steps import fresh_profile, traced_call, unique_call

__all__ = ["CHECKPOINT_VERSION", "DEFAULT_MAX_STEPS", "AgentKernel", "Session"]

CHECKPOINT_VERSION = 1
DEFAULT_MAX_STEPS = 8


class Session:
    """One agent's live session; see the module docstring.

    The kernel is, in order of preference, the one given, one from ``kernels`` (a
    ``KernelManager``, keyed by session id), or none: a cell then gets an error result saying
    no kernel is attached. ``profile`` defaults to the model's context size with every other
    knob at its default. ``on_step`` is called after every step (a runner checkpoints there).
    """

    def __init__(
        self,
        log: EventStore,
        model: ChatModel,
        *,
        session_id: str,
        agent_id: str = "main",
        profile: Profile | None = None,
        kernel: AgentKernel | None = None,
        kernels: KernelManager | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        counter: TokenCounter | None = None,
        system: str | None = None,
        on_step: Callable[[StepRecord], None] | None = None,
        state: ContextState | None = None,
        run_id: str | None = None,
        profile_source: Callable[[], Profile] | None = None,
        readable_agents: Iterable[str] | Callable[[str], Iterable[str]] = (),
    ) -> None:
        if not session_id:
            raise ScrollError("a session needs a session_id")
        if max_steps < 1:
            raise ScrollError(f"max_steps must be at least 1, got {max_steps!r}")
        self.log = log
        self.model = model
        self.session_id = session_id
        self.agent_id = agent_id
        self.profile = profile or Profile(context_size=model.context_size)
        self.max_steps = max_steps
        self.counter = counter or log.tokens
        self.on_step = on_step
        # Asked before every compress, so an operator's change to the profile applies to a
        # live session at its next compress; a failing source keeps the current profile.
        self.profile_source = profile_source
        self.prefix = Prefix.build(
            system if system is not None else system_prompt(print_cap=self.profile.print_cap),
            tool_definitions(),
            counter=self.counter,
        )
        self.state = state or ContextState.new(session_id, tier_cap=self.profile.tier_cap)
        if self.state.session_id != session_id:
            raise ScrollError(
                f"context state is of session {self.state.session_id!r}, not {session_id!r}"
            )
        # A fresh run id per new Session keeps its dedup keys apart from any earlier run on
        # the same session id; a resumed Session keeps its run id, so its keys repeat.
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.turn = 0
        self.turn_open = False
        # The agent is the tenant: ms reads only its own events, plus agents an operator
        # granted it (asked at every call when a callable, so a revoke applies at once).
        self.ms = MsCapability(
            log, agent_id=agent_id, session_id=session_id, readable_agents=readable_agents
        )
        # Lets each expand span name the evicted block it read (retrievals per block).
        self.ms.block_resolver = lambda seq: self.state.index.block_for(seq)
        self.digest: NamespaceDigest | None = None
        self.history: list[TurnResult] = []
        self._kernel = kernel
        self._kernels = kernels
        self._kernel_bound = False
        self._view: WorkingView | None = None
        self._replay: dict[str, Event] | None = None
        self._replay_call_ids: set[str] = set()

    def __repr__(self) -> str:
        return (
            f"Session({self.session_id!r}, agent={self.agent_id!r}, model={self.model.name!r}, "
            f"turn={self.turn})"
        )

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Release the read-only ``ms`` connection (the kernel belongs to its owner)."""
        self.ms.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def kernel(self) -> AgentKernel | None:
        """The session's kernel with ``ms`` bound, acquired on first use."""
        if self._kernel is None and self._kernels is not None:
            self._kernel = self._kernels.get(self.session_id, host_functions=self.ms.functions())
            self._kernel_bound = True
        if self._kernel is not None and not self._kernel_bound:
            self._kernel.register(self.ms.functions())
            self._kernel_bound = True
        return self._kernel

    @property
    def view(self) -> WorkingView | None:
        """The working view the last compress left (what the next model call will see)."""
        return self._view

    # ------------------------------------------------------------------ the turn
    def ask(self, user_text: str) -> TurnResult:
        """Run one turn for ``user_text``; see the module docstring."""
        with span("scroll.turn", session=self.session_id, agent=self.agent_id) as traced:
            result = self._ask(user_text)
            traced.set(
                turn=result.turn,
                stop_reason=result.stop_reason,
                steps=len(result.steps),
                headline=result.headline,
            )
            return result

    def _ask(self, user_text: str) -> TurnResult:
        if not isinstance(user_text, str) or not user_text.strip():
            raise ScrollError("the user message must be a non-empty string")
        turn = self.turn if self.turn_open else self.turn + 1
        user_seq = self._append(
            f"t{turn}:user", kind=KIND_CONTEXT_MSG, role="user", content=user_text
        )
        stored = self.log.get(user_seq)
        if stored.content != user_text[: self.log.payload_threshold]:
            raise ScrollError(
                f"turn {turn} of session {self.session_id!r} was started with another message "
                f"(seq {user_seq}: {stored.content[:200]!r}); ask that again to finish it"
            )
        self.turn, self.turn_open = turn, True
        self.ms.begin_turn(user_seq)
        result = TurnResult(self.session_id, turn, "answer", None, user_seq)

        pending: list[CompressStep] = []
        stop: tuple[StopReason, str | None] | None = None
        try:
            pending.append(self._compress("turn_start"))
        except ContextWindowUnfit as exc:
            stop = ("context_unfit", str(exc))

        step = 0
        while stop is None:
            step += 1
            record = StepRecord(turn=turn, step=step, compressions=pending)
            pending = []
            result.steps.append(record)
            reply, stop = self._model_step(record)
            if reply is None:
                break
            calls = self._record_reply(record, reply)
            if not calls:
                result.answer = _answer_text(self.log, record)
                result.headline = record.headline
                result.answer_seq = record.assistant_seq
            else:
                for call, call_seq in calls:
                    record.tools.append(self._run_tool(record, call, call_seq))
            try:
                record.compressions.append(self._compress("after_step"))
            except ContextWindowUnfit as exc:
                stop = ("context_unfit", str(exc))
            if self.on_step is not None:
                self.on_step(record)
            if stop is None and not calls:
                stop = ("answer", None)
            elif stop is None and step >= self.max_steps:
                stop = (
                    "step_budget",
                    f"stopped after {step} model calls (max_steps) without a final answer",
                )

        assert stop is not None
        result.stop_reason, result.error = stop
        if not result.steps and pending:
            result.steps.append(StepRecord(turn=turn, step=0, compressions=pending))
        self.turn_open = False
        self.ms.begin_turn(None)
        self.history.append(result)
        return result

    # ------------------------------------------------------------------ steps
    def _model_step(
        self, record: StepRecord
    ) -> tuple[ModelReply | None, tuple[StopReason, str | None] | None]:
        """Call the model (or replay the step from the log); on overflow force a compress and
        retry exactly once."""
        replayed = self._replayed_reply(record)
        if replayed is not None:
            record.model_calls.append(
                ModelCallRecord(
                    model=self.model.name, attempt=1, duration_ms=0.0, replayed=True,
                    tool_calls=len(replayed.tool_calls), finish_reason=replayed.finish_reason,
                )
            )  # fmt: skip
            return replayed, None
        for attempt in (1, 2):
            view = self._current_view()
            messages = view.messages()
            began = time.perf_counter()
            try:
                reply = self._complete(record, view, messages, attempt)
            except ContextOverflow as exc:
                record.model_calls.append(self._call_record(view, messages, began, attempt, exc))
                if attempt == 2:
                    return None, ("context_overflow", str(exc))
                try:
                    record.compressions.append(self._compress("overflow", force=True))
                except ContextWindowUnfit as unfit:
                    return None, ("context_unfit", str(unfit))
                continue
            except ModelError as exc:
                record.model_calls.append(self._call_record(view, messages, began, attempt, exc))
                return None, ("model_error", str(exc))
            record.model_calls.append(self._call_record(view, messages, began, attempt, reply))
            return reply, None
        raise AssertionError("unreachable")  # pragma: no cover

    def _complete(
        self, record: StepRecord, view: WorkingView, messages: list[dict[str, Any]], attempt: int
    ) -> ModelReply:
        """One model call as a ``chat {model}`` span (see ``steps.traced_call``)."""
        tools = self.prefix.tool_list()
        return traced_call(
            self.model.name,
            lambda: self.model.complete(messages, tools),
            session=self.session_id,
            request=lambda: {"model": self.model.name, "messages": messages, "tools": tools},
            view=partial(wire.view_record, view.report, self.state.index),
            messages=messages,
            compacted=bool(self.state.index.blocks),
            turn=record.turn,
            step=record.step,
            attempt=attempt,
            view_tokens=view.tokens,
        )

    def _call_record(
        self,
        view: WorkingView,
        messages: list[dict[str, Any]],
        began: float,
        attempt: int,
        outcome: ModelReply | ModelError,
    ) -> ModelCallRecord:
        base: dict[str, Any] = {
            "model": self.model.name,
            "attempt": attempt,
            "duration_ms": (time.perf_counter() - began) * 1000,
            "view_tokens": view.tokens,
            "view": view.report.to_dict(),
            "messages": len(messages),
        }
        if isinstance(outcome, ModelError):
            kind = "context_overflow" if isinstance(outcome, ContextOverflow) else "model_error"
            return ModelCallRecord(**base, error=str(outcome), error_kind=kind)
        base["model"] = outcome.model or self.model.name
        return ModelCallRecord(
            **base,
            input_tokens=outcome.usage.input_tokens,
            output_tokens=outcome.usage.output_tokens,
            cache_read_input_tokens=outcome.usage.cache_read_input_tokens,
            cache_creation_input_tokens=outcome.usage.cache_creation_input_tokens,
            finish_reason=outcome.finish_reason,
            tool_calls=len(outcome.tool_calls),
            provider_attempts=outcome.attempts,
            headline_quality=parse_headline(outcome.content).quality,
        )

    def _record_reply(self, record: StepRecord, reply: ModelReply) -> list[tuple[ToolCall, int]]:
        """Append the reply (headline stripped and stored) and one event per tool call."""
        key = f"t{record.turn}:s{record.step}"
        parsed = parse_headline(reply.content)
        metadata: dict[str, Any] = {
            "turn": record.turn,
            "step": record.step,
            "model": reply.model or self.model.name,
            "finish_reason": reply.finish_reason,
            "headline_quality": parsed.quality,
            "usage": {
                "input_tokens": reply.usage.input_tokens,
                "output_tokens": reply.usage.output_tokens,
            },
        }
        if reply.usage.cache_reported:  # else the console estimates them from the view
            metadata["usage"].update(
                cache_read_input_tokens=reply.usage.cache_read_input_tokens or 0,
                cache_creation_input_tokens=reply.usage.cache_creation_input_tokens or 0,
            )
        if parsed.quality == "malformed" and parsed.raw:
            metadata["headline_raw"] = parsed.raw
        # What replay needs to rebuild this call's view from the log alone: the compresses a
        # provider's overflow refusal forced before it, and the size of the view it was given.
        metadata["forced_compresses"] = sum(
            1 for c in record.compressions if c.reason == "overflow"
        )
        if record.model_call is not None:
            metadata["view_tokens"] = record.model_call.view_tokens
        events: list[dict[str, Any]] = [
            self._event(
                f"{key}:assistant",
                kind=KIND_MODEL_TURN,
                role="assistant",
                content=parsed.text,
                headline=parsed.stored,
                metadata=metadata,
            )
        ]
        calls = [self._unique_call(call, record, i) for i, call in enumerate(reply.tool_calls)]
        for i, call in enumerate(calls):
            code = call.arguments.get("code")
            call_meta: dict[str, Any] = {"turn": record.turn, "step": record.step}
            if call.arguments_error is not None:
                call_meta["arguments_error"] = call.arguments_error
                call_meta["raw_arguments"] = (call.raw_arguments or "")[:4000]
            events.append(
                self._event(
                    f"{key}:call{i}",
                    kind=KIND_MODEL_TURN,
                    role="assistant",
                    name=call.name,
                    tool_call_id=call.id,
                    tool_input=call.arguments,
                    content=code if isinstance(code, str) else (call.raw_arguments or ""),
                    metadata=call_meta,
                    searchable=call.name != RECALL_TOOL,
                )
            )
        seqs = self.log.append_many(events)
        record.assistant_seq = seqs[0]
        record.headline = parsed.stored
        record.headline_quality = parsed.quality
        return list(zip(calls, seqs[1:], strict=True))

    def _unique_call(self, call: ToolCall, record: StepRecord, index: int) -> ToolCall:
        """Keep the provider's call id unless the log already holds it (some local servers
        number calls from zero every time), so a result always pairs with its own call."""
        if call.id in self._replay_call_ids:
            return call
        return unique_call(
            call, self.log, f"call_{self.run_id}_{record.turn}_{record.step}_{index}"
        )

    def _run_tool(self, record: StepRecord, call: ToolCall, call_seq: int) -> ToolExecRecord:
        index = len(record.tools)
        key = f"t{record.turn}:s{record.step}:result{index}"
        searchable = call.name != RECALL_TOOL
        done = self._replayed(key)
        if done is not None:
            return ToolExecRecord(
                tool_call_id=call.id,
                name=call.name,
                status=str(done.metadata.get("status", "ok")),
                duration_ms=0.0,
                result_seq=done.seq,
                call_seq=call_seq,
                output_chars=len(done.content),
                searchable=searchable,
                replayed=True,
            )
        began = time.perf_counter()
        outcome = run_cell(
            call,
            kernel=lambda: self.kernel,
            ms=self.ms,
            profile=self.profile,
            counter=self.counter,
            digest=self.digest,
        )
        self.digest = outcome.digest
        exec_result, output, status, ms_calls = (
            outcome.exec_result, outcome.output, outcome.status, outcome.ms_calls
        )  # fmt: skip
        metadata: dict[str, Any] = {"turn": record.turn, "step": record.step, **outcome.metadata}
        result_seq = self._append(
            key,
            kind=KIND_TOOL_RESULT,
            role="tool",
            name=call.name,
            tool_call_id=call.id,
            content=output,
            metadata=metadata,
            searchable=searchable,
        )
        return ToolExecRecord(
            tool_call_id=call.id,
            name=call.name,
            status=status,
            duration_ms=(time.perf_counter() - began) * 1000,
            result_seq=result_seq,
            call_seq=call_seq,
            output_chars=len(output),
            truncated=bool(exec_result and exec_result.truncated),
            variables_lost=bool(exec_result and exec_result.variables_lost),
            limit=exec_result.limit if exec_result else None,
            error=(
                f"{exec_result.error.type}: {exec_result.error.message}"
                if exec_result and exec_result.error
                else (exec_result.notice if exec_result else output)
            ),
            searchable=searchable,
            ms_calls=ms_calls,
        )

    def _refresh_profile(self) -> None:
        self.profile = fresh_profile(self.profile, self.profile_source, session=self.session_id)

    def _compress(self, reason: CompressReason, *, force: bool = False) -> CompressStep:
        self._refresh_profile()
        record = compress(
            self.state,
            self.profile,
            log=self.log,
            prefix=self.prefix,
            digest=self.digest,
            counter=self.counter,
            force=force,
        )
        self._view = record.view
        return CompressStep(reason, record)

    def _current_view(self) -> WorkingView:
        if self._view is None:
            self._compress("turn_start")
        assert self._view is not None
        return self._view

    # ------------------------------------------------------------------ appends
    def _event(self, key: str, **fields: Any) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "agent_id": self.agent_id,
            "dedup_key": f"{self.run_id}:{key}",
            **fields,
        }

    def _append(self, key: str, **fields: Any) -> int:
        return self.log.append_many([self._event(key, **fields)])[0]

    # ------------------------------------------------------------------ checkpoint
    def checkpoint(self) -> dict[str, Any]:
        """Session state as JSON-able data: run id, turn, context state (live seqs, folded
        seqs, the index) and the profile. Small: it grows with the view, not the history."""
        return {
            "version": CHECKPOINT_VERSION,
            "session_id": self.session_id,
            "agent_id": self.agent_id,
            "run_id": self.run_id,
            "turn": self.turn,
            "turn_open": self.turn_open,
            "max_steps": self.max_steps,
            "profile": self.profile.to_dict(),
            "context": self.state.to_checkpoint(),
        }

    @classmethod
    def resume(
        cls,
        data: Mapping[str, Any],
        log: EventStore,
        model: ChatModel,
        *,
        kernel: AgentKernel | None = None,
        kernels: KernelManager | None = None,
        profile: Profile | None = None,
        **options: Any,
    ) -> Session:
        """A session continued from ``checkpoint()`` data.

        Asking the interrupted turn's question again finishes that turn: steps the log already
        holds are replayed from it, so nothing is appended or run twice. A new kernel starts
        with no variables. ``profile`` overrides the saved one (a console edit applies here).
        """
        if not isinstance(data, Mapping) or data.get("version") != CHECKPOINT_VERSION:
            version = data.get("version") if isinstance(data, Mapping) else None
            raise ScrollError(f"unsupported session checkpoint version {version!r}")
        try:
            state = ContextState.from_checkpoint(data["context"])
            session = cls(
                log,
                model,
                session_id=str(data["session_id"]),
                agent_id=str(data["agent_id"]),
                profile=profile or Profile.from_mapping(data["profile"]),
                kernel=kernel,
                kernels=kernels,
                max_steps=int(options.pop("max_steps", data["max_steps"])),
                state=state,
                run_id=str(data["run_id"]),
                **options,
            )
            session.turn = int(data["turn"])
            session.turn_open = bool(data["turn_open"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ScrollError(f"session checkpoint is malformed: {exc!r}") from None
        session._load_replay()
        return session

    def _load_replay(self) -> None:
        """Index what this run appended after the checkpoint, to replay instead of redo."""
        prefix = f"{self.run_id}:"
        events = self.log.session_events(
            self.session_id, after_seq=self.state.synced_seq, limit=None
        )
        self._replay = {
            e.dedup_key.removeprefix(prefix): e
            for e in events
            if e.dedup_key and e.dedup_key.startswith(prefix)
        }
        self._replay_call_ids = {e.tool_call_id for e in self._replay.values() if e.tool_call_id}

    def _replayed(self, key: str) -> Event | None:
        return self._replay.get(key) if self._replay else None

    def _replayed_reply(self, record: StepRecord) -> ModelReply | None:
        key = f"t{record.turn}:s{record.step}"
        assistant = self._replayed(f"{key}:assistant")
        if assistant is None:
            return None
        calls = []
        i = 0
        while (event := self._replayed(f"{key}:call{i}")) is not None:
            arguments = event.tool_input if isinstance(event.tool_input, dict) else {}
            error = event.metadata.get("arguments_error")
            raw = event.metadata.get("raw_arguments")
            calls.append(
                ToolCall(
                    event.tool_call_id or f"call_{self.run_id}_{key}_{i}",
                    event.name or "",
                    arguments,
                    raw if isinstance(raw, str) else None,
                    error if isinstance(error, str) else None,
                )
            )
            i += 1
        content = assistant.content
        if assistant.headline:
            content = f"{content}\n{assistant.headline}" if content else assistant.headline
        elif isinstance(assistant.metadata.get("headline_raw"), str):
            content = f"{content}\n{assistant.metadata['headline_raw']}"
        return ModelReply(
            content=content,
            tool_calls=tuple(calls),
            usage=Usage(),
            finish_reason=str(assistant.metadata.get("finish_reason") or "stop"),
            model=str(assistant.metadata.get("model") or self.model.name),
        )


def _answer_text(log: EventStore, record: StepRecord) -> str | None:
    """The final answer's text (headline stripped), as stored."""
    if record.assistant_seq is None:
        return None
    return log.get(record.assistant_seq).content
