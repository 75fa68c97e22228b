"""Start-up wiring: telemetry with the console's span sink, the embedded worker, the demo
run, the first admin.

Only a serving process starts these (``runserver``'s serving child, or an ASGI server such as
daphne); ``migrate``, other commands and tests stay light. ``settings.SCROLL_STARTUP`` (or the
``SCROLL_STARTUP`` environment variable) forces it either way. Unless ``SCROLL_WORKERS`` is
``external`` (runs execute in ``manage.py scroll_worker`` processes), the serving process
starts one worker thread itself. ``SCROLL_DEMO=1`` (set by ``make run``) also queues the
built-in demo session, once per data folder. A serving process never touches runs it does not
own: a run left behind by a stopped process is resumed by whichever worker claims it after its
lease expires.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.signals import got_request_exception

log = logging.getLogger("dashboard.apps")

_started = False
_start_lock = threading.Lock()
SERVERS = frozenset({"daphne", "uvicorn", "gunicorn", "hypercorn"})


def _flag(name: str) -> bool | None:
    value = getattr(settings, name, None)
    if value is None:
        raw = os.environ.get(name, "").strip().lower()
        if not raw:
            return None
        return raw in {"1", "true", "yes", "on"}
    return bool(value)


def startup_wanted(argv: list[str] | None = None) -> bool:
    """Whether this process serves the console (and so should start telemetry and runs)."""
    forced = _flag("SCROLL_STARTUP")
    if forced is not None:
        return forced
    argv = sys.argv if argv is None else argv
    if not argv:
        return False
    if os.path.basename(argv[0]) in SERVERS:
        return True
    if len(argv) > 1 and argv[1] == "runserver":
        # The autoreloader's parent only watches files; its child (RUN_MAIN) serves.
        return os.environ.get("RUN_MAIN") == "true" or "--noreload" in argv
    return False


def start_console() -> None:
    """Configure telemetry with the span sink, once per process; start the demo if asked."""
    global _started
    with _start_lock:
        if _started:
            return
        _started = True
    from dashboard.telemetry.spans import install_sink

    install_sink()
    threading.Thread(target=_after_start, name="scroll-startup", daemon=True).start()


def _after_start() -> None:
    """Database work, off the app registry's import path."""
    from django.db import connection

    from dashboard.console.console_admin import ensure_admin
    from dashboard.runs import runner

    try:
        ensure_admin(announce=True)
        if getattr(settings, "SCROLL_WORKERS", "embedded") != "external":
            runner.start_embedded_worker()
        if _flag("SCROLL_DEMO"):
            from dashboard.runs.demo import start_demo_once

            pause = float(os.environ.get("SCROLL_DEMO_PAUSE", "4"))
            run = start_demo_once(pause_s=pause)
            if run is not None:
                print(f"  Demo session queued: {run.session_id}", flush=True)
    except Exception:
        log.exception("console start-up failed (run `manage.py migrate` first?)")
    finally:
        connection.close()
    _open_event_log()


def _open_event_log() -> None:
    """Open the Event Log now, not at the first gateway request or run: opening loads the
    tokenizer (~0.3 s), which that request's client would otherwise wait for. A log that
    cannot be opened yet is opened by the first request that needs it."""
    from dashboard.eventlog import get_event_log

    try:
        get_event_log()
    except Exception as exc:
        log.warning("the Event Log could not be opened at start-up (%s): opened when needed", exc)


def _log_uncaught_exception(sender: Any, request: Any, **kwargs: Any) -> None:
    """A request's traceback, unless a database outage raised it: that request was answered
    the 503 page (handler500) and its request line says so; a traceback per page viewed
    during an outage (the 404 page reads the database too) buries everything else."""
    from dashboard.logs import log_uncaught_exception
    from dashboard.outage import database_unavailable

    if not database_unavailable(sys.exc_info()[1]):
        log_uncaught_exception(sender, request, **kwargs)


class DashboardConfig(AppConfig):
    name = "dashboard"
    verbose_name = "Scroll"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the receiver that closes the Event Log when tests move its path.
        from dashboard import eventlog  # noqa: F401

        got_request_exception.connect(_log_uncaught_exception, dispatch_uid="dashboard.logs")
        if startup_wanted():
            start_console()
