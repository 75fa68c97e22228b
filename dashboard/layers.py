"""The embedded default's channel layer: Channels' in-memory layer, with its expiry sweep
throttled.

``InMemoryChannelLayer`` sweeps every channel's queue for expired messages on every
``receive`` and ``group_send``: O(open sockets) work per message, so with a hundred live pages
and a thousand spans a second the sweep alone eats the event loop. Messages expire after
``expiry`` seconds (60 by default), so sweeping at most once every ``SWEEP_EVERY_S`` keeps
the same behaviour at a fraction of the cost.

It also queues each message as it is rather than a deep copy per receiving channel: a span
fanned out to a hundred sockets was copied a hundred times. The console's messages are
read-only by contract (the consumers render from them and never change them).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from channels.exceptions import ChannelFull
from channels.layers import InMemoryChannelLayer

__all__ = ["ThrottledInMemoryChannelLayer"]

SWEEP_EVERY_S = 1.0


class ThrottledInMemoryChannelLayer(InMemoryChannelLayer):
    _last_sweep = 0.0

    def _clean_expired(self) -> None:
        now = time.monotonic()
        if now - self._last_sweep < SWEEP_EVERY_S:
            return
        self._last_sweep = now
        super()._clean_expired()

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        assert isinstance(message, dict), "message is not a dict"
        self.require_valid_channel_name(channel)
        assert "__asgi_channel__" not in message
        queue = self.channels.setdefault(channel, asyncio.Queue(maxsize=self.get_capacity(channel)))
        try:
            queue.put_nowait((time.time() + self.expiry, message))
        except asyncio.QueueFull:
            raise ChannelFull(channel) from None
