"""The agent loop: a session that drives a model over the working view and the kernel."""

from __future__ import annotations

from .records import (
    CompressStep,
    ModelCallRecord,
    MsCallRecord,
    StepRecord,
    StopReason,
    ToolExecRecord,
    TurnResult,
)
from .session import DEFAULT_MAX_STEPS, AgentKernel, Session

__all__ = [
    "DEFAULT_MAX_STEPS",
    "AgentKernel",
    "CompressStep",
    "ModelCallRecord",
    "MsCallRecord",
    "Session",
    "StepRecord",
    "StopReason",
    "ToolExecRecord",
    "TurnResult",
]
