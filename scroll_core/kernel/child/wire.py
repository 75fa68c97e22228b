"""JSON lines between host and kernel: one object per line, UTF-8, ``op`` names the message.

Host to child: ``init``, ``exec``, ``reply`` (to a host-function call), ``interrupt``,
``bind`` (new host functions), ``ping``, ``shutdown``.
Child to host: ``ready``, ``call`` (a host function), ``result``, ``pong``, ``bound``.
JSON strings never contain a raw newline, so a line is always exactly one message.
"""

from __future__ import annotations

import json
import os
from typing import Any

# A child line longer than this is a protocol violation (a result is capped far below it).
MAX_CHILD_LINE = 4 * 1024 * 1024

_encoder = json.JSONEncoder(separators=(",", ":"), default=repr)


def encode(message: dict[str, Any]) -> bytes:
    """One message as a JSON line; unknown objects degrade to their repr."""
    return _encoder.encode(message).encode("utf-8", "surrogatepass") + b"\n"


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        sent = os.write(fd, view)
        view = view[sent:]
