"""Host side of the wire: bounded line reads with deadlines, and values made plain for JSON.

Everything the kernel sends is untrusted: lines are size-limited, must decode to an object
with a known ``op``, and anything else is a ``KernelProtocolError``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import select
import time
from collections.abc import Mapping
from typing import Any

from ..errors import KernelProtocolError
from .child.wire import MAX_CHILD_LINE, encode

__all__ = ["CHILD_OPS", "LineReader", "decode_message", "encode", "to_wire"]

CHILD_OPS = frozenset({"ready", "call", "result", "pong", "bound"})
MAX_DEPTH = 50


class LineReader:
    """Reads newline-terminated messages from a pipe fd, waiting at most until a deadline."""

    def __init__(self, fd: int, max_line: int = MAX_CHILD_LINE) -> None:
        self._fd = fd
        self._max = max_line
        self._buf = bytearray()
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)

    def readline(self, deadline: float | None) -> bytes | None:
        """The next line; ``None`` at the deadline; ``EOFError`` when the pipe closed."""
        while True:
            end = self._buf.find(b"\n")
            if end >= 0:
                line = bytes(self._buf[:end])
                del self._buf[: end + 1]
                return line
            if len(self._buf) > self._max:
                raise KernelProtocolError(f"kernel sent a line over {self._max} bytes")
            wait_ms = -1
            if deadline is not None:
                wait_ms = max(0, int((deadline - time.monotonic()) * 1000) + 1)
            if not self._poll.poll(wait_ms):
                if deadline is not None and time.monotonic() >= deadline:
                    return None
                continue
            chunk = os.read(self._fd, 1 << 16)
            if not chunk:
                raise EOFError("kernel closed its pipe")
            self._buf += chunk


def decode_message(line: bytes) -> dict[str, Any]:
    try:
        message = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise KernelProtocolError(f"kernel sent invalid JSON: {exc}") from None
    if not isinstance(message, dict) or message.get("op") not in CHILD_OPS:
        raise KernelProtocolError("kernel sent a message without a known op")
    return message


def to_wire(value: Any, depth: int = 0) -> Any:
    """A JSON-able form of a host value: dataclasses become tagged records."""
    if depth > MAX_DEPTH:
        raise ValueError("value nests too deeply to send to the kernel")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_wire(v, depth + 1) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_wire(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {
            f.name: to_wire(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)
        }
        return {"__scroll__": "record", "type": type(value).__name__, "fields": fields}
    raise TypeError(f"{type(value).__name__} cannot be sent to the kernel")
