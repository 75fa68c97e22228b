"""Numbered schema migrations of the Event Log.

Each migration runs once, inside one transaction together with the row that records it in
``_scroll_migrations``. Shipped migrations are never edited: a later one adds columns, it
never renumbers or rewrites events.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

__all__ = ["APPEND_ONLY_MESSAGE", "MIGRATIONS", "migrate"]

APPEND_ONLY_MESSAGE = "scroll event log is append-only"


def m001_initial(db: sqlite3.Connection) -> None:
    db.execute(
        """
        CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id TEXT NOT NULL,
            agent_id TEXT NOT NULL DEFAULT 'main',
            kind TEXT NOT NULL,
            role TEXT,
            name TEXT,
            content TEXT NOT NULL,
            tool_call_id TEXT,
            tool_input TEXT,
            payload_ref TEXT,
            payload_size INTEGER,
            payload_media TEXT,
            headline TEXT,
            metadata TEXT NOT NULL DEFAULT '{}',
            created_at TEXT NOT NULL,
            tokens INTEGER NOT NULL,
            dedup_key TEXT,
            searchable INTEGER NOT NULL DEFAULT 1
        )
        """
    )
    db.execute(
        "CREATE UNIQUE INDEX events_dedup ON events(session_id, dedup_key) "
        "WHERE dedup_key IS NOT NULL"
    )
    db.execute("CREATE INDEX events_session_seq ON events(session_id, seq)")
    db.execute("CREATE INDEX events_agent_seq ON events(agent_id, seq)")
    db.execute("CREATE INDEX events_created_at ON events(created_at)")
    db.execute(
        "CREATE INDEX events_tool_call ON events(tool_call_id) WHERE tool_call_id IS NOT NULL"
    )
    # The database itself refuses to change history, whichever connection or tool asks.
    for op in ("UPDATE", "DELETE"):
        db.execute(
            f"""
            CREATE TRIGGER events_no_{op.lower()} BEFORE {op} ON events
            BEGIN
                SELECT RAISE(ABORT, '{APPEND_ONLY_MESSAGE}: {op} of events is not allowed');
            END
            """
        )
    # External-content FTS5 keyed by seq. Rows marked not searchable (the recall tool's own
    # cells) never enter the index, so search cannot match the agent's own queries.
    db.execute(
        """
        CREATE VIRTUAL TABLE events_fts USING fts5(
            content, headline, name,
            content='events', content_rowid='seq',
            tokenize='porter unicode61'
        )
        """
    )
    db.execute(
        """
        CREATE TRIGGER events_fts_insert AFTER INSERT ON events WHEN new.searchable = 1
        BEGIN
            INSERT INTO events_fts(rowid, content, headline, name)
            VALUES (new.seq, new.content, coalesce(new.headline, ''), coalesce(new.name, ''));
        END
        """
    )


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [m001_initial]


def migrate(db: sqlite3.Connection) -> list[str]:
    """Apply the migrations this database has not seen yet; return their names."""
    db.execute(
        "CREATE TABLE IF NOT EXISTS _scroll_migrations ("
        " name TEXT PRIMARY KEY, applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ')))"
    )
    applied = []
    for migration in MIGRATIONS:
        name = migration.__name__
        db.execute("BEGIN IMMEDIATE")
        try:
            seen = db.execute("SELECT 1 FROM _scroll_migrations WHERE name = ?", (name,)).fetchone()
            if seen:
                db.execute("ROLLBACK")
                continue
            migration(db)
            db.execute("INSERT INTO _scroll_migrations(name) VALUES (?)", (name,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        applied.append(name)
    return applied
