"""The console's logs: Django's ``LOGGING`` built from the environment, and the request line.

Every HTTP request, the console's pages and the gateway's ``/v1/`` routes alike (those are
answered in front of Django, see ``dashboard.gateway.asgi``), leaves one line on stderr from
``AccessLog``, the outermost ASGI app: method, path, status and duration. A view that raises
leaves its traceback too: Django turns the exception into a 500 and sends
``got_request_exception``, whose receiver here logs the traceback (Django's own
``django.request`` record has none when the error page itself fails, so it is silenced); an
exception that escapes the ASGI app (a gateway endpoint's) is logged on the request line
itself and answered with a 500 here.

SCROLL_LOG_FORMAT  "json": one JSON object per line (python-json-logger); "text" (default)
SCROLL_LOG_LEVEL   the level of Scroll's own loggers (default INFO; WARNING hides the
                   request lines of answers below 400). Libraries log at WARNING and above.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured

__all__ = ["AccessLog", "StderrHandler", "log_uncaught_exception", "logging_config"]

log = logging.getLogger("dashboard.requests")
errors = logging.getLogger("dashboard.errors")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# The fields of every JSON line; a request line adds method, path, status and duration_ms,
# an error its exc_info (the traceback).
JSON_FIELDS = ["asctime", "levelname", "name", "message"]
JSON_NAMES = {"asctime": "time", "levelname": "level", "name": "logger"}


def logging_config(env: Mapping[str, str]) -> dict[str, Any]:
    """Django's ``LOGGING`` for the variables in ``env`` (``os.environ`` in the settings)."""
    fmt = (env.get("SCROLL_LOG_FORMAT") or "text").strip().lower()
    if fmt not in FORMATS:
        raise ImproperlyConfigured(f"SCROLL_LOG_FORMAT is text or json, not {fmt!r}")
    level = (env.get("SCROLL_LOG_LEVEL") or "INFO").strip().upper()
    if not isinstance(logging.getLevelName(level), int):
        raise ImproperlyConfigured(f"SCROLL_LOG_LEVEL is not a logging level: {level!r}")
    formatters: dict[str, Any] = {
        "text": {"format": TEXT_FORMAT},
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": JSON_FIELDS,
            "rename_fields": JSON_NAMES,
        },
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {fmt: formatters[fmt]},
        "filters": {
            "no_daphne_requests": {
                "()": "django.utils.log.CallbackFilter",
                "callback": _not_a_daphne_request_line,
            }
        },
        "handlers": {"stderr": {"class": "dashboard.logs.StderrHandler", "formatter": fmt}},
        "root": {"handlers": ["stderr"], "level": "WARNING"},
        "loggers": {
            "dashboard": {"level": level},
            "scroll": {"level": level},
            # Replaces Django's default handlers (a console that prints only under DEBUG,
            # mail to ADMINS): its records go to the root's stderr like the rest.
            "django": {"handlers": [], "level": "WARNING"},
            # Its lines repeat the request line; tracebacks come from log_uncaught_exception.
            "django.request": {"level": "CRITICAL"},
            # The server's start-up lines ("Listening on TCP address ...").
            "daphne": {"level": "INFO"},
            # `runserver` (daphne's) logs requests too; the WebSocket lines stay.
            "django.channels.server": {"level": "INFO", "filters": ["no_daphne_requests"]},
        },
    }


def _not_a_daphne_request_line(record: logging.LogRecord) -> bool:
    return not (isinstance(record.args, Mapping) and "time_taken" in record.args)


def log_uncaught_exception(sender: Any, request: Any, **kwargs: Any) -> None:
    """``got_request_exception``'s receiver: Django sends it from inside the ``except`` that
    caught what a view, or the page for an error, raised."""
    errors.error("%s %s raised", request.method, request.path, exc_info=True)


class StderrHandler(logging.StreamHandler):
    """Writes to ``sys.stderr`` as it is when a record comes, not when logging was set up
    (a test's captured stderr, a server that swapped it)."""

    def __init__(self, level: int = logging.NOTSET) -> None:
        logging.Handler.__init__(self, level)

    @property
    def stream(self) -> Any:
        return sys.stderr


class AccessLog:
    """An ASGI app that logs one line per HTTP request handled by ``app``."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status: int | None = None
        failure: Exception | None = None

        async def sending(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            failure = exc
            if status is not None:
                raise  # the answer has begun: the server must drop the connection
            await sending(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [(b"content-type", b"text/plain; charset=utf-8")],
                }
            )
            await send({"type": "http.response.body", "body": b"Internal Server Error"})
        finally:
            _request_line(scope, status, began, failure)


def _request_line(
    scope: Scope, status: int | None, began: float, failure: Exception | None
) -> None:
    ms = round((time.perf_counter() - began) * 1000, 1)
    if failure is not None or (status or 0) >= 500:
        level = logging.ERROR
    elif (status or 0) >= 400:
        level = logging.WARNING
    else:
        level = logging.INFO
    method, path = scope.get("method", ""), scope.get("path", "")
    fields = {"method": method, "path": path, "status": status, "duration_ms": ms}
    # status None: the client went away before any answer.
    log.log(
        level, "%s %s %s %.1fms", method, path, status or "-", ms, extra=fields, exc_info=failure
    )
