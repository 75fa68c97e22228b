"""Finished spans the console database could not take, kept on disk until it can.

The span sink writes a batch here when storing it met a database outage (and every batch
after it, so spans are stored in the order they ended), and stores the oldest file again
once the database answers. The spool is bounded in bytes (``SCROLL_SPAN_SPOOL_BYTES``): past
it the oldest batches are dropped, counted in ``dropped`` and logged, so a long outage
costs the oldest spans, never the disk.

One file per batch, named ``<time_ns>-<pid>-<spans>.json`` and written whole (a temporary
name, then a rename), so several processes may share the folder: each stores any batch, and
a batch two processes both store is stored once (span ids are unique in the database).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_SPOOL_BYTES", "SpanSpool"]

log = logging.getLogger("dashboard.telemetry.spool")

DEFAULT_SPOOL_BYTES = 64 * 1024 * 1024
_SUFFIX = ".json"


def _spans_in(path: Path) -> int:
    try:
        return int(path.stem.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return 0


class SpanSpool:
    """A bounded folder of span batches, oldest first (see the module docstring)."""

    def __init__(self, folder: Path, max_bytes: int = DEFAULT_SPOOL_BYTES) -> None:
        if max_bytes < 1:
            raise ValueError(f"the span spool needs at least 1 byte, got {max_bytes}")
        self.folder = Path(folder)
        self.max_bytes = max_bytes
        self.dropped = 0  # spans dropped to stay under max_bytes, since this process began
        self._lock = threading.Lock()

    def files(self) -> list[Path]:
        """The batches waiting, oldest first."""
        try:
            return sorted(p for p in self.folder.iterdir() if p.name.endswith(_SUFFIX))
        except FileNotFoundError:
            return []

    def pending(self) -> int:
        """How many spans wait in the spool."""
        return sum(_spans_in(p) for p in self.files())

    def put(self, spans: Sequence[dict[str, Any]]) -> None:
        """Add one batch (span dicts), then drop the oldest batches past ``max_bytes``."""
        if not spans:
            return
        data = json.dumps(list(spans), default=str, separators=(",", ":")).encode()
        with self._lock:
            self.folder.mkdir(parents=True, exist_ok=True)
            name = f"{time.time_ns():020d}-{os.getpid()}-{len(spans)}{_SUFFIX}"
            part = self.folder / (name + ".part")
            part.write_bytes(data)
            part.rename(self.folder / name)
            self._trim()

    def _trim(self) -> None:
        files = self.files()
        sizes = {p: self._size(p) for p in files}
        total = sum(sizes.values())
        dropped = 0
        for path in files:
            if total <= self.max_bytes:
                break
            total -= sizes[path]
            try:
                path.unlink()
            except FileNotFoundError:
                continue  # another process stored it meanwhile
            dropped += _spans_in(path)
        if dropped:
            self.dropped += dropped
            log.warning(
                "span spool over %d bytes (SCROLL_SPAN_SPOOL_BYTES): dropped the oldest %d "
                "spans (%d since start) while the console database is away",
                self.max_bytes,
                dropped,
                self.dropped,
            )

    @staticmethod
    def _size(path: Path) -> int:
        try:
            return path.stat().st_size
        except FileNotFoundError:
            return 0

    def read(self, path: Path) -> list[dict[str, Any]] | None:
        """The spans of one batch; None when another process took it (or it is unreadable,
        which is logged and the file set aside as ``.bad``)."""
        try:
            spans = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except ValueError:
            log.error("span spool: %s is not a span batch; set aside as .bad", path.name)
            path.rename(path.with_name(path.name + ".bad"))
            return None
        return list(spans)

    @staticmethod
    def remove(path: Path) -> None:
        path.unlink(missing_ok=True)  # another process may have stored it meanwhile
