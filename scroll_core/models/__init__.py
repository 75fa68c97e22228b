"""Models: the protocol, an OpenAI-compatible client and the deterministic policy baseline."""

from __future__ import annotations

from .base import ChatModel, ModelReply, ToolCall, Usage
from .openai_compat import OpenAICompatibleModel

__all__ = ["ChatModel", "ModelReply", "OpenAICompatibleModel", "ToolCall", "Usage"]
