"""A model at an upstream URL as a ``ChatModel``, in either wire format: the gateway's own
HTTP upstreams (Chat Completions at ``{url}/chat/completions``, Anthropic Messages at
``{url}/v1/messages``), so a qualification speaks to a model exactly as the gateway does."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ..gateway.anthropic_upstream import http_upstream
from ..gateway.upstream import HttpUpstream
from ..models.base import ModelReply

__all__ = ["APIS", "UpstreamModel", "upstream_model"]

APIS = ("openai", "anthropic")


class UpstreamModel:
    """``complete`` sends the view to ``upstream`` as model ``name``."""

    def __init__(self, name: str, upstream: HttpUpstream, *, context_size: int = 128_000):
        if not name or not name.strip():
            raise ConfigError("a model name is required")
        self.name = name
        self.upstream = upstream
        self.context_size = context_size

    def __repr__(self) -> str:
        return f"UpstreamModel({self.name!r}, {self.upstream!r})"

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        return self.upstream.complete(messages, tools, model=self.name, params={})

    def close(self) -> None:
        self.upstream.close()


def upstream_model(
    url: str, name: str, *, api: str = "openai", api_key: str | None = None
) -> UpstreamModel:
    """The model ``name`` at ``url`` (``http(s)://host[:port]/v1``) speaking ``api``."""
    if api not in APIS:
        raise ConfigError(f"unknown api {api!r}: expected one of {', '.join(APIS)}")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"the upstream must be an http(s) URL, got {url!r}")
    return UpstreamModel(name, http_upstream(api, url, api_key=api_key))
