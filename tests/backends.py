"""Helpers for tests that run on both Event Log backends (the ``store`` fixture)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

# What a database refusal looks like on either backend, raised by a raw connection.
DB_ERRORS: tuple[type[Exception], ...] = (sqlite3.DatabaseError, psycopg.Error)


@contextmanager
def outside_connection(store: Any) -> Iterator[Any]:
    """A plain connection to the store's database that is not the store's own: on SQLite a
    new connection to the file, on PostgreSQL one as the (superuser) URL the store opened."""
    if store.backend == "sqlite":
        db = sqlite3.connect(store.path, isolation_level=None)
    else:
        db = psycopg.connect(store.url, autocommit=True)
    try:
        yield db
    finally:
        db.close()


def mark(store: Any) -> str:
    """The parameter mark of the store's SQL dialect."""
    return "?" if store.backend == "sqlite" else "%s"
