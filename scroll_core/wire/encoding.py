"""Storing request bodies so that a session's record grows with what is new, not with
calls × window.

Consecutive calls of one session share almost all of their messages, so a body is taken
apart into its top-level fields, in order:

* ``messages`` become a list of pieces, each either the digest of one message (stored once
  as a blob, whichever call sent it first) or ``[start, count]``: that many messages copied
  from the previous call's list at ``start``. A call that only appended costs one pair and
  the new digests; an eviction, which rewrites the archive near the front, a few pairs more.
  Every ``KEYFRAME_EVERY``-th call of a session (and the first) lists digests only, so
  reading one call never walks back further than that.
* any other field whose JSON is longer than ``INLINE_MAX`` bytes (a tool list, a long
  system prompt) becomes the digest of a blob; short ones (model, parameters) stay inline.

A body is rebuilt by putting the fields back in order and writing them with the encoder that
reproduced it when it was stored (``ENCODERS``, checked byte for byte at write time). A body
no encoder reproduces, or that is not a JSON object, is kept whole as one blob (``raw``).
Either way ``decode`` returns exactly the bytes that were sent.

Digests are SHA-256 of the blob's text (the message in compact JSON).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ENCODERS",
    "INLINE_MAX",
    "KEYFRAME_EVERY",
    "Encoded",
    "RecordDecodeError",
    "decode",
    "digest",
    "encode",
    "expand_messages",
    "stored_size",
]

INLINE_MAX = 128
KEYFRAME_EVERY = 64
RAW = "raw"


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# How clients write JSON: compact UTF-8 (orjson, httpx, Scroll's gateway), compact with
# ASCII escapes, and the standard library's defaults.
ENCODERS: dict[str, Callable[[Any], str]] = {
    "compact": _compact,
    "compact_ascii": lambda v: json.dumps(v, separators=(",", ":")),
    "spaced": lambda v: json.dumps(v, ensure_ascii=False),
    "spaced_ascii": json.dumps,
}


class RecordDecodeError(ValueError):
    """A stored call refers to a blob or an earlier call that is not there."""


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class Encoded:
    """One body taken apart: ``fields`` (JSON-ready), the blobs it refers to by digest, the
    digests of its messages in order (the next call is encoded against them), and the
    encoder that writes it back."""

    encoding: str
    fields: list[Any]
    blobs: dict[str, str] = field(default_factory=dict)
    message_digests: list[str] = field(default_factory=list)


def _pieces(current: list[str], previous: Sequence[str] | None) -> list[Any]:
    """``current`` as digests and ``[start, count]`` runs copied from ``previous``."""
    if not previous:
        return list(current)
    where: dict[str, list[int]] = {}
    for i, d in enumerate(previous):
        where.setdefault(d, []).append(i)
    out: list[Any] = []
    i = 0
    while i < len(current):
        best_start, best_len = -1, 0
        for start in where.get(current[i], ()):
            n = 0
            while (
                i + n < len(current)
                and start + n < len(previous)
                and previous[start + n] == current[i + n]
            ):
                n += 1
            if n > best_len:
                best_start, best_len = start, n
        if best_len:  # a run is shorter than even one digest
            out.append([best_start, best_len])
            i += best_len
        else:
            out.append(current[i])
            i += 1
    return out


def encode(
    body: bytes, previous: Sequence[str] | None = None, *, keyframe: bool = False
) -> Encoded:
    """``body`` taken apart against the previous call's message digests (``previous``;
    ignored for a keyframe)."""
    raw_text = body.decode("utf-8", "surrogatepass")
    try:
        value = json.loads(raw_text)
    except ValueError:
        value = None
    if isinstance(value, dict):
        for name, write in ENCODERS.items():
            try:
                same = write(value) == raw_text
            except ValueError:
                same = False
            if same:
                enc = _split(value, name, None if keyframe else previous)
                # Belt and braces: only what decodes to the very bytes is stored apart.
                if decode(enc.encoding, enc.fields, enc.blobs, enc.message_digests) == body:
                    return enc
                break
    d = digest(raw_text)
    return Encoded(RAW, [["", "b", d]], {d: raw_text})


def _split(value: dict[str, Any], encoding: str, previous: Sequence[str] | None) -> Encoded:
    enc = Encoded(encoding, [])
    for name, item in value.items():
        if name == "messages" and isinstance(item, list):
            texts = [_compact(m) for m in item]
            digests = [digest(t) for t in texts]
            enc.blobs.update(zip(digests, texts, strict=True))
            enc.message_digests = digests
            enc.fields.append([name, "m", _pieces(digests, previous)])
            continue
        text = _compact(item)
        if len(text.encode()) > INLINE_MAX:
            d = digest(text)
            enc.blobs[d] = text
            enc.fields.append([name, "b", d])
        else:
            enc.fields.append([name, "v", item])
    return enc


def stored_size(enc: Encoded, known: set[str]) -> int:
    """The bytes storing ``enc`` adds to a record that already holds the blobs ``known``:
    its fields in compact JSON and each blob it is the first to bring (added to ``known``)."""
    size = len(json.dumps(enc.fields, separators=(",", ":")).encode())
    for d, text in enc.blobs.items():
        if d not in known:
            known.add(d)
            size += len(text.encode("utf-8", "surrogatepass"))
    return size


def expand_messages(pieces: Sequence[Any], previous: Sequence[str] | None) -> list[str]:
    """The message digests that ``pieces`` stand for, given the previous call's."""
    out: list[str] = []
    for piece in pieces:
        if isinstance(piece, str):
            out.append(piece)
            continue
        start, count = int(piece[0]), int(piece[1])
        if previous is None or start < 0 or start + count > len(previous):
            raise RecordDecodeError("a call copies messages its previous call does not have")
        out.extend(previous[start : start + count])
    return out


def decode(
    encoding: str,
    fields: Sequence[Any],
    blobs: Mapping[str, str],
    message_digests: Sequence[str] | None = None,
) -> bytes:
    """The exact body ``fields`` were taken from; ``message_digests`` are its messages'
    (``expand_messages`` of its pieces)."""

    def blob(d: str) -> str:
        try:
            return blobs[d]
        except KeyError:
            raise RecordDecodeError(f"blob {d[:12]}… is missing from the record") from None

    if encoding == RAW:
        return blob(fields[0][2]).encode("utf-8", "surrogatepass")
    try:
        write = ENCODERS[encoding]
    except KeyError:
        raise RecordDecodeError(f"unknown encoding {encoding!r}") from None
    value: dict[str, Any] = {}
    for name, kind, item in fields:
        if kind == "m":
            value[name] = [json.loads(blob(d)) for d in (message_digests or [])]
        elif kind == "b":
            value[name] = json.loads(blob(item))
        else:
            value[name] = item
    return write(value).encode("utf-8", "surrogatepass")
