"""ASGI entry point: HTTP through Django, WebSockets through Channels.

`python manage.py runserver` (daphne's) and `daphne dashboard.asgi:application` both
load `application` from here.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")

# Django must be set up before anything that imports models (consumers, auth).
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402

from dashboard.console.routing import websocket_urlpatterns  # noqa: E402
from dashboard.gateway import conversation_endpoints  # noqa: E402
from dashboard.gateway import endpoints as gateway  # noqa: E402
from dashboard.gateway.asgi import GatewayRouter  # noqa: E402
from dashboard.gateway.hosts import HostCheck  # noqa: E402
from dashboard.logs import AccessLog  # noqa: E402
from dashboard.push import remember_server_loop  # noqa: E402
from dashboard.static_files import StaticFiles  # noqa: E402


class RecordServerLoop:
    """Record the server's event loop on every connection, so the span sink's worker thread
    can hand its group sends to that loop (see dashboard.telemetry.spans)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        remember_server_loop()
        return await self.app(scope, receive, send)


http_app = StaticFiles(django_asgi_app) if settings.SCROLL_SERVE_STATIC else django_asgi_app

# The gateway's /v1/ routes are answered before Django's middleware (see
# dashboard.gateway.asgi for why); every other request goes on to the console. AccessLog
# writes one line for every HTTP request, whichever of them answers it.
application = AccessLog(
    RecordServerLoop(
        GatewayRouter(
            ProtocolTypeRouter(
                {
                    "http": http_app,
                    "websocket": AllowedHostsOriginValidator(
                        AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
                    ),
                }
            ),
            {**gateway.ROUTES, **conversation_endpoints.ROUTES, **gateway.FALLBACK},
            body_limit=gateway.body_limit,
            too_large=gateway.too_large,
            failed=gateway.unavailable,
            host_check=HostCheck(settings.ALLOWED_HOSTS, debug=settings.DEBUG),
        )
    )
)
