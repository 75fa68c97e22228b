"""Numbered schema migrations of the Event Log on SQLite (see ``pg_schema`` for PostgreSQL).

Each migration runs once, inside one transaction together with the row that records it in
``_scroll_migrations``. Shipped migrations are never edited: a later one adds columns, it
never renumbers or rewrites events.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from .schema_common import APPEND_ONLY_MESSAGE

__all__ = ["MIGRATIONS", "migrate"]

# Worded as SQLite words the unique index's own refusal, so a writer that reads "this dedup
# key is taken" from the error keeps doing so when the trigger below answers first.
_DEDUP_TAKEN = (
    "UNIQUE constraint failed: events.session_id, events.dedup_key "
    "(a repeated dedup key never replaces its event)"
)


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


def m002_session_stats(db: sqlite3.Connection) -> None:
    """A per-session summary kept by the append path, so listing sessions reads one row per
    session instead of grouping every event.

    How the database keeps it honest. SQLite triggers cannot see who is calling, so the guard
    does not ask "is this the events trigger?" but "is this change exactly what the newest
    event implies?":

    - a row may only be INSERTed for the session of the newest event, when that session has
      no row yet, and with exactly that event's figures (events = 1, first = last = its seq);
    - an UPDATE may only add the newest event to its own session's row (events + 1, tokens
      + its tokens, last_seq moves forward to its seq, dates widened to include it, the rest
      unchanged);
    - DELETE is always refused.

    Once the events trigger has run, the newest event is counted and its session's
    ``last_seq`` already equals its seq, so no later statement from outside can satisfy
    either rule: a tamper is refused, and the only accepted writes are the ones the events
    trigger makes inside the appending transaction (all-or-nothing batches and dedup, which
    never reaches the trigger, stay exact for free). The trigger is two plain statements
    rather than an UPSERT so that a forged ``INSERT OR REPLACE`` cannot pass as the insert
    half of an upsert: REPLACE deletes without firing delete triggers.

    ``agent_id`` is the smallest agent id among the session's events, as ``min()`` over a
    GROUP BY would give.

    The same REPLACE gap is closed on ``events`` itself: ``INSERT OR REPLACE`` with a taken
    seq or a taken (session_id, dedup_key) would delete an event without firing the DELETE
    trigger of m001, so an INSERT must now move ``seq`` forward and must not repeat a key.
    """
    db.execute(
        """
        CREATE TABLE session_stats (
            session_id TEXT PRIMARY KEY,
            agent_id TEXT NOT NULL,
            events INTEGER NOT NULL,
            tokens INTEGER NOT NULL,
            first_seq INTEGER NOT NULL,
            last_seq INTEGER NOT NULL,
            first_at TEXT NOT NULL,
            last_at TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX session_stats_last_seq ON session_stats(last_seq)")
    db.execute(
        """
        INSERT INTO session_stats
        SELECT session_id, min(agent_id), count(*), coalesce(sum(tokens), 0), min(seq),
               max(seq), min(created_at), max(created_at)
        FROM events GROUP BY session_id
        """
    )
    # new.seq is -1 in a BEFORE INSERT trigger when the caller leaves seq to AUTOINCREMENT.
    db.execute(
        f"""
        CREATE TRIGGER events_no_replace BEFORE INSERT ON events
        WHEN new.seq <> -1 AND new.seq <= coalesce((SELECT max(seq) FROM events), 0)
        BEGIN
            SELECT RAISE(ABORT, '{APPEND_ONLY_MESSAGE}: an INSERT may not reuse a seq');
        END
        """
    )
    db.execute(
        f"""
        CREATE TRIGGER events_no_replace_dedup BEFORE INSERT ON events
        WHEN new.dedup_key IS NOT NULL AND EXISTS (
            SELECT 1 FROM events WHERE session_id = new.session_id AND dedup_key = new.dedup_key
        )
        BEGIN
            SELECT RAISE(ABORT, '{_DEDUP_TAKEN}');
        END
        """
    )
    db.execute(
        """
        CREATE TRIGGER events_session_stats AFTER INSERT ON events
        BEGIN
            INSERT INTO session_stats
            SELECT new.session_id, new.agent_id, 1, new.tokens, new.seq, new.seq,
                   new.created_at, new.created_at
            WHERE NOT EXISTS (SELECT 1 FROM session_stats WHERE session_id = new.session_id);
            UPDATE session_stats SET
                agent_id = min(agent_id, new.agent_id),
                events = events + 1,
                tokens = tokens + new.tokens,
                last_seq = new.seq,
                first_at = min(first_at, new.created_at),
                last_at = max(last_at, new.created_at)
            WHERE session_id = new.session_id AND last_seq < new.seq;
        END
        """
    )
    refused = f"{APPEND_ONLY_MESSAGE}: session_stats only follows appended events"
    db.execute(
        f"""
        CREATE TRIGGER session_stats_insert_guard BEFORE INSERT ON session_stats
        WHEN NOT (
            new.last_seq = (SELECT max(seq) FROM events)
            AND new.events = 1 AND new.first_seq = new.last_seq
            AND EXISTS (
                SELECT 1 FROM events AS e
                WHERE e.seq = new.last_seq AND e.session_id = new.session_id
                  AND e.agent_id = new.agent_id AND e.tokens = new.tokens
                  AND e.created_at = new.first_at AND e.created_at = new.last_at
            )
            AND NOT EXISTS (SELECT 1 FROM session_stats WHERE session_id = new.session_id)
        )
        BEGIN
            SELECT RAISE(ABORT, '{refused} (INSERT refused)');
        END
        """
    )
    db.execute(
        f"""
        CREATE TRIGGER session_stats_update_guard BEFORE UPDATE ON session_stats
        WHEN NOT (
            new.session_id = old.session_id
            AND new.last_seq = (SELECT max(seq) FROM events) AND new.last_seq > old.last_seq
            AND new.first_seq = old.first_seq AND new.events = old.events + 1
            AND EXISTS (
                SELECT 1 FROM events AS e
                WHERE e.seq = new.last_seq AND e.session_id = old.session_id
                  AND new.tokens = old.tokens + e.tokens
                  AND new.agent_id = min(old.agent_id, e.agent_id)
                  AND new.first_at = min(old.first_at, e.created_at)
                  AND new.last_at = max(old.last_at, e.created_at)
            )
        )
        BEGIN
            SELECT RAISE(ABORT, '{refused} (UPDATE refused)');
        END
        """
    )
    db.execute(
        f"""
        CREATE TRIGGER session_stats_no_delete BEFORE DELETE ON session_stats
        BEGIN
            SELECT RAISE(ABORT, '{refused} (DELETE refused)');
        END
        """
    )


def m003_fts_agent_stats(db: sqlite3.Connection) -> None:
    """What BM25 needs to count its statistics over one agent's events (``sqlite_bm25``):
    FTS5's own ``bm25()`` counts them over every agent's, so an agent's scores moved with
    other agents' words.

    - ``events_fts_instances``: the full-text index read by term (``fts5vocab``,
      ``instance``): every occurrence of a term, with its event, column and place. It holds
      nothing of its own (it reads ``events_fts``'s records).
    - ``events_fts_agent_totals``: per agent, how many of its events the index holds and
      their length in tokens, counted up to ``last_seq``; filled here from the index as it
      stands, then kept by the appending transaction (``sqlite_bm25.record_totals``).

    The totals are guarded as far as SQL can check them: a row only ever counts up to the
    newest seq, its ``docs`` must be the agent's searchable events up to there, and it is
    never deleted (the token sum is FTS5's, which a trigger cannot decode, so it is not
    checked). Both names start with ``events_fts``, so SQL a model writes is refused them
    as it is the index itself.
    """
    from .sqlite_bm25 import TOTALS, doc_length

    db.execute("CREATE VIRTUAL TABLE events_fts_instances USING fts5vocab(events_fts, instance)")
    db.execute(
        f"""
        CREATE TABLE {TOTALS} (
            agent_id TEXT PRIMARY KEY,
            docs INTEGER NOT NULL,
            tokens INTEGER NOT NULL,
            last_seq INTEGER NOT NULL
        )
        """
    )
    totals: dict[str, list[int]] = {}
    for agent, size in db.execute(
        "SELECT e.agent_id, d.sz FROM events e JOIN events_fts_docsize d ON d.id = e.seq "
        "WHERE e.searchable = 1"
    ):
        entry = totals.setdefault(agent, [0, 0])
        entry[0] += 1
        entry[1] += doc_length(size)
    top = db.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0]
    db.executemany(
        f"INSERT INTO {TOTALS} (agent_id, docs, tokens, last_seq) VALUES (?, ?, ?, ?)",
        [(agent, docs, tokens, top) for agent, (docs, tokens) in sorted(totals.items())],
    )
    refused = f"{APPEND_ONLY_MESSAGE}: {TOTALS} only follows appended events"
    db.execute(
        f"""
        CREATE TRIGGER {TOTALS}_insert_guard BEFORE INSERT ON {TOTALS}
        WHEN NOT (
            new.last_seq = (SELECT max(seq) FROM events)
            AND new.docs = (
                SELECT count(*) FROM events
                WHERE agent_id = new.agent_id AND searchable = 1 AND seq <= new.last_seq
            )
            AND NOT EXISTS (SELECT 1 FROM {TOTALS} WHERE agent_id = new.agent_id)
        )
        BEGIN
            SELECT RAISE(ABORT, '{refused} (INSERT refused)');
        END
        """
    )
    db.execute(
        f"""
        CREATE TRIGGER {TOTALS}_update_guard BEFORE UPDATE ON {TOTALS}
        WHEN NOT (
            new.agent_id = old.agent_id
            AND new.last_seq = (SELECT max(seq) FROM events) AND new.last_seq >= old.last_seq
            AND new.docs = old.docs + (
                SELECT count(*) FROM events
                WHERE agent_id = old.agent_id AND searchable = 1
                  AND seq > old.last_seq AND seq <= new.last_seq
            )
        )
        BEGIN
            SELECT RAISE(ABORT, '{refused} (UPDATE refused)');
        END
        """
    )
    db.execute(
        f"""
        CREATE TRIGGER {TOTALS}_no_delete BEFORE DELETE ON {TOTALS}
        BEGIN
            SELECT RAISE(ABORT, '{refused} (DELETE refused)');
        END
        """
    )


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    m001_initial,
    m002_session_stats,
    m003_fts_agent_stats,
]


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
