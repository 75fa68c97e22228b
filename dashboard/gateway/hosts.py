"""Django's host check for the gateway's routes, which ``GatewayRouter`` answers before
Django sees them: the same rule (``validate_host`` against ``ALLOWED_HOSTS``, as Django reads
it with ``DEBUG``) and a 400 in the provider's error shape for a host it would refuse."""

from __future__ import annotations

import json
from collections.abc import Sequence

from django.http.request import split_domain_port, validate_host

from dashboard.gateway.asgi import Request, Response
from scroll_core.gateway import anthropic_api, openai_api

__all__ = ["HostCheck"]

_REMEMBERED = 256


class HostCheck:
    """``allows(host)`` as Django's ``HttpRequest.get_host()`` decides it; ``refusal`` the
    answer to a host it does not allow. Verdicts are remembered per Host header value."""

    def __init__(self, allowed_hosts: Sequence[str], *, debug: bool = False) -> None:
        allowed = list(allowed_hosts)
        if debug and not allowed:
            allowed = [".localhost", "127.0.0.1", "[::1]"]  # as Django does
        self.allowed = allowed
        self._seen: dict[str, bool] = {}

    def allows(self, host: str) -> bool:
        verdict = self._seen.get(host)
        if verdict is None:
            domain, _port = split_domain_port(host)
            verdict = bool(domain) and validate_host(domain, self.allowed)
            if len(self._seen) < _REMEMBERED:  # a client sending random hosts fills no memory
                self._seen[host] = verdict
        return verdict

    def refusal(self, request: Request, host: str) -> Response:
        message = f"invalid Host header {host!r}: it is not in ALLOWED_HOSTS"
        if request.path.startswith("/v1/messages"):
            body = anthropic_api.error_body(message, status=400)
        else:
            body = openai_api.error_body(message, kind="invalid_request_error", param="Host",
                                         code="disallowed_host")  # fmt: skip
        return Response(400, json.dumps(body).encode())
