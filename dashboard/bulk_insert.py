"""New rows stored with one ``INSERT … RETURNING id`` per chunk, their ids set.

``QuerySet.bulk_create`` compiles every field of every row through the ORM's insert compiler.
For the rows the gateway writes on every request (its spans, a new conversation's run, the
compress rows and the calls' record) that compiling cost more CPU than the database's own
work. Here the statement's text is built once per model and chunk size, and each value is
prepared by its field as ``bulk_create`` prepares it (``pre_save`` for defaults set at save,
``get_db_prep_save`` for JSON and dates as the backend wants them, a related row's id taken
from the row it names), so what is stored is what ``bulk_create`` stores, on SQLite and
PostgreSQL alike. No signals are sent (``bulk_create`` sends none either).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from django.apps import apps
from django.db import connections, models, router

__all__ = ["CHUNK_PARAMS", "insert_rows"]

# Parameters per statement, well under SQLite's (32,766) and PostgreSQL's (65,535) limits.
CHUNK_PARAMS = 4000


@cache
def _fields(label: str) -> tuple[Any, ...]:
    meta = apps.get_model(label)._meta
    return tuple(f for f in meta.concrete_fields if not f.primary_key and not f.generated)


@cache
def _statement(label: str, alias: str, rows: int) -> str:
    meta = apps.get_model(label)._meta
    quote = connections[alias].ops.quote_name
    one = "(" + ", ".join(["%s"] * len(_fields(label))) + ")"
    columns = ", ".join(quote(f.column) for f in _fields(label))
    return (
        f"INSERT INTO {quote(meta.db_table)} ({columns}) "
        f"VALUES {', '.join([one] * rows)} RETURNING {quote(meta.pk.column)}"
    )


def insert_rows(rows: Sequence[models.Model]) -> None:
    """Insert ``rows`` (unsaved, of one model, without ids) and set each one's id; the caller
    holds the transaction. Raises IntegrityError as ``bulk_create`` does (a unique value
    already stored), and ValueError for rows of mixed models or rows that have an id."""
    if not rows:
        return
    model = type(rows[0])
    if any(type(row) is not model for row in rows):
        raise ValueError(f"insert_rows takes rows of one model; the first is {model.__name__}")
    if any(row.pk is not None for row in rows):
        raise ValueError(f"insert_rows takes new {model.__name__} rows; one has an id already")
    alias = router.db_for_write(model)
    connection = connections[alias]
    label = model._meta.label
    fields = _fields(label)
    per = max(1, CHUNK_PARAMS // len(fields))
    ids: list[Any] = []
    with connection.cursor() as cursor:
        for start in range(0, len(rows), per):
            chunk = rows[start : start + per]
            params = []
            for row in chunk:
                row._prepare_related_fields_for_save(operation_name="insert_rows")
                params += [f.get_db_prep_save(f.pre_save(row, True), connection) for f in fields]
            cursor.execute(_statement(label, alias, len(chunk)), params)
            ids += [r[0] for r in cursor.fetchall()]
    # Only once every chunk went in, as bulk_create: a later chunk's failure leaves no row
    # holding an id its rolled-back insert gave it (the span sink saves such rows one by one).
    for row, pk in zip(rows, ids, strict=True):
        row.pk = pk
        row._state.adding = False
        row._state.db = alias
