"""Riding out a PostgreSQL outage: which errors pass, whether a connection is still alive,
and how long to keep retrying.

A restart, a failover or ``pg_terminate_backend`` leaves every open connection dead without
telling its owner; it finds out at its next query. ``alive`` notices before that query (the
server's goodbye or the closed socket is already waiting on it), and ``retrying`` runs work
again on a fresh connection while the error is one that passes, for at most the outage
budget (``SCROLL_DB_OUTAGE_S``).
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from psycopg import pq

from ..errors import ConfigError, StoreUnavailable
from .outage_cap import current_cap

__all__ = [
    "DEFAULT_OUTAGE_S",
    "alive",
    "is_transient",
    "outage_budget_s",
    "ready",
    "retrying",
]

T = TypeVar("T")

DEFAULT_OUTAGE_S = 60.0
# Admin shutdown, crash shutdown, cannot connect now (starting up); serialization failure
# and deadlock (the transaction is safe to run again); read-only transaction (a standby
# being promoted, or default_transaction_read_only set for a maintenance window);
# insufficient privilege (a grant revoked for a while: a role being rotated, a REVOKE
# INSERT to freeze writes); disk full, out of memory, too many connections (the server is
# short of a resource an operator frees). Each is ridden out only for the outage budget, so
# a privilege that never comes back fails after SCROLL_DB_OUTAGE_S, with its message.
# Class 08 (connection exception) is matched by its prefix.
_TRANSIENT_SQLSTATES = frozenset(
    {"57P01", "57P02", "57P03", "40001", "40P01", "25006", "42501", "53100", "53200", "53300"}
)
_FIRST_WAIT_S = 0.05
_LONGEST_WAIT_S = 1.0


def outage_budget_s(env: dict[str, str] | None = None) -> float:
    """How long a database outage is ridden out before it is an error: ``SCROLL_DB_OUTAGE_S``
    seconds, 60 when unset."""
    raw = (os.environ if env is None else env).get("SCROLL_DB_OUTAGE_S", "").strip()
    if not raw:
        return DEFAULT_OUTAGE_S
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"SCROLL_DB_OUTAGE_S must be a number of seconds, not {raw!r}") from None
    if value < 0:
        raise ConfigError("SCROLL_DB_OUTAGE_S must not be negative")
    return value


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` says the database is away for now rather than that the work is wrong,
    so that running the work again is safe."""
    if isinstance(exc, StoreUnavailable):
        return not exc.outcome_unknown  # running it again might store it twice
    if not isinstance(exc, psycopg.Error):
        return False
    sqlstate = exc.sqlstate
    if sqlstate is not None:
        return sqlstate.startswith("08") or sqlstate in _TRANSIENT_SQLSTATES
    # No SQLSTATE: the client lost the server ("server closed the connection unexpectedly",
    # "the connection is closed"), which the server never got to classify.
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)


def alive(db: psycopg.Connection[Any]) -> bool:
    """Whether ``db`` can take a query, checked without a round trip: an idle connection has
    nothing to read unless the server said goodbye (a FATAL) or closed the socket."""
    if db.closed or db.broken:
        return False
    status = db.info.transaction_status
    if status in (pq.TransactionStatus.INERROR, pq.TransactionStatus.UNKNOWN):
        # A transaction the outage broke (its rollback failed too: "cannot exit pipeline
        # mode while busy"): every later query on it would fail; replace it.
        return False
    if status != pq.TransactionStatus.IDLE:
        return True  # in use by its owner (a transaction in progress): not ours to poke
    try:
        readable, _, _ = select.select([db.fileno()], [], [], 0)
    except (OSError, ValueError):
        return False
    # An idle session that asked for nothing and LISTENs to nothing has something to read
    # only when the server ended it (a FATAL, then EOF). Rarely it is a parameter report
    # after a configuration reload: replacing the connection then costs one connect.
    return not readable


def ready(db: psycopg.Connection[Any]) -> bool:
    """Whether a connection its caller owns outright (the writer under its lock, a thread's
    own reader) can take the caller's next query. Nobody else is using it, so a command
    still in progress or a pipeline still open is left over from a failure: an outage that
    broke a batch mid-pipeline leaves it ACTIVE with its pipeline ABORTED, and every later
    query on it fails ("cannot exit pipeline mode while busy") though its socket is fine.
    (A transaction its owner has open, INTRANS, is the owner's: nested use is allowed.)"""
    if db.closed or db.broken:
        return False
    if db.info.transaction_status == pq.TransactionStatus.ACTIVE:
        return False
    if db.info.pipeline_status != pq.PipelineStatus.OFF:
        return False
    return alive(db)


def retrying(
    work: Callable[[], T],
    *,
    budget_s: float,
    where: str,
    on_failure: Callable[[], None] = lambda: None,
) -> T:
    """``work()``, run again after a transient error (``on_failure`` first, to drop the dead
    connection) with a growing pause, until it succeeds, fails for good, or ``budget_s`` has
    passed since the first failure: then ``StoreUnavailable``."""
    cap = current_cap()
    if cap is not None:
        budget_s = min(budget_s, cap)
    deadline: float | None = None
    wait = _FIRST_WAIT_S
    while True:
        try:
            return work()
        except Exception as exc:
            if not is_transient(exc):
                raise
            on_failure()
            now = time.monotonic()
            deadline = now + budget_s if deadline is None else deadline
            if now + wait > deadline:
                raise StoreUnavailable(
                    f"{where} did not answer for {budget_s:g} s: {exc}".strip()
                ) from exc
        time.sleep(wait)
        wait = min(wait * 2, _LONGEST_WAIT_S)
