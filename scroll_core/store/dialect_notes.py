"""What ``ms.schema()`` tells a model about the SQL dialect ``sql_query`` speaks."""

from __future__ import annotations

from typing import Any

__all__ = ["POSTGRES_NOTES", "SQLITE_NOTES", "dialect_notes"]

POSTGRES_NOTES: dict[str, Any] = {
    "dialect": "postgresql",
    "notes": (
        "PostgreSQL SQL. Placeholders: ? (a list) or :name (a dict) as on SQLite, or %s / "
        "%(name)s. created_at, metadata and tool_input are text: substr(created_at, 1, 10) "
        "gives the day; use metadata::jsonb ->> 'key' rather than json_extract; string "
        "concatenation is ||; the day difference of two dates is (d2::date - d1::date)."
    ),
    "examples": [
        "SELECT seq, content FROM events WHERE substr(created_at, 1, 10) BETWEEN ? AND ? "
        "ORDER BY seq",
        "SELECT substr(created_at, 1, 10) AS day, count(*) FROM events GROUP BY 1 ORDER BY 1",
        "SELECT seq, metadata::jsonb ->> 'speaker' AS speaker FROM events "
        "WHERE kind = 'context_msg' ORDER BY seq DESC LIMIT 20",
    ],
}
SQLITE_NOTES: dict[str, Any] = {
    "dialect": "sqlite",
    "notes": "SQLite SQL with ? (a list) or :name (a dict) placeholders; json_extract().",
    "examples": [
        "SELECT seq, content FROM events WHERE substr(created_at, 1, 10) BETWEEN ? AND ? "
        "ORDER BY seq",
        "SELECT substr(created_at, 1, 10) AS day, count(*) FROM events GROUP BY 1 ORDER BY 1",
        "SELECT seq, json_extract(metadata, '$.speaker') AS speaker FROM events "
        "WHERE kind = 'context_msg' ORDER BY seq DESC LIMIT 20",
    ],
}


def dialect_notes(backend: str) -> dict[str, Any]:
    """The dialect, a note and examples for a store's ``backend``."""
    return POSTGRES_NOTES if backend == "postgres" else SQLITE_NOTES
