"""Models: the protocol, an OpenAI-compatible client and the deterministic policy baseline."""

from __future__ import annotations

from .base import ChatModel, ModelReply, ToolCall, Usage
from .openai_compat import OpenAICompatibleModel
from .policy import POLICY_NAME, PolicyModel

__all__ = [
    "POLICY_NAME",
    "ChatModel",
    "ModelReply",
    "OpenAICompatibleModel",
    "PolicyModel",
    "ToolCall",
    "Usage",
]
