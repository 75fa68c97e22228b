"""Remote compaction as Codex asks for it, answered from the Event Log: the ``compaction``
item's ``encrypted_content`` is a handle to a point of the session's chain, not a summary.

Codex (its provider configured as OpenAI) compacts by sending its history to
``POST /v1/responses`` with a ``compaction_trigger`` item last (remote compaction v2), or to
``POST /v1/responses/compact`` (v1), and expects exactly one ``compaction`` output item,
which it then sends in later requests in place of the history it stands for. The history is
already in the log, so the gateway makes no model call: it appends what is new, forces an
eviction of the session's view down to its protected tail, logs a marker naming the seqs the
compaction stands for, and hands back a handle to that point. A later request carrying the
item continues from there, from the session's own view (prefix, index, digest, tail), and
everything before stays recallable.

The handle is ``scroll-compaction-1.<payload>.<mac>``: the payload (base64url JSON) names the
session, the chain position and the marker's seq; the mac is an HMAC-SHA256 over the key's
agent and the payload with the server's secret. A changed byte, or a handle made for another
agent, fails the check and is refused in the same words, so a handle tells nothing across
tenants.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import time
from collections.abc import Sequence
from typing import Any, Protocol

from ..errors import GatewayRequestInvalid
from ._types import ClientMessage, ClientRequest, CompactionPoint

__all__ = [
    "HANDLE_PREFIX",
    "client_summary",
    "compaction_item",
    "compaction_object",
    "derive_secret",
    "open_handle",
    "seal",
]

HANDLE_PREFIX = "scroll-compaction-1."
_REFUSED = (
    "the compaction item's encrypted_content is not a compaction this gateway made for this "
    "key's agent (it was changed, or made by another server or for another agent); send the "
    "history itself instead"
)


def derive_secret(server_secret: str) -> bytes:
    """The handles' HMAC key, derived from the server's secret (Django's ``SECRET_KEY``), so
    every web process sharing it checks the others' handles."""
    return hashlib.sha256(b"scroll gateway compaction\0" + server_secret.encode()).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(secret: bytes, agent_id: str, payload: str) -> str:
    signed = f"{agent_id}\0{payload}".encode()
    return _b64(hmac.new(secret, signed, hashlib.sha256).digest())


def seal(secret: bytes, agent_id: str, point: CompactionPoint) -> str:
    """The handle for ``point``, valid for ``agent_id`` only."""
    body = {"s": point.session_id, "p": point.position, "q": point.seq, "t": int(time.time())}
    payload = _b64(json.dumps(body, separators=(",", ":"), sort_keys=True).encode())
    return f"{HANDLE_PREFIX}{payload}.{_mac(secret, agent_id, payload)}"


def open_handle(secret: bytes, agent_id: str, handle: str, param: str) -> CompactionPoint:
    """The point ``handle`` stands for; ``GatewayRequestInvalid`` naming ``param`` when it is
    not one this server sealed for ``agent_id``."""
    if not handle.startswith(HANDLE_PREFIX):
        raise GatewayRequestInvalid(param, _REFUSED)
    payload, _, mac = handle[len(HANDLE_PREFIX) :].partition(".")
    if not hmac.compare_digest(mac.encode(), _mac(secret, agent_id, payload).encode()):
        raise GatewayRequestInvalid(param, _REFUSED)
    try:
        body = json.loads(_unb64(payload))
        point = CompactionPoint(str(body["s"]), int(body["p"]), int(body["q"]))
    except (ValueError, KeyError, TypeError, binascii.Error):  # sealed here: never in practice
        raise GatewayRequestInvalid(param, _REFUSED) from None
    if point.position < 0 or point.seq < 1:
        raise GatewayRequestInvalid(param, _REFUSED)
    return point


def compaction_item(item_id: str, handle: str) -> dict[str, Any]:
    return {"type": "compaction", "id": item_id, "encrypted_content": handle}


def compaction_object(request: ClientRequest, handle: str, item_id: str) -> dict[str, Any]:
    """The answer to ``POST /v1/responses/compact`` (v1): one ``compaction`` output item."""
    return {
        "id": request.response_id,
        "object": "response.compaction",
        "created_at": request.created_at or int(time.time()),
        "output": [compaction_item(item_id, handle)],
        "usage": _NO_USAGE,
    }


# A compaction costs no model call.
_NO_USAGE: dict[str, Any] = {
    "input_tokens": 0,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 0,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 0,
}


class _Link(Protocol):
    first_seq: int

    @property
    def reply(self) -> tuple[str, Any, str] | None: ...


# A summary's scaffolding, left out when looking for it in the client's next history: Claude
# Code's compaction reply is ``<analysis>...</analysis>`` then ``<summary>...</summary>``, and
# it resends the summary's inside.
_ANALYSIS = re.compile(r"<analysis>.*?</analysis>", re.DOTALL)
_SUMMARY_TAGS = re.compile(r"</?summary>")
SUMMARY_MIN_CHARS = 20


def client_summary(dropped: Sequence[_Link], new: Sequence[ClientMessage]) -> int | None:
    """A client's own compaction (Claude Code's ``/compact`` and auto-compact, Codex's local
    one): the first seq of the reply, among the ``dropped`` links of a rewrite, whose text
    the client's ``new`` messages carry (the summary it asked the model for), or None when
    the rewrite is not one."""
    carried = [m.content for m in new if m.role in ("user", "system") and m.content]
    if not carried:
        return None
    for link in reversed(dropped):
        if link.reply is None:
            continue
        inner = _SUMMARY_TAGS.sub("", _ANALYSIS.sub("", link.reply[0])).strip()
        if len(inner) >= SUMMARY_MIN_CHARS and any(inner in text for text in carried):
            return link.first_seq
    return None
