"""WebSocket routes of the console: one consumer per kind of live page."""

from __future__ import annotations

from typing import Any

from django.urls import path

from dashboard.console import consumers

websocket_urlpatterns: list[Any] = [
    path("ws/alerts/", consumers.AlertsConsumer.as_asgi()),
    path("ws/feed/", consumers.FeedConsumer.as_asgi()),
    path("ws/sessions/<str:safe_id>/", consumers.SessionConsumer.as_asgi()),
]
