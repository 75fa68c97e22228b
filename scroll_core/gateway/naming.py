"""Session naming for gateway requests.

The rule (documented in the README):

* with an ``X-Scroll-Session: NAME`` header, the session is ``gw:<agent>:NAME``;
* without one, it is ``gw:<agent>:<h>`` where ``h`` is the first 16 hex digits of
  sha256(agent, NUL, system prompt, NUL, first user message) - so every request of one
  conversation lands in the same session, and two conversations that open the same way share
  one (set the header to tell them apart, and whenever the client may rewrite its first
  message, e.g. by compacting its history).

The agent is always part of the id, so a key can only ever name its own agent's sessions.
"""

from __future__ import annotations

import hashlib
import re

from ..errors import GatewayRequestInvalid

__all__ = ["MAX_SESSION_NAME", "check_session_header", "session_id_for"]

MAX_SESSION_NAME = 120
_NAME = re.compile(r"^[A-Za-z0-9._:@/+=-]+$")


def session_id_for(agent_id: str, *, header: str | None, system: str, first_user: str) -> str:
    """The Event Log session id of a request (see the module docstring)."""
    if header is not None and header.strip():
        name = header.strip()
        if len(name) > MAX_SESSION_NAME or not _NAME.match(name):
            raise GatewayRequestInvalid(
                "X-Scroll-Session",
                f"must be 1-{MAX_SESSION_NAME} characters of letters, digits and ._:@/+=-",
            )
        return f"gw:{agent_id}:{name}"
    digest = hashlib.sha256(
        "\0".join((agent_id, system, first_user)).encode("utf-8", "surrogatepass")
    ).hexdigest()
    return f"gw:{agent_id}:{digest[:16]}"


def check_session_header(agent_id: str, header: str | None, session_id: str, via: str) -> None:
    """Refuse an ``X-Scroll-Session`` header naming another session than ``session_id``, the
    one the request's ``via`` (a stored response, a conversation) already decides."""
    if header is None or not header.strip():
        return
    named = session_id_for(agent_id, header=header, system="", first_user="")
    if named != session_id:
        raise GatewayRequestInvalid(
            "X-Scroll-Session",
            f"names session {named!r}, but {via} is in session {session_id!r}; leave the "
            "header out or name that session",
        )
