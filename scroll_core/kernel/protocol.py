"""Host side of the wire: bounded line reads and writes with deadlines, values made plain.

Everything the kernel sends is untrusted: lines are size-limited and read in bounded chunks
(the host never buffers more than one maximal line), their nesting and value count are
checked on the raw bytes before parsing, and they must decode to an object with a known
``op`` and well-typed ids. Anything else is a ``KernelProtocolError``. Before any of that,
a line must carry the worker's seal (``child/wire.py``): ``Seal.open`` drops a line the
worker did not seal, such as one a cell wrote straight to the protocol descriptor. Writes
to the kernel are non-blocking and give up at a deadline with ``KernelUnresponsive``, so a
kernel that stops reading cannot hold a host thread.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import fcntl
import hmac
import json
import os
import secrets
import select
import time
from collections.abc import Mapping
from typing import Any

from ..errors import KernelProtocolError, KernelUnresponsive
from .child.wire import MAX_CHILD_LINE, encode, shape_problem

__all__ = [
    "CHILD_OPS",
    "LineReader",
    "LineWriter",
    "Seal",
    "decode_message",
    "encode",
    "to_wire",
]

CHILD_OPS = frozenset({"ready", "call", "result", "pong", "bound"})
MAX_DEPTH = 50
CHUNK = 1 << 16


class LineReader:
    """Reads newline-terminated messages from a pipe fd, waiting at most until a deadline.

    At most ``max_line`` bytes are ever buffered: a longer line is a protocol error raised
    as soon as the limit is passed, not after the whole line arrived."""

    def __init__(self, fd: int, max_line: int = MAX_CHILD_LINE) -> None:
        self._fd = fd
        self._max = max_line
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf already known to hold no newline
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)

    def readline(self, deadline: float | None) -> bytes | None:
        """The next line; ``None`` at the deadline; ``EOFError`` when the pipe closed."""
        while True:
            end = self._buf.find(b"\n", self._scanned)
            if end >= 0:
                if end > self._max:
                    raise KernelProtocolError(f"kernel sent a line over {self._max:,} bytes")
                line = bytes(self._buf[:end])
                del self._buf[: end + 1]
                self._scanned = 0
                return line
            self._scanned = len(self._buf)
            if len(self._buf) > self._max:
                raise KernelProtocolError(f"kernel sent a line over {self._max:,} bytes")
            wait_ms = -1
            if deadline is not None:
                wait_ms = max(0, int((deadline - time.monotonic()) * 1000) + 1)
            if not self._poll.poll(wait_ms):
                if deadline is not None and time.monotonic() >= deadline:
                    return None
                continue
            chunk = os.read(self._fd, min(CHUNK, self._max + 1 - len(self._buf)))
            if not chunk:
                raise EOFError("kernel closed its pipe")
            self._buf += chunk


class Seal:
    """The host's half of the seal on one kernel's lines: a key and the next seq for each
    channel, ``c`` (calls) and ``r`` (everything else)."""

    def __init__(self) -> None:
        self.keys = {b"c": secrets.token_bytes(32), b"r": secrets.token_bytes(32)}
        self._templates = {c: hmac.new(k, digestmod="sha256") for c, k in self.keys.items()}
        self._next = dict.fromkeys(self.keys, 0)

    def open(self, line: bytes) -> tuple[bytes, bytes] | None:
        """(channel, message) of a line the worker sealed, next in its channel; else None.

        A line with a wrong or missing seal, or a right seal with a used or skipped seq
        (a replay, or a worker line that follows one a cell sealed), is not the worker's."""
        mac, _, rest = line.partition(b" ")
        head, _, body = rest.partition(b" ")
        channel, seq = head[:1], head[1:]
        if len(mac) != 64 or channel not in self._next or seq != b"%d" % self._next[channel]:
            return None
        check = self._templates[channel].copy()
        check.update(head + b" ")
        check.update(body)
        if not hmac.compare_digest(check.hexdigest().encode(), mac):
            return None
        self._next[channel] += 1
        return channel, body


class LineWriter:
    """Writes whole messages to a pipe fd without ever blocking past a deadline."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
        self._poll = select.poll()
        self._poll.register(fd, select.POLLOUT | select.POLLERR)

    def write(self, data: bytes, deadline: float) -> None:
        """Write all of ``data``; ``KernelUnresponsive`` if the kernel has not taken it by
        ``deadline`` (the pipe then holds part of a line: the kernel must be replaced);
        ``OSError`` (``BrokenPipeError``) if the kernel is gone."""
        view = memoryview(data)
        while view:
            try:
                sent = os.write(self._fd, view)
            except BlockingIOError:
                sent = 0
            view = view[sent:]
            if not view:
                return
            wait_ms = int((deadline - time.monotonic()) * 1000) + 1
            ready = wait_ms > 0 and self._poll.poll(wait_ms)
            if not ready and time.monotonic() >= deadline:
                raise KernelUnresponsive(
                    f"the kernel stopped reading: {len(view):,} of {len(data):,} bytes "
                    "were still unsent at the deadline"
                )


def decode_message(line: bytes) -> dict[str, Any]:
    """One kernel line as a message, or ``KernelProtocolError`` saying what is wrong."""
    problem = shape_problem(line)
    if problem is not None:
        raise KernelProtocolError(f"kernel sent a message with {problem}")
    try:
        message = json.loads(line)
    except RecursionError:
        raise KernelProtocolError("kernel sent a message nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise KernelProtocolError(f"kernel sent invalid JSON: {str(exc)[:200]}") from None
    if not isinstance(message, dict) or message.get("op") not in CHILD_OPS:
        raise KernelProtocolError("kernel sent a message without a known op")
    if message["op"] != "ready" and not _is_id(message.get("id")):
        raise KernelProtocolError(f"kernel sent a {message['op']!r} message without a valid id")
    return message


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
