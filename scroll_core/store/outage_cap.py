"""How long a caller will wait for the Event Log's database in an outage, below the log's
own budget (``SCROLL_DB_OUTAGE_S``): a caller with a client waiting (the gateway) answers
"retry later" soon instead of holding the request through the whole outage. Free of any
database driver, so the embedded default imports it too."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["current_cap", "outage_cap"]

_CAP: ContextVar[float | None] = ContextVar("scroll_outage_cap", default=None)


@contextmanager
def outage_cap(seconds: float) -> Iterator[None]:
    """Wait at most ``seconds`` for the database in this block."""
    token = _CAP.set(seconds)
    try:
        yield
    finally:
        _CAP.reset(token)


def current_cap() -> float | None:
    return _CAP.get()
