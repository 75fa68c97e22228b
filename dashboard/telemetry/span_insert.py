"""Spans stored as one ``INSERT … RETURNING id`` per chunk of rows.

``QuerySet.bulk_create`` compiles every field of every row through the ORM's insert compiler;
for the span sink, which stores a handful of spans per gateway request, that compilation was
most of its CPU. Here the statement's text is built once per chunk size and each value is
prepared by its field (``get_db_prep_save``: JSON adapted as the backend wants it), so what is
stored is what ``bulk_create`` stores, ids included, on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.db import connection

from dashboard.telemetry.models import SpanRecord

__all__ = ["CHUNK", "insert_spans"]

# Rows per statement: 13 parameters each, well under SQLite's and PostgreSQL's limits.
CHUNK = 200


@cache
def _fields() -> tuple[Any, ...]:
    return tuple(f for f in SpanRecord._meta.concrete_fields if not f.primary_key)


@cache
def _statement(rows: int) -> str:
    quote = connection.ops.quote_name
    fields = _fields()
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    return (
        f"INSERT INTO {quote(SpanRecord._meta.db_table)} "
        f"({', '.join(quote(f.column) for f in fields)}) "
        f"VALUES {', '.join([one] * rows)} RETURNING {quote(SpanRecord._meta.pk.column)}"
    )


def insert_spans(rows: list[SpanRecord]) -> None:
    """Insert ``rows`` (unsaved) and set each one's id; the caller holds the transaction.
    Raises IntegrityError as ``bulk_create`` does when a span id is already stored."""
    fields = _fields()
    with connection.cursor() as cursor:
        for start in range(0, len(rows), CHUNK):
            chunk = rows[start : start + CHUNK]
            params = [
                f.get_db_prep_save(getattr(row, f.attname), connection)
                for row in chunk
                for f in fields
            ]
            cursor.execute(_statement(len(chunk)), params)
            ids = [r[0] for r in cursor.fetchall()]
            for row, pk in zip(chunk, ids, strict=True):
                row.pk = pk
                row._state.adding = False
                row._state.db = connection.alias
