"""Capturing model calls as they cross the wire.

A caller that wants a record of its model calls opens a ``WireLog`` with ``collecting(log)``;
every model call made inside it (``steps.traced_call``: Scroll's own loop and the gateway's
recall loop) appends one ``WireCall`` to it when the call ends, answered or failed.

What a call "sent" is what the transport wrote: an HTTP client calls ``note_sent(url, body)``
with the exact bytes of each request it sends (``gateway.upstream.HttpUpstream``,
``models.OpenAICompatibleModel`` through an httpx event hook), so a client's own retries
leave the last attempt's body and a count of sends. A model served in process (the demo's
scripted model, a test double) sends no bytes; the call's request is then the JSON of what
the loop handed it (model, messages, tools), encoded compactly, with ``url`` empty.

Outside ``collecting`` nothing is kept: capturing costs a context-variable read per call.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "WireCall",
    "WireLog",
    "calling",
    "collecting",
    "note_sent",
    "reply_record",
    "view_record",
]


@dataclass
class WireCall:
    """One model call as it went out and came back.

    ``body`` is the request exactly as sent (the last attempt's when the transport retried,
    ``sends`` counting the attempts); ``reply`` the answer as Scroll read it (text, tool
    calls, finish reason, model, thinking blocks), ``usage`` the provider's token counts as
    it reported them; ``view`` the working view's section sizes when the call was built.
    ``started_at`` is a Unix time in seconds.
    """

    session_id: str
    model: str
    source: str
    body: bytes = b""
    url: str = ""
    sends: int = 0
    turn: int | None = None
    step: int | None = None
    attempt: int = 1
    started_at: float = 0.0
    duration_ms: float = 0.0
    status: str = "ok"
    error: str = ""
    reply: dict[str, Any] | None = None
    usage: dict[str, int] = field(default_factory=dict)
    view: dict[str, Any] | None = None
    trace_id: str = ""
    span_id: str = ""


class WireLog:
    """The calls captured so far, in the order they ended; ``drain`` hands them over once."""

    def __init__(self) -> None:
        self._calls: list[WireCall] = []
        self._lock = threading.Lock()

    def add(self, call: WireCall) -> None:
        with self._lock:
            self._calls.append(call)

    def drain(self) -> list[WireCall]:
        with self._lock:
            calls, self._calls = self._calls, []
        return calls

    def __len__(self) -> int:
        with self._lock:
            return len(self._calls)


_LOG: ContextVar[WireLog | None] = ContextVar("scroll_wire_log", default=None)
_OPEN: ContextVar[WireCall | None] = ContextVar("scroll_wire_call", default=None)


@contextmanager
def collecting(log: WireLog) -> Iterator[WireLog]:
    """Capture every model call made in this context (and nested ones) into ``log``."""
    token = _LOG.set(log)
    try:
        yield log
    finally:
        _LOG.reset(token)


def note_sent(url: str, body: bytes) -> None:
    """A transport's report of one request it is sending for the open call (if any)."""
    call = _OPEN.get()
    if call is not None:
        call.url = url
        call.body = bytes(body)
        call.sends += 1


def _compact(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


@contextmanager
def calling(
    model: str,
    *,
    session: str,
    source: str,
    request: Callable[[], dict[str, Any]] | None = None,
    turn: int | None = None,
    step: int | None = None,
    attempt: int = 1,
    view: Callable[[], dict[str, Any]] | None = None,
) -> Iterator[WireCall | None]:
    """Open one call's capture: yields the ``WireCall`` to fill (``None`` when nothing is
    collecting). When the block ends the call is added to the log, failed or not; a call
    whose transport sent nothing gets ``request()``, compact JSON, as its body. ``request``
    and ``view`` are called only while something collects: nothing is built otherwise."""
    log = _LOG.get()
    if log is None:
        yield None
        return
    call = WireCall(
        session_id=session, model=model, source=source, turn=turn, step=step,
        attempt=attempt, view=view() if view is not None else None, started_at=time.time(),
    )  # fmt: skip
    began = time.perf_counter()
    token = _OPEN.set(call)
    try:
        yield call
    except BaseException as exc:
        call.status = "error"
        call.error = f"{type(exc).__name__}: {exc}"[:4000]
        raise
    finally:
        _OPEN.reset(token)
        call.duration_ms = (time.perf_counter() - began) * 1000
        if not call.sends and request is not None:
            call.body = _compact(request())
        log.add(call)


def view_record(report: Any, index: Any) -> dict[str, Any]:
    """The working view a call was built from, as the record keeps it: its section sizes
    (``ViewReport.to_dict``) and the index blocks it carried, ``[tier, lo_seq, hi_seq,
    events, tokens]`` each (their headlines are in the messages)."""
    out = dict(report.to_dict())
    out["blocks"] = [[b.tier, b.lo_seq, b.hi_seq, b.events, b.tokens] for b in index.blocks]
    return out


def reply_record(reply: Any) -> tuple[dict[str, Any], dict[str, int]]:
    """A ``ModelReply`` as the record keeps it, and its usage: every count the provider
    reported (``Usage``'s names; a count it did not report is left out)."""
    record: dict[str, Any] = {
        "content": reply.content,
        "finish_reason": reply.finish_reason,
        "model": reply.model,
    }
    if reply.tool_calls:
        record["tool_calls"] = [c.to_message() for c in reply.tool_calls]
    if reply.thinking:
        record["thinking"] = list(reply.thinking)
    counts: dict[str, int] = {}
    for name, value in dataclasses.asdict(reply.usage).items():
        if isinstance(value, int):
            counts[name] = value
    return record, counts
