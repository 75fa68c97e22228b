"""The gateway's framework-free core: an OpenAI- and Anthropic-compatible front for any agent.

Format translation (``openai_api``, ``responses_api`` and ``responses_stream``,
``anthropic_api``), remote compaction's handles (``compaction``), session naming
(``naming``), history alignment (``align``), the extractive headline
(``headline_fallback``), the upstream protocol and its HTTP clients (``upstream`` for
OpenAI-compatible upstreams, ``anthropic_upstream`` for Anthropic Messages ones, its
requests built by ``anthropic_request``), and the recall loop over one session's log,
view and kernel (``conversation``). The Django/ASGI glue is ``dashboard.gateway``.
"""

from __future__ import annotations

from . import anthropic_api, compaction, openai_api, responses_api
from ._timing import Stages
from ._types import ClientMessage, ClientReply, ClientRequest, GatewayStats, StoredPlace
from .align import Alignment, align
from .anthropic_api import parse_messages_request
from .anthropic_upstream import UPSTREAM_FORMATS, AnthropicUpstream, http_upstream
from .conversation import DEFAULT_RECALL_STEPS, GatewayConversation
from .headline_fallback import extractive_headline
from .naming import session_id_for
from .openai_api import parse_chat_request
from .upstream import HttpUpstream, Upstream

__all__ = [
    "DEFAULT_RECALL_STEPS",
    "UPSTREAM_FORMATS",
    "Alignment",
    "AnthropicUpstream",
    "ClientMessage",
    "ClientReply",
    "ClientRequest",
    "GatewayConversation",
    "GatewayStats",
    "HttpUpstream",
    "Stages",
    "StoredPlace",
    "Upstream",
    "align",
    "anthropic_api",
    "compaction",
    "extractive_headline",
    "http_upstream",
    "openai_api",
    "parse_chat_request",
    "parse_messages_request",
    "responses_api",
    "session_id_for",
]
