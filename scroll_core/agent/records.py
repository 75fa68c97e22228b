"""What one turn of the agent loop did, step by step, as plain data for telemetry.

Each model call, each tool cell (with the ``ms`` calls it made and the seqs they touched) and
each ``compress`` is recorded. These are plain dataclasses with ``to_dict()``; the telemetry
module turns them into spans, the console into charts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..eviction import CompressRecord

__all__ = [
    "CompressReason",
    "CompressStep",
    "ModelCallRecord",
    "MsCallRecord",
    "StepRecord",
    "StopReason",
    "ToolExecRecord",
    "TurnResult",
]

# answer: the model replied without tool calls. step_budget: max_steps model calls were made
# and the last one still asked for tools. context_overflow: the provider refused the prompt
# again after the forced compress. context_unfit: compress could not get the view under the
# hard limit. model_error: the provider failed (after its own retries).
StopReason = Literal["answer", "step_budget", "context_overflow", "context_unfit", "model_error"]
CompressReason = Literal["turn_start", "after_step", "overflow"]


def _ms(value: float) -> float:
    return round(value, 3)


@dataclass(frozen=True)
class CompressStep:
    """One ``compress`` run and why it ran."""

    reason: CompressReason
    record: CompressRecord

    def to_dict(self) -> dict[str, Any]:
        return {"reason": self.reason, **self.record.to_dict()}


@dataclass(frozen=True)
class ModelCallRecord:
    """One model call: tokens, time, and the view it was given, section by section."""

    model: str
    attempt: int
    duration_ms: float
    input_tokens: int = 0
    output_tokens: int = 0
    view_tokens: int = 0
    view: dict[str, Any] = field(default_factory=dict)
    # Parts of input_tokens the provider's prompt cache read and wrote (None: not reported).
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    messages: int = 0
    finish_reason: str | None = None
    tool_calls: int = 0
    provider_attempts: int = 0
    headline_quality: str | None = None
    error: str | None = None
    error_kind: str | None = None
    replayed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "attempt": self.attempt,
            "duration_ms": _ms(self.duration_ms),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "view_tokens": self.view_tokens,
            "view": dict(self.view),
            "messages": self.messages,
            "finish_reason": self.finish_reason,
            "tool_calls": self.tool_calls,
            "provider_attempts": self.provider_attempts,
            "headline_quality": self.headline_quality,
            "error": self.error,
            "error_kind": self.error_kind,
            "replayed": self.replayed,
        }


@dataclass(frozen=True)
class MsCallRecord:
    """One ``ms.*`` call a cell made, and the seqs it touched."""

    name: str
    args: list[Any]
    kwargs: dict[str, Any]
    seqs: list[int]
    duration_ms: float
    result_chars: int
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "seqs": list(self.seqs),
            "duration_ms": _ms(self.duration_ms),
            "result_chars": self.result_chars,
            "error": self.error,
        }


@dataclass(frozen=True)
class ToolExecRecord:
    """One tool call the model made and what running it did.

    ``status`` is the kernel's (ok, error, timeout, killed, denied), or ``refused`` when the
    call never reached the kernel (unknown tool, malformed arguments), or ``kernel_error``
    when the kernel could not be started or driven.
    """

    tool_call_id: str
    name: str
    status: str
    duration_ms: float
    result_seq: int | None = None
    call_seq: int | None = None
    output_chars: int = 0
    truncated: bool = False
    variables_lost: bool = False
    limit: str | None = None
    error: str | None = None
    searchable: bool = True
    ms_calls: list[MsCallRecord] = field(default_factory=list)
    replayed: bool = False

    @property
    def seqs_touched(self) -> list[int]:
        return sorted({s for call in self.ms_calls for s in call.seqs})

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool_call_id": self.tool_call_id,
            "name": self.name,
            "status": self.status,
            "duration_ms": _ms(self.duration_ms),
            "result_seq": self.result_seq,
            "call_seq": self.call_seq,
            "output_chars": self.output_chars,
            "truncated": self.truncated,
            "variables_lost": self.variables_lost,
            "limit": self.limit,
            "error": self.error,
            "searchable": self.searchable,
            "ms_calls": [c.to_dict() for c in self.ms_calls],
            "seqs_touched": self.seqs_touched,
            "replayed": self.replayed,
        }


@dataclass
class StepRecord:
    """One step of a turn: the compress runs that shaped the view, the model call(s) (a second
    one after a context overflow), and the tool cells the reply asked for."""

    turn: int
    step: int
    compressions: list[CompressStep] = field(default_factory=list)
    model_calls: list[ModelCallRecord] = field(default_factory=list)
    tools: list[ToolExecRecord] = field(default_factory=list)
    assistant_seq: int | None = None
    headline: str | None = None
    headline_quality: str | None = None

    @property
    def model_call(self) -> ModelCallRecord | None:
        """The call whose reply the step used (the last one)."""
        return self.model_calls[-1] if self.model_calls else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "step": self.step,
            "compressions": [c.to_dict() for c in self.compressions],
            "model_calls": [m.to_dict() for m in self.model_calls],
            "tools": [t.to_dict() for t in self.tools],
            "assistant_seq": self.assistant_seq,
            "headline": self.headline,
            "headline_quality": self.headline_quality,
        }


@dataclass
class TurnResult:
    """What ``Session.ask`` returns: the answer (headline stripped), why the turn stopped, and
    every step."""

    session_id: str
    turn: int
    stop_reason: StopReason
    answer: str | None
    user_seq: int
    steps: list[StepRecord] = field(default_factory=list)
    headline: str | None = None
    answer_seq: int | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.stop_reason == "answer"

    @property
    def model_calls(self) -> int:
        return sum(len(s.model_calls) for s in self.steps)

    @property
    def tool_calls(self) -> list[ToolExecRecord]:
        return [t for s in self.steps for t in s.tools]

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "turn": self.turn,
            "stop_reason": self.stop_reason,
            "answer": self.answer,
            "headline": self.headline,
            "user_seq": self.user_seq,
            "answer_seq": self.answer_seq,
            "error": self.error,
            "steps": [s.to_dict() for s in self.steps],
        }
