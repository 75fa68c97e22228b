"""JSON lines between host and kernel: one object per line, UTF-8, ``op`` names the message.

Host to child: ``init``, ``exec``, ``reply`` (to a host-function call), ``interrupt``,
``bind`` (new host functions), ``ping``, ``shutdown``.
Child to host: ``ready``, ``call`` (a host function), ``result``, ``pong``, ``bound``.
JSON strings never contain a raw newline, so a line is always exactly one message.

A child line must also stay within a shape the host will decode: at most ``MAX_CHILD_LINE``
bytes, ``MAX_DEPTH`` levels of nesting and ``MAX_ITEMS`` values. ``shape_problem`` checks
that on the raw bytes, before any parser recurses or allocates; the kernel runs the same
check on its own host-function calls so a cell's oversized arguments fail in the cell.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

# A child line longer than this is a protocol violation (a result is capped far below it).
MAX_CHILD_LINE = 4 * 1024 * 1024
MAX_DEPTH = 64
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
