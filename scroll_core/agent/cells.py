"""One code cell run for a tool call: refusal rules, kernel execution, the result's metadata.

Shared by the agent loop (``Session``) and the gateway's recall loop, so a recall cell is run,
bounded and recorded the same way whoever asked for it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import KernelError
from ..kernel.ms import MsCapability
from ..kernel.results import ExecResult, NamespaceDigest
from ..models.base import ToolCall
from ..profile import Profile
from ..prompts import RECALL_TOOL, REPL_TOOL, TOOL_NAMES
from ..tokens import TokenCounter
from ..view import digest_tokens
from .records import MsCallRecord

__all__ = ["EMPTY_OUTPUT", "AgentKernel", "CellOutcome", "refusal", "run_cell"]

EMPTY_OUTPUT = "[the cell printed nothing]"
# Bounds on the ms calls a tool result's metadata lists (replay reads them as retrievals).
LOGGED_MS_CALLS = 50
LOGGED_MS_SEQS = 50
# A call's arguments are logged when small (the trajectory lint re-runs a search from them).
LOGGED_MS_ARGS_CHARS = 600
# A namespace digest longer than this is logged by its size only.
DIGEST_TEXT_CHARS = 16_000


class AgentKernel(Protocol):
    """What a cell needs of a kernel (``kernel.Kernel`` is one)."""

    def execute(
        self,
        code: str,
        timeout: float | None = None,
        *,
        tool: str = ...,
        tool_call_id: str | None = None,
        print_cap: int | None = None,
    ) -> ExecResult: ...

    def register(self, functions: Mapping[str, Callable[..., Any]]) -> None: ...


@dataclass
class CellOutcome:
    """What one cell produced: the text the model is shown, its status and the metadata a
    ``tool_result`` event stores (status, limits, ms calls, digest tokens)."""

    output: str
    status: str
    metadata: dict[str, Any]
    exec_result: ExecResult | None
    digest: NamespaceDigest | None
    ms_calls: list[MsCallRecord] = field(default_factory=list)


def refusal(call: ToolCall, tools: Collection[str] = TOOL_NAMES) -> str | None:
    """Why a call cannot run, as the error the model is shown; None when it can."""
    first = REPL_TOOL if REPL_TOOL in tools else RECALL_TOOL
    names = " or ".join(t for t in (REPL_TOOL, RECALL_TOOL) if t in tools) or first
    usage = f'Call {names} with arguments {{"code": "<python source>"}}.'
    if call.name not in tools:
        return f"error: unknown tool {call.name!r}; the tools are {', '.join(tools)}. {usage}"
    if call.arguments_error is not None:
        why = call.arguments_error
        return f"error: the arguments of {call.name} were not valid ({why}). {usage}"
    code = call.arguments.get("code")
    if not isinstance(code, str):
        got = "missing" if code is None else f"a {type(code).__name__}"
        return f"error: {call.name} needs a string argument 'code' ({got}). {usage}"
    extra = sorted(set(call.arguments) - {"code"})
    if extra:
        return f"error: {call.name} takes only 'code', not {', '.join(map(repr, extra))}. {usage}"
    return None


def run_cell(
    call: ToolCall,
    *,
    kernel: Callable[[], AgentKernel | None],
    ms: MsCapability,
    profile: Profile,
    counter: TokenCounter,
    digest: NamespaceDigest | None,
    tools: Collection[str] = TOOL_NAMES,
) -> CellOutcome:
    """Run ``call``'s cell in the kernel ``kernel()`` returns (asked only when the call is
    valid); a refused call, a missing kernel or a kernel failure becomes an error result,
    never an exception. ``digest`` is the namespace digest before the cell."""
    refused = refusal(call, tools)
    why = refused
    ms_calls: list[MsCallRecord] = []
    exec_result: ExecResult | None = None
    if why is None:
        attached = kernel()
        if attached is None:
            why = "error: no kernel is attached to this session, so cells cannot run"
        else:
            mark = len(ms.calls)
            try:
                exec_result = attached.execute(
                    str(call.arguments["code"]),
                    timeout=profile.exec_timeout_s,
                    tool=call.name,
                    tool_call_id=call.id,
                    # Read per cell, so a tuned profile reaches a running kernel.
                    print_cap=profile.print_cap,
                )
            except KernelError as exc:
                why = f"error: the kernel could not run the cell: {exc}"
            ms_calls = [_ms_record(c) for c in ms.calls[mark:]]
            del ms.calls[mark:]  # recorded here; the list would grow forever
    if exec_result is not None:
        output = exec_result.observation() or EMPTY_OUTPUT
        status: str = exec_result.status
        # After a restart the digest is the fresh kernel's: the lost variables are gone.
        digest = exec_result.digest
    else:
        output = why or "error"
        status = "refused" if refused is not None else "kernel_error"
    metadata: dict[str, Any] = {"status": status}
    if exec_result is not None:
        metadata.update(
            duration_ms=round(exec_result.duration_ms, 3),
            truncated=exec_result.truncated,
            hidden_chars=exec_result.hidden_chars,
            variables_lost=exec_result.variables_lost,
            limit=exec_result.limit,
            tier=exec_result.tier,
            error_type=exec_result.error.type if exec_result.error else None,
        )
    seqs_touched = sorted({s for c in ms_calls for s in c.seqs})
    if seqs_touched:
        metadata["seqs_touched"] = seqs_touched[:200]
    # For replay from the log alone: the digest the next compress puts in the view (after
    # this cell) and each ms call with the seqs it touched (bounded).
    metadata["digest_tokens"] = digest_tokens(digest, counter)
    # Its text too, so the context window inspector shows the exact view (kept only when
    # small: a digest is a few lines per variable).
    digest_text = digest.render() if digest is not None else ""
    if len(digest_text) <= DIGEST_TEXT_CHARS:
        metadata["digest_text"] = digest_text
    metadata["ms_calls"] = [_logged_ms(c) for c in ms_calls[:LOGGED_MS_CALLS]]
    if len(ms_calls) > LOGGED_MS_CALLS:
        metadata["ms_calls_total"] = len(ms_calls)
    return CellOutcome(output, status, metadata, exec_result, digest, ms_calls)


def _ms_record(call: Any) -> MsCallRecord:
    return MsCallRecord(
        name=call.name,
        args=_jsonable(call.args),
        kwargs=_jsonable(call.kwargs),
        seqs=list(call.seqs),
        duration_ms=call.duration_ms,
        result_chars=call.result_chars,
        error=call.error,
    )


def _logged_ms(call: MsCallRecord) -> dict[str, Any]:
    logged: dict[str, Any] = {"name": call.name, "seqs": call.seqs[:LOGGED_MS_SEQS]}
    if len(call.seqs) > LOGGED_MS_SEQS:
        logged["seqs_total"] = len(call.seqs)
    if call.error:
        logged["error"] = True
    arguments = {"args": call.args, "kwargs": call.kwargs}
    if len(json.dumps(arguments, default=str)) <= LOGGED_MS_ARGS_CHARS:
        logged.update(arguments)
    return logged


def _jsonable(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError):
        return str(value)
