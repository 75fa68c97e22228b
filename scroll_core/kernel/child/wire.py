"""JSON lines between host and kernel: one object per line, UTF-8, ``op`` names the message.

Host to child: ``init``, ``exec``, ``reply`` (to a host-function call), ``interrupt``,
``bind`` (new host functions), ``ping``, ``shutdown``.
Child to host: ``ready``, ``call`` (a host function), ``result``, ``pong``, ``bound``.
JSON strings never contain a raw newline, so a line is always exactly one message.

Every child line is sealed: ``<hmac> <channel><seq> <json>``, where ``hmac`` is
HMAC-SHA256 (hex) of ``<channel><seq> <json>`` under that channel's key, sent by the host
in ``init``, and ``seq`` counts the channel's lines from 0. Channel ``c`` carries only
``call`` messages (host functions, sent by the ``ms`` proxy a cell can reach); channel
``r`` carries everything else, results included, and its sealer lives only in the worker's
main loop (a local of ``serve``), on no object a cell can reach from its namespace, modules,
threads or signal handlers. The worker turns each key into an OpenSSL HMAC object and drops
it, so no Python object holds a key. A cell can write bytes to the protocol descriptor (it
runs in the same process), but not a line the host accepts: the host drops any line whose
seal, channel or sequence number is wrong. Each sealed line starts with a newline, so bytes
a cell wrote without one cannot swallow the worker's next line. What a cell that walks the
interpreter's frames can still do is said in docs/security.md.
"""

from __future__ import annotations

import hmac
import itertools
import json
import os
import re
from collections.abc import Callable
from typing import Any

# A child line longer than this is a protocol violation (a result is capped far below it).
MAX_CHILD_LINE = 4 * 1024 * 1024
MAX_DEPTH = 64
# Room for the seal in front of a message: newline, 64 hex digits, a space, seq, a space.
SEAL_BYTES = 96
# The most a cell may print: at 12 bytes per character (an escaped astral character), with
# room for the traceback, digest and denials, a result line always fits in MAX_CHILD_LINE.
MAX_PRINT_CAP = (MAX_CHILD_LINE - 256 * 1024) // 12
MAX_ITEMS = 250_000

_encoder = json.JSONEncoder(separators=(",", ":"), default=repr)
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b"[]{},")
_OPEN = bytes.maketrans(b"[{]}", b"(())")


def encode(message: dict[str, Any]) -> bytes:
    """One message as a JSON line; unknown objects degrade to their repr."""
    return _encoder.encode(message).encode("utf-8", "surrogatepass") + b"\n"


def sealer(key: bytes, channel: bytes) -> Callable[[dict[str, Any]], bytes]:
    """A function that encodes and seals one message on ``channel`` (``b"c"`` or ``b"r"``);
    call it in the order lines are sent."""
    template = hmac.new(key, digestmod="sha256")
    counter = itertools.count()

    def seal(message: dict[str, Any]) -> bytes:
        body = encode(message)
        head = channel + b"%d " % next(counter)
        mac = template.copy()
        mac.update(head)
        mac.update(body[:-1])
        return b"\n" + mac.hexdigest().encode() + b" " + head + body

    return seal


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        sent = os.write(fd, view)
        view = view[sent:]


def shape_problem(
    line: bytes, max_depth: int = MAX_DEPTH, max_items: int = MAX_ITEMS
) -> str | None:
    """Why ``line`` nests too deeply or holds too many values to decode, or ``None``.

    Works on the bytes: string literals are cut out, the brackets and commas left are
    counted, and matched bracket pairs are peeled one level per pass (each pass is a C-speed
    ``bytes.replace``), so the cost stays linear in the line and independent of nesting."""
    if line.count(b"[") + line.count(b"{") <= min(max_depth, max_items) and (
        line.count(b",") < max_items
    ):
        return None
    skeleton = _STRING.sub(b"", line).translate(None, _NOT_STRUCTURE)
    if skeleton.count(b",") + 1 > max_items:
        return f"more than {max_items:,} values in one message"
    brackets = skeleton.replace(b",", b"").translate(_OPEN)
    if len(brackets) // 2 > max_items:
        return f"more than {max_items:,} values in one message"
    for _ in range(max_depth):
        if not brackets:
            return None
        peeled = brackets.replace(b"()", b"")
        if len(peeled) == len(brackets):
            return "unbalanced brackets"  # never valid JSON, however deep
        brackets = peeled
    return None if not brackets else f"nested deeper than {max_depth} levels"
