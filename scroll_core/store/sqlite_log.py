"""The Event Log: an append-only, searchable record of everything an agent saw and did.

Every message, model turn and tool result is appended under an immutable, monotonically
increasing ``seq``. The database refuses UPDATE and DELETE on its own (see ``sqlite_schema``),
large contents move to the content-addressed payload store behind lazy handles, and an
FTS5 index over content and headline answers BM25 searches.

One write path, many readers: all writes go through a single connection guarded by a lock
and ``BEGIN IMMEDIATE`` (so several processes can share one file under WAL); each thread
reads through its own ``query_only`` connection.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from operator import add, itemgetter
from pathlib import Path
from typing import Any

from ..errors import (
    AppendOnlyViolation,
    EventLogError,
    InvalidEvent,
    SearchIndexCorrupt,
    SearchTimeout,
)
from ..telemetry import span
from ..tokens import TokenCounter
from .json_insert import JSON_ROWS_SELECT, json_insert_works, json_rows
from .log_common import (
    DEFAULT_PAYLOAD_THRESHOLD,
    ROW_VALUES,
    _EventLogBase,
    _plan,
    _Row,
    coverage_problems,
    keys_by_session,
)
from .payloads import PayloadStore
from .records import Seqs
from .schema_common import APPEND_ONLY_MESSAGE
from .search import SearchTuning
from .sqlite_bm25 import index_sizes, record_totals, totals_problems
from .sqlite_schema import migrate
from .sqlite_search import SQLITE

__all__ = ["BUSY_TIMEOUT_S", "EventLog"]

BUSY_TIMEOUT_S = 30.0
# SQLite VM instructions between two checks of a search's time or step limit.
_PROGRESS_STEPS = 1000
# What SQLite says when a (session_id, dedup_key) pair is already taken.
_DEDUP_CONFLICT = "UNIQUE constraint failed: events.session_id, events.dedup_key"
_AGENT_ID = itemgetter(1)  # of a row's values (session_id, agent_id, ...)
_COLUMNS = (
    "session_id, agent_id, kind, role, name, content, tool_call_id, tool_input, payload_ref, "
    "payload_size, payload_media, headline, metadata, created_at, dedup_key, searchable, tokens"
)
_INSERT_VALUES = f"INSERT INTO events ({_COLUMNS}) VALUES ({', '.join('?' * 17)})"
_INSERT_JSON = f"INSERT INTO events ({_COLUMNS}) {JSON_ROWS_SELECT}"
# From this many events an append reads the index's sizes before it inserts, so that the BM25
# totals of a batch of one agent need not read its events back (``record_totals``).
_SIZES_FROM = 64
_SEARCHABLE = itemgetter(15)  # of a row's values
# Rows per JSON statement: the bench's batch, and a bounded parameter (at most 1,000 rows
# of up to the payload threshold each, well under SQLite's one-gigabyte limit).
_JSON_ROWS = 1000


class EventLog(_EventLogBase):
    """The SQLite Event Log: open, create or migrate the log at ``path``.

    ``payload_dir`` defaults to a ``payloads`` folder beside the database. Content longer
    than ``payload_threshold`` characters is stored whole in the payload store and the row
    keeps the first ``payload_threshold`` characters as its preview.
    """

    backend = "sqlite"
    _dialect = SQLITE

    @property
    def location(self) -> str:
        """Where the log is, for messages: its file."""
        return str(self.path)

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        payload_dir: str | os.PathLike[str] | None = None,
        payload_threshold: int = DEFAULT_PAYLOAD_THRESHOLD,
        token_counter: TokenCounter | None = None,
        search_tuning: SearchTuning | None = None,
        token_thread: bool = True,
    ) -> None:
        self._init_common(payload_threshold, token_counter, search_tuning, token_thread)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.payloads = PayloadStore(
            Path(payload_dir) if payload_dir else self.path.parent / "payloads"
        )
        self._write_lock = threading.RLock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._closed = False
        self._writer = self._connect()
        self._writer.execute("PRAGMA journal_mode=WAL")
        migrate(self._writer)
        self._json_insert = json_insert_works(self._writer)

    # ------------------------------------------------------------------ connections
    def _connect(self, *, readonly: bool = False) -> sqlite3.Connection:
        db = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_S
        )
        db.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        db.execute("PRAGMA synchronous=NORMAL")
        if readonly:
            db.execute("PRAGMA query_only=1")
        return db

    def _reader(self) -> sqlite3.Connection:
        if self._closed:
            raise EventLogError(f"event log {self.path} is closed")
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = self._connect(readonly=True)
            self._local.db = db
            with self._write_lock:  # only to guard the list; close() releases them all
                self._readers.append(db)
        return db

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        if self._closed:
            raise EventLogError(f"event log {self.path} is closed")
        with self._write_lock:
            db = self._writer
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _append_numbered(self, numbered: list[tuple[int, Mapping[str, Any]]]) -> Seqs:
        seqs = Seqs()
        prepared = self._prepare_batch(numbered)
        try:
            with self._write() as db:
                agents: set[str] = set()
                top = since = _sequence(db)
                before = index_sizes(db) if len(numbered) >= _SIZES_FROM else None
                rows: list[_Row] = []
                counts: list[int] = []
                indexed = [0]  # the searchable events inserted
                for chunk, (chunk_rows, pending) in enumerate(prepared.chunks):
                    if isinstance(pending, Future) and not pending.done() and rows:
                        # Insert what is counted while the token thread counts the rest.
                        top = self._insert_rows(db, rows, counts, top, seqs, indexed)
                        agents.update(map(_AGENT_ID, map(ROW_VALUES, rows)))
                        rows, counts = [], []
                    rows += chunk_rows
                    counts += prepared.counts(chunk)
                if rows:
                    top = self._insert_rows(db, rows, counts, top, seqs, indexed)
                    agents.update(map(_AGENT_ID, map(ROW_VALUES, rows)))
                # Under BEGIN IMMEDIATE this connection is the only writer, so AUTOINCREMENT
                # hands out consecutive seqs; check it (once: seqs only grow, so the count
                # matching means no gap) rather than trust it.
                if _sequence(db) != top:
                    raise EventLogError("seq allocation was not contiguous; batch rolled back")
                if seqs.inserted:
                    record_totals(db, agents, since=since, before=before, indexed=indexed[0])
        except sqlite3.IntegrityError as exc:
            if APPEND_ONLY_MESSAGE in str(exc):
                raise AppendOnlyViolation(str(exc)) from exc
            raise InvalidEvent(f"the log refused the batch: {exc}") from exc
        finally:
            prepared.cancel()
        return seqs

    def _insert_rows(
        self,
        db: sqlite3.Connection,
        rows: list[_Row],
        counts: list[int],
        top: int,
        seqs: Seqs,
        indexed: list[int],
    ) -> int:
        """INSERT what is new in ``rows`` after seq ``top``; add every row's seq to ``seqs``
        (the existing seq for a repeated dedup key), the new ones to ``seqs.inserted`` and
        the new searchable ones to ``indexed[0]``; return the seq the new rows should end
        at. Runs inside the caller's transaction."""
        # Fast path: insert everything at once. A repeated dedup key (a re-import, or a key
        # repeated inside the batch) trips the unique index and stops executemany at that
        # row; the rows before it are in, and the rest are resolved key by key. (A SAVEPOINT
        # would be simpler, but it makes FTS5 flush its pending index on every chunk.)
        try:
            # Each row's values and its count, ``values + (count,)``, made in C.
            self._execute_insert(db, list(map(add, map(ROW_VALUES, rows), zip(counts))))
        except sqlite3.IntegrityError as exc:
            if _DEDUP_CONFLICT not in str(exc):
                raise
            done = _sequence(db) - top
            rest = rows[done:]
            existing = _existing_keys(db, rest)
            fresh, rest_slots = _plan(rest, existing)
            self._execute_insert(db, [(*rest[i].values, counts[done + i]) for i in fresh])
            indexed[0] += sum(_SEARCHABLE(row.values) for row in rows[:done])
            indexed[0] += sum(_SEARCHABLE(rest[i].values) for i in fresh)
            slots = [*range(done), *(s if isinstance(s, tuple) else done + s for s in rest_slots)]
            inserted = done + len(fresh)
            seqs.extend(existing[s] if isinstance(s, tuple) else top + 1 + s for s in slots)
        else:
            inserted = len(rows)
            indexed[0] += sum(map(_SEARCHABLE, map(ROW_VALUES, rows)))
            seqs.extend(range(top + 1, top + 1 + inserted))
        seqs.inserted += inserted
        return top + inserted

    def _execute_insert(self, db: sqlite3.Connection, values: list[tuple[Any, ...]]) -> None:
        """INSERT ``values`` (rows of ``_COLUMNS``) in order, ``_JSON_ROWS`` at a time: as
        one JSON array read back by ``json_each`` when it holds them exactly
        (``json_rows``), else row by row. (A refused row stops the insert as executemany
        does: the statements before it are in, its own is not.)"""
        for i in range(0, len(values), _JSON_ROWS):
            part = values[i : i + _JSON_ROWS]
            rows = json_rows(part) if self._json_insert else None
            if rows is None:
                db.executemany(_INSERT_VALUES, part)
            else:
                db.execute(_INSERT_JSON, (rows,))

    # ------------------------------------------------------------------ search
    @contextmanager
    def _limited(
        self, time_limit_s: float | None, step_limit: int | None
    ) -> Iterator[sqlite3.Connection]:
        """This thread's reader, interrupted once what runs inside the block passes either
        limit (checked every ``_PROGRESS_STEPS`` VM instructions)."""
        db = self._reader()
        if time_limit_s is None and step_limit is None:
            yield db
            return
        deadline = None if time_limit_s is None else time.monotonic() + max(0.0, time_limit_s)
        steps = 0

        def over() -> int:
            nonlocal steps
            steps += _PROGRESS_STEPS
            if step_limit is not None and steps > step_limit:
                return 1
            return 1 if deadline is not None and time.monotonic() >= deadline else 0

        db.set_progress_handler(over, _PROGRESS_STEPS)
        try:
            yield db
        except sqlite3.OperationalError as exc:
            if "interrupted" not in str(exc):
                raise
            limit = f"{time_limit_s:g} s" if time_limit_s is not None else ""
            if step_limit is not None and steps > step_limit:
                limit = f"{step_limit} SQLite steps"
            raise SearchTimeout(limit) from None
        finally:
            db.set_progress_handler(None, 0)

    # ------------------------------------------------------------------ FTS maintenance
    def fts_check(self) -> int:
        """Check the full-text index; return how many events it covers.

        Raises ``SearchIndexCorrupt`` when FTS5's own integrity check fails or when the
        index does not hold exactly the searchable events. (FTS5's check against the content
        table cannot be used: events marked not searchable are meant to be missing.)
        """
        with span("scroll.fts", operation="check"), self._write() as db:
            try:
                db.execute("INSERT INTO events_fts(events_fts) VALUES ('integrity-check')")
                missing = db.execute(
                    "SELECT count(*), min(seq) FROM events WHERE searchable = 1 "
                    "AND seq NOT IN (SELECT id FROM events_fts_docsize)"
                ).fetchone()
                extra = db.execute(
                    "SELECT count(*), min(id) FROM events_fts_docsize "
                    "WHERE id NOT IN (SELECT seq FROM events WHERE searchable = 1)"
                ).fetchone()
                covered = db.execute("SELECT count(*) FROM events_fts_docsize").fetchone()[0]
                wrong = totals_problems(db)
            except sqlite3.DatabaseError as exc:
                raise SearchIndexCorrupt(
                    f"the full-text index failed its integrity check ({exc}); "
                    "rebuild it with `manage.py scroll_fts rebuild`"
                ) from exc
        problems = coverage_problems(missing, extra)
        if wrong:
            problems.append(f"{wrong} agent(s) whose BM25 totals do not match the index")
        if problems:
            raise SearchIndexCorrupt(
                "the full-text index does not match the events: "
                + "; ".join(problems)
                + "; rebuild it with `manage.py scroll_fts rebuild`"
            )
        return int(covered)

    def fts_rebuild(self) -> int:
        """Rebuild the full-text index from the searchable events; return how many it holds.

        FTS5's own 'rebuild' would index every row of the content table, the recall tool's
        unsearchable cells included, so the index is emptied and refilled from the events
        the insert trigger would have indexed. Events are only read.
        """
        with span("scroll.fts", operation="rebuild"), self._write() as db:
            db.execute("INSERT INTO events_fts(events_fts) VALUES ('delete-all')")
            cursor = db.execute(
                "INSERT INTO events_fts(rowid, content, headline, name) "
                "SELECT seq, content, coalesce(headline, ''), coalesce(name, '') "
                "FROM events WHERE searchable = 1 ORDER BY seq"
            )
            return int(cursor.rowcount)

    def fts_optimize(self) -> None:
        """Merge the full-text index's segments into one (faster queries, after bulk loads)."""
        with span("scroll.fts", operation="optimize"), self._write() as db:
            db.execute("INSERT INTO events_fts(events_fts) VALUES ('optimize')")


def _existing_keys(db: sqlite3.Connection, rows: list[_Row]) -> dict[tuple[str, str], int]:
    """The seqs of dedup keys in ``rows`` that the log already holds."""
    found: dict[tuple[str, str], int] = {}
    for session_id, ordered in keys_by_session(rows).items():
        for i in range(0, len(ordered), 500):
            part = ordered[i : i + 500]
            marks = ", ".join("?" * len(part))
            sql = (
                f"SELECT dedup_key, seq FROM events WHERE session_id = ? AND dedup_key IN ({marks})"
            )
            for key, seq in db.execute(sql, (session_id, *part)):
                found[(session_id, key)] = seq
    return found


def _sequence(db: sqlite3.Connection) -> int:
    row = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
    return int(row[0]) if row else 0
