"""WebSocket routes of the console; live pages add their consumers here."""

from __future__ import annotations

from typing import Any

websocket_urlpatterns: list[Any] = []
