"""A database outage, told from every other failure, and what the console answers during one.

The console database (Django's) or the Event Log may be away for a while: PostgreSQL
restarting, a connection it dropped, a SQLite file that cannot be opened. That is not a bug
of the page or request that met it, so it is answered 503 with ``Retry-After`` (the gateway
in the provider's error shape, pages with ``unavailable_page``), never a bare 500.
"""

from __future__ import annotations

import sqlite3
import sys
from typing import Any

from django import db
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.views import defaults

from scroll_core.errors import StoreUnavailable
from scroll_core.store.outage_cap import outage_cap

__all__ = ["RETRY_AFTER_S", "DatabaseOutageMiddleware", "database_unavailable", "server_error"]

# What a 503 asks the client to wait: a restart of a loopback PostgreSQL takes a second or two.
RETRY_AFTER_S = 2

try:  # psycopg is the optional "postgres" extra
    import psycopg

    from scroll_core.store.pg_outage import is_transient as _pg_transient

    _DRIVER_ERRORS: tuple[type[BaseException], ...] = (
        psycopg.OperationalError,
        psycopg.InterfaceError,
    )
except ImportError:  # pragma: no cover - the embedded install has no PostgreSQL driver
    _DRIVER_ERRORS = ()

    def _pg_transient(exc: BaseException) -> bool:
        return False


# SQLite's operational errors that mean the file cannot be reached, not a bad statement
# ("no such table", "database is locked" are not an outage).
_SQLITE_UNREACHABLE = ("unable to open", "disk i/o")


def _sqlite_unreachable(exc: sqlite3.OperationalError) -> bool:
    said = str(exc).lower()
    return any(words in said for words in _SQLITE_UNREACHABLE)


def _one_unavailable(exc: BaseException) -> bool:
    if isinstance(exc, StoreUnavailable):
        return True
    if _pg_transient(exc):
        # PostgreSQL's own word that it is away for now, whatever class the driver gives it:
        # a read-only database (InternalError), a revoked grant (ProgrammingError), a full
        # disk, as well as a lost connection.
        return True
    if isinstance(exc, sqlite3.OperationalError):
        return _sqlite_unreachable(exc)
    if isinstance(exc, (db.OperationalError, db.InterfaceError)):
        # Django wraps the driver's error: on SQLite only an unreachable file counts.
        cause = exc.__cause__
        return not isinstance(cause, sqlite3.Error) or (
            isinstance(cause, sqlite3.OperationalError) and _sqlite_unreachable(cause)
        )
    return isinstance(exc, _DRIVER_ERRORS)


def database_unavailable(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an error it was raised from) says a database cannot be reached
    now: Django's ``OperationalError``/``InterfaceError``, psycopg's, an error PostgreSQL
    classes as passing (``pg_outage.is_transient``: read-only, a revoked grant, disk full),
    SQLite's "unable to open"/"disk I/O", or the Event Log's ``StoreUnavailable``."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if _one_unavailable(exc):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def unavailable_page() -> HttpResponse:
    """The console's 503: rendered without a request (no context processor, which would
    read the database) and asking the browser to retry."""
    html = render_to_string("503.html", {"retry_after": RETRY_AFTER_S})
    response = HttpResponse(html, status=503)
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response


PAGE_OUTAGE_WAIT_S = 2.0


class DatabaseOutageMiddleware:
    """A view that met a database outage answers ``unavailable_page``, not a 500."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        # Someone is looking: wait PAGE_OUTAGE_WAIT_S for the Event Log's database, not the
        # whole budget runs wait (SCROLL_DB_OUTAGE_S), then say it is away.
        with outage_cap(PAGE_OUTAGE_WAIT_S):
            return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> Any:
        return unavailable_page() if database_unavailable(exception) else None


def server_error(request: HttpRequest, template_name: str = "500.html") -> HttpResponse:
    """``handler500``: an outage met outside a view (a middleware, the 404 page's context
    processor) is answered ``unavailable_page`` too; anything else is Django's 500."""
    if database_unavailable(sys.exc_info()[1]):
        return unavailable_page()
    return defaults.server_error(request, template_name)
