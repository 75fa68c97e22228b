"""Sending to the console's Channels groups from synchronous code (worker threads, the span
sink, the gateway's recorder).

``heard(group)`` says whether anyone may be listening to a group: with the in-memory layer
(the embedded default: every socket is in this process) a group no socket joined is heard
by no one, so a sender skips rendering and sending what nobody would get. That is safe
against a page that opens meanwhile: a consumer joins its groups before it reads its
catch-up from the database, and the senders store first, then ask. With any other layer
(Redis: sockets of other processes) every group may be heard.

Sending from a worker thread: the in-memory channel layer keeps ``asyncio.Queue`` objects that
belong to the server's event loop, and putting on them from another thread (which is what
``async_to_sync`` does: it runs the coroutine on a loop of its own) neither is thread-safe nor
reliably wakes the consumer waiting on the queue. So the ASGI application records the
server's running loop the first time it is called (``remember_server_loop``, from
``dashboard.asgi`` and the consumers' ``connect``), and ``send_groups`` schedules the sends
on that loop with ``asyncio.run_coroutine_threadsafe``. Without a known, running server loop
(a management command, a test without a server) it falls back to ``async_to_sync``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer

from dashboard.layer_outage import LAYER_DOWN_ERRORS, LayerDown, layer_outage

__all__ = [
    "Sending",
    "heard",
    "remember_server_loop",
    "send_group",
    "send_groups",
    "server_loop",
    "start_sending",
]

log = logging.getLogger("dashboard.push")

# How long a worker waits for the server's loop to take one batch of messages.
SEND_TIMEOUT_S = 10.0

_server_loop: asyncio.AbstractEventLoop | None = None


def remember_server_loop(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Record the ASGI server's event loop (call from a coroutine the server runs)."""
    global _server_loop
    if loop is None:
        loop = asyncio.get_running_loop()
    if _server_loop is not loop:
        _server_loop = loop


def server_loop() -> asyncio.AbstractEventLoop | None:
    """The recorded server loop while it runs; None when unknown, stopped or closed."""
    loop = _server_loop
    if loop is None or loop.is_closed() or not loop.is_running():
        return None
    return loop


async def _send_retrying_stale(layer: Any, group: str, message: dict[str, Any]) -> None:
    """``group_send`` once more when the first try meets a dead connection: after a Redis
    restart every connection pooled before it fails its next command once ("Connection
    closed by server") and is dropped, and the message would be lost though Redis answers."""
    try:
        await layer.group_send(group, message)
    except LAYER_DOWN_ERRORS:
        await layer.group_send(group, message)


async def _send_all(layer: Any, messages: Sequence[tuple[str, dict[str, Any]]]) -> int:
    """Send in order; returns how many were not sent. While the layer is down the rest of
    the batch is dropped at once (``dashboard.layer_outage`` logs the outage once)."""
    failed = 0
    for index, (group, message) in enumerate(messages):
        if not layer_outage.should_try():
            layer_outage.failed(LayerDown(), len(messages) - index)
            return failed + len(messages) - index
        try:
            await _send_retrying_stale(layer, group, message)
        except LAYER_DOWN_ERRORS as exc:
            layer_outage.failed(exc, len(messages) - index)
            return failed + len(messages) - index
        except Exception:
            failed += 1
            log.exception("console: sending %s to %s failed", message.get("type"), group)
        else:
            layer_outage.answered()
    return failed


def heard(group: str) -> bool:
    """Whether a message sent to ``group`` may reach anyone (see the module docstring)."""
    layer = get_channel_layer()
    if layer is None:
        return False
    if isinstance(layer, InMemoryChannelLayer):
        return bool(layer.groups.get(group))
    return True


class Sending:
    """Messages on their way (``start_sending``); ``done`` waits for them."""

    def __init__(self, count: int, future: Future[int] | None = None, failed: int = 0) -> None:
        self.count = count
        self._future = future
        self._failed = failed

    def done(self, timeout: float = SEND_TIMEOUT_S) -> bool:
        """Wait until they are sent (at most ``timeout``); False (logged) when any failed."""
        if self._future is not None:
            try:
                self._failed = self._future.result(timeout)
            except Exception:
                log.exception("console: sending %d messages failed", self.count)
                self._failed = self.count
            self._future = None
        return self._failed == 0


def start_sending(messages: Sequence[tuple[str, dict[str, Any]]]) -> Sending:
    """``group_send`` each ``(group, message)`` in order, from synchronous code, without
    waiting for the server's loop to take them: ``Sending.done`` waits.

    On the server's loop when one is known (thread-safe for the in-memory layer), else
    through ``async_to_sync`` (sent before this returns).
    """
    layer = get_channel_layer()
    if layer is None:
        return Sending(len(messages), failed=1)
    if not messages:
        return Sending(0)
    loop = server_loop()
    try:
        if loop is None:
            return Sending(len(messages), failed=async_to_sync(_send_all)(layer, messages))
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            # Called from the server's own thread: schedule, never block the loop.
            loop.create_task(_send_all(layer, messages))
            return Sending(len(messages))
        return Sending(
            len(messages), asyncio.run_coroutine_threadsafe(_send_all(layer, messages), loop)
        )
    except Exception:
        log.exception("console: sending %d messages failed", len(messages))
        return Sending(len(messages), failed=len(messages))


def send_groups(messages: Sequence[tuple[str, dict[str, Any]]]) -> bool:
    """``group_send`` each ``(group, message)`` in order, from synchronous code, and wait
    until they are sent (``start_sending``). False (logged) when any send failed."""
    return start_sending(messages).done()


def send_group(group: str, message: dict[str, Any]) -> bool:
    """``group_send`` from synchronous code; False (logged) when the layer refuses it."""
    return send_groups([(group, message)])
