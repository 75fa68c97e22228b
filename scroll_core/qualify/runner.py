"""Run the suite through Scroll's own loop: per item a fresh kernel, the item's data put in
it and its history in the Event Log, one ``Session.ask`` of the item's question, a probe cell
that reads the kernel's state, then the item's judge. The protocol items that hold across
the whole run (the call shape, headlines, the window) are judged last, over every call."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..agent import Session, TurnResult
from ..errors import ModelError, ScrollError
from ..gateway import ClientMessage, ClientRequest, GatewayConversation
from ..kernel import Kernel, KernelConfig
from ..lint import lint_session
from ..models.base import ChatModel, ModelReply
from ..profile import Profile
from ..store import KIND_CONTEXT_MSG, KIND_MODEL_TURN, EventLog
from ..telemetry import span
from .items import ITEMS, Case, Cell, Item, Outcome
from .scorecard import ItemResult, Scorecard

__all__ = ["SUITE_SEED", "SUITE_VERSION", "run_suite"]

# Bumped whenever an item, its data, its judge or a pass mark changes: scorecards of one
# version are comparable, across versions only side by side.
SUITE_VERSION = "1"
SUITE_SEED = 33
HEADLINE_SHARE = 0.8  # of the run's replies that must end with a well-formed headline
PROBE_CAP = 200_000


@dataclass
class _Calls:
    """What the run-wide protocol items read: every call's headline quality and view, every
    tool call's status, every turn's stop reason."""

    headlines: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    tool_calls: int = 0
    answered: int = 0  # model calls that came back with a reply
    over_window: list[str] = field(default_factory=list)
    unfit: list[str] = field(default_factory=list)

    def add(self, item: str, case: Case, result: TurnResult) -> None:
        for step in result.steps:
            for call in step.model_calls:
                if call.error is None:
                    self.answered += 1
                    self.headlines.append(call.headline_quality or "missing")
                if call.view_tokens > case.context_size:
                    self.over_window.append(item)
        for tool in result.tool_calls:
            self.tool_calls += 1
            if tool.status == "refused":
                self.refused.append(f"{item}: {tool.name!r}: {tool.error}")
        if result.stop_reason in ("context_unfit", "context_overflow"):
            self.unfit.append(item)


def run_suite(
    model: ChatModel,
    workdir: str | Path,
    *,
    kernel_config: KernelConfig | None = None,
    seed: int = SUITE_SEED,
    items: Iterable[Item] = ITEMS,
    api: str = "",
    upstream: str = "",
    on_item: Callable[[ItemResult], None] | None = None,
) -> Scorecard:
    """Run every item against ``model``; the Event Log lives in ``workdir`` (a qualification
    never writes to a real session's log). Kernels use ``kernel_config``, by default the
    environment's (``SCROLL_SANDBOX``, ``SCROLL_SANDBOX_FALLBACK``)."""
    card = Scorecard(SUITE_VERSION, seed, model.name, api=api, upstream=upstream)
    calls = _Calls()
    began = time.perf_counter()
    # The operator's sandbox settings, as for runs: never a silent fall to the weaker tier.
    config = kernel_config or KernelConfig.from_env()
    with EventLog(Path(workdir) / "qualify.sqlite3") as log:
        for item in items:
            with span("scroll.qualify.item", item=item.id, model=model.name):
                result = _run_item(item, model, log, config, seed, calls)
            card.items.append(result)
            if on_item is not None:
                on_item(result)
    for result in _run_wide(calls):
        card.items.append(result)
        if on_item is not None:
            on_item(result)
    card.seconds = time.perf_counter() - began
    return card


def _run_item(
    item: Item, model: ChatModel, log: EventLog, config: KernelConfig, seed: int, calls: _Calls
) -> ItemResult:
    case = item.build(random.Random(f"{SUITE_VERSION}:{seed}:{item.id}"))
    if item.loop == "gateway":
        return _run_gateway_item(item, case, model, log, config, calls)
    session_id, agent = f"qualify-{item.id}", f"qualify-{item.id}"
    _plant(log, case, session_id, agent)
    began = time.perf_counter()
    with Kernel(config) as kernel:
        if case.kernel_setup:
            setup = kernel.execute(case.kernel_setup, print_cap=PROBE_CAP)
            if not setup.ok:
                raise ScrollError(f"{item.id}: the item's kernel set-up failed: {setup.error}")
        profile = Profile(context_size=case.context_size, print_cap=case.print_cap)
        with Session(
            log, model, session_id=session_id, agent_id=agent, profile=profile, kernel=kernel
        ) as session:
            result = session.ask(case.prompt)
        seconds = time.perf_counter() - began
        probe = ""
        if case.probe:
            probed = kernel.execute(case.probe, print_cap=PROBE_CAP)
            probe = probed.stdout if probed.ok else ""
    calls.add(item.id, case, result)
    if result.stop_reason == "model_error" and calls.answered == 0:
        # Nothing has answered yet: the endpoint is down or refuses us, which says nothing
        # about the model. No scorecard rather than one that fails it.
        raise ScrollError(f"the model could not be reached: {result.error}")
    cells = [
        Cell(
            tool.name,
            log.get(tool.call_seq).content if tool.call_seq is not None else "",
            tool.status,
            tool.output_chars,
            tool.truncated,
        )
        for tool in result.tool_calls
    ]
    lint = sorted({flag.rule for flag in lint_session(log, session_id)})
    outcome = Outcome(result.answer or "", result.stop_reason, probe, cells, lint)
    passed, detail = case.judge(outcome)
    if result.error and not passed:
        detail = f"{detail} ({result.error[:200]})"
    model_calls = [c for s in result.steps for c in s.model_calls]
    return ItemResult(
        item.id,
        item.category,
        item.title,
        passed,
        detail,
        cells=len(cells),
        input_tokens=sum(c.input_tokens for c in model_calls),
        output_tokens=sum(c.output_tokens for c in model_calls),
        seconds=round(seconds, 3),
        lint=tuple(lint),
    )


class _ModelUpstream:
    """A model served in process (the rule-based baseline) as the gateway's upstream."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model

    def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, model: str,
        params: Mapping[str, Any], on_text: Any = None, on_block: Any = None,
    ) -> ModelReply:  # fmt: skip
        return self.model.complete(messages, tools)


def _run_gateway_item(
    item: Item, case: Case, model: ChatModel, log: EventLog, config: KernelConfig, calls: _Calls
) -> ItemResult:
    """The item's history and question sent by a client in one request, as an agent behind
    the gateway sends its whole history; the gateway evicts it and recalls in its kernel."""
    session_id = agent = f"qualify-{item.id}"
    history = tuple(ClientMessage(e.role, e.text) for e in case.history if not e.session)
    request = ClientRequest(
        api="openai",
        model=model.name,
        system="You are a helpful assistant.",
        messages=(*history, ClientMessage("user", case.prompt)),
    )
    upstream = getattr(model, "upstream", None) or _ModelUpstream(model)
    profile = Profile(context_size=case.context_size, print_cap=case.print_cap)
    began = time.perf_counter()
    with Kernel(config) as kernel:
        conversation = GatewayConversation(
            log, session_id=session_id, agent_id=agent, profile=profile, kernel=kernel
        )
        try:
            reply = conversation.handle(request, upstream, model=model.name)
        except ModelError as exc:
            if calls.answered == 0:
                raise ScrollError(f"the model could not be reached: {exc}") from None
            return ItemResult(item.id, item.category, item.title, False, f"model error: {exc}")
        finally:
            conversation.close()
    seconds = time.perf_counter() - began
    stats = reply.stats
    calls.answered += stats.upstream_calls
    calls.tool_calls += stats.recalls + len(reply.tool_calls)
    for call in reply.tool_calls:  # the client offered no tools: a call of its own invention
        calls.refused.append(f"{item.id}: {call.name!r}: not a tool the request offered")
    if stats.peak_view_tokens > case.context_size:
        calls.over_window.append(item.id)
    stop = "answer" if not reply.tool_calls else "client_tool_call"
    passed, detail = case.judge(Outcome(reply.content, stop, ""))
    return ItemResult(
        item.id, item.category, item.title, passed, detail,
        cells=stats.recalls, input_tokens=reply.usage.input_tokens,
        output_tokens=reply.usage.output_tokens, seconds=round(seconds, 3),
    )  # fmt: skip


def _plant(log: EventLog, case: Case, session_id: str, agent: str) -> None:
    events = []
    for i, event in enumerate(case.history):
        events.append(
            {
                "session_id": session_id + event.session,
                "agent_id": agent,
                "kind": KIND_CONTEXT_MSG if event.role == "user" else KIND_MODEL_TURN,
                "role": event.role,
                "content": event.text,
                "headline": event.headline,
                "created_at": event.at,
                "dedup_key": f"history:{i}",
            }
        )
    if events:
        log.append_many(events)


def _run_wide(calls: _Calls) -> list[ItemResult]:
    replies = len(calls.headlines)
    ok = sum(1 for q in calls.headlines if q == "ok")
    share = ok / replies if replies else 0.0
    shape = (
        (False, "no tool call in the whole run: the call shape was never shown")
        if calls.tool_calls == 0
        else (False, f"{len(calls.refused)} refused call(s): " + "; ".join(calls.refused[:3]))
        if calls.refused
        else (True, f"{calls.tool_calls} tool calls, all well-formed")
    )
    window = (
        (False, "the view passed the window in " + ", ".join(sorted(set(calls.over_window))))
        if calls.over_window
        else (False, "the window could not hold the turn in " + ", ".join(calls.unfit))
        if calls.unfit
        else (True, "every call's view within its window")
    )
    return [
        ItemResult("protocol.call_shape", "protocol", "tool calls follow the rubric's shape",
                   *shape),
        ItemResult(
            "protocol.headlines", "protocol", "replies end with a headline",
            replies > 0 and share >= HEADLINE_SHARE,
            f"{ok} of {replies} replies with a well-formed headline ({share:.0%}; "
            f"{HEADLINE_SHARE:.0%} needed)",
        ),
        ItemResult("protocol.window", "protocol", "stays under the window", *window),
    ]  # fmt: skip
