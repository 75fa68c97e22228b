"""Content-addressed storage for large tool outputs and artifacts.

A payload is stored once under ``<root>/<first two hex>/<sha256>``; its reference is
``sha256:<hex>``. Handles load lazily and verify the hash, so a file that was edited or
truncated on disk is reported instead of silently served.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..errors import PayloadCorrupt, PayloadMissing

__all__ = [
    "ArtifactRef",
    "PayloadSource",
    "PayloadStore",
    "ToolResultRef",
    "encode_payload",
    "ref_of",
]

REF_PREFIX = "sha256:"
_CHUNK = 1 << 20

# How a payload's bytes are to be read back: utf-8 text, JSON, or opaque bytes.
MEDIA_TEXT = "text"
MEDIA_JSON = "json"
MEDIA_BYTES = "bytes"


def encode_payload(value: Any) -> tuple[bytes, str]:
    """Turn a payload value into bytes plus the media type needed to read it back."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value), MEDIA_BYTES
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass"), MEDIA_TEXT
    return json.dumps(value, ensure_ascii=False, default=str).encode("utf-8"), MEDIA_JSON


def ref_of(data: bytes) -> str:
    """The reference a payload of these bytes is stored under."""
    return REF_PREFIX + hashlib.sha256(data).hexdigest()


def check_ref(ref: str) -> str:
    """The hex digest of a well-formed reference; ``PayloadMissing`` for anything else."""
    if not isinstance(ref, str) or not ref.startswith(REF_PREFIX):
        raise PayloadMissing(str(ref), "not a payload reference (expected 'sha256:<hex>')")
    digest = ref[len(REF_PREFIX) :]
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise PayloadMissing(ref, "malformed sha256 digest")
    return digest


class PayloadSource(Protocol):
    """Where lazy handles load payloads from: files on disk (``PayloadStore``) or a table of
    the PostgreSQL Event Log. ``get`` checks the sha256 of what it returns."""

    def put(self, data: bytes) -> str: ...

    def get(self, ref: str) -> bytes: ...

    def exists(self, ref: str) -> bool: ...


class PayloadStore:
    """Payloads as files under ``root``, one per sha256 (the SQLite Event Log's store)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def path_for(self, ref: str) -> Path:
        digest = check_ref(ref)
        return self.root / digest[:2] / digest

    def put(self, data: bytes) -> str:
        """Store ``data`` (idempotent) and return its reference."""
        ref = ref_of(data)
        path = self.path_for(ref)
        if path.exists() and path.stat().st_size == len(data):
            return ref
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write beside the target and rename, so a reader never sees a half-written file.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return ref

    def get(self, ref: str) -> bytes:
        path = self.path_for(ref)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise PayloadMissing(ref, f"file {path} does not exist") from None
        if ref_of(data) != ref:
            raise PayloadCorrupt(ref, f"file {path} does not match its sha256")
        return data

    def exists(self, ref: str) -> bool:
        return self.path_for(ref).exists()


@dataclass(frozen=True)
class _PayloadHandle:
    ref: str
    size: int
    media: str
    store: PayloadSource = field(repr=False, compare=False)

    def load_bytes(self) -> bytes:
        return self.store.get(self.ref)


@dataclass(frozen=True)
class ToolResultRef(_PayloadHandle):
    """A lazy handle on the full output of a tool call (text or JSON)."""

    def load(self) -> Any:
        data = self.load_bytes()
        if self.media == MEDIA_JSON:
            return json.loads(data)
        return data.decode("utf-8", "surrogatepass")


@dataclass(frozen=True)
class ArtifactRef(_PayloadHandle):
    """A lazy handle on opaque bytes (files, images, undecodable input)."""

    def load(self) -> bytes:
        return self.load_bytes()
