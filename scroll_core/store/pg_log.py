"""The Event Log on PostgreSQL: one history shared by every machine.

The same ``EventStore`` as the SQLite ``EventLog``, with the same guarantees kept by the
database (see ``pg_schema``): append-only by trigger and by grants, seqs numbered under a
transaction-scoped advisory lock so that commit order is seq order, dedup per session,
all-or-nothing batches, the per-session summary, and payloads content-addressed in a
``bytea`` table every machine reaches.

Search ranks with BM25 computed in SQL (``pg_search``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import date, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import errors as pgerrors

from ..errors import (
    AppendOnlyViolation,
    EventLogError,
    EventNotFound,
    InvalidEvent,
    PayloadCorrupt,
    PayloadMissing,
    SearchIndexCorrupt,
    SearchTimeout,
)
from ..telemetry import span
from ..tokens import TokenCounter
from .payloads import check_ref, ref_of
from .pg_schema import APPEND_ONLY_SQLSTATE, SEQ_LOCK, migrate
from .pg_search import PG_DIALECT
from .search import SearchFilters, SearchTuning, run_search
from .sqlite_log import (
    DEFAULT_PAYLOAD_THRESHOLD,
    Event,
    Hit,
    Seqs,
    SessionSummary,
    _EventLogBase,
    _plan,
    _Row,
)
from .sqlite_schema import sqlite_int

__all__ = ["PgEventLog", "PgPayloadStore", "redact"]

_EVENT_COLUMNS = (
    "seq, session_id, agent_id, kind, role, name, content, tool_call_id, tool_input, "
    "payload_ref, payload_size, payload_media, headline, metadata, created_at, tokens, dedup_key"
)
_INSERT_COLUMNS = (
    "seq, session_id, agent_id, kind, role, name, content, tool_call_id, tool_input, "
    "payload_ref, payload_size, payload_media, headline, metadata, created_at, dedup_key, "
    "searchable, tokens"
)
_SUMMARY_SELECT = (
    "SELECT session_id, agent_id, events, tokens, first_seq, last_seq, first_at, last_at "
    "FROM session_stats"
)
# Batches at least this long are sent with COPY rather than one INSERT per row.
_COPY_FROM = 8


def redact(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    return urlunsplit(parts._replace(netloc=netloc[0].split(":")[0] + ":***@" + netloc[1]))


class PgPayloadStore:
    """Payloads in the ``payloads`` table, one row per sha256; reads check the hash."""

    def __init__(self, log: PgEventLog) -> None:
        self._log = log

    def put(self, data: bytes) -> str:
        """Store ``data`` on its own (the append path stores payloads inside its batch)."""
        ref = ref_of(data)
        with self._log._write() as db:
            _put_payloads(db, {ref: data})
        return ref

    def get(self, ref: str) -> bytes:
        check_ref(ref)
        row = self._log._reader().execute("SELECT data FROM payloads WHERE ref = %s", (ref,))
        found = row.fetchone()
        if found is None:
            raise PayloadMissing(ref, "no such row in the payloads table")
        data = bytes(found[0])
        if ref_of(data) != ref:
            raise PayloadCorrupt(ref, "the stored bytes do not match their sha256")
        return data

    def exists(self, ref: str) -> bool:
        check_ref(ref)
        row = self._log._reader().execute("SELECT 1 FROM payloads WHERE ref = %s", (ref,))
        return row.fetchone() is not None


class PgEventLog(_EventLogBase):
    """The Event Log in the PostgreSQL database at ``url`` (created or migrated on open).

    ``reader_url`` is the login ``ms.sql_query`` runs model SQL as (a member of
    ``scroll_reader``); without it, sql_query on this log is refused.

    Content longer than ``payload_threshold`` characters is stored whole in the
    ``payloads`` table and the row keeps the first ``payload_threshold`` characters. So is
    content with NUL characters, which PostgreSQL text cannot hold: the row keeps it with
    each NUL shown as U+FFFD, and the payload keeps it exactly.
    """

    backend = "postgres"
    _text_holds_nul = False

    def __init__(
        self,
        url: str,
        *,
        payload_threshold: int = DEFAULT_PAYLOAD_THRESHOLD,
        token_counter: TokenCounter | None = None,
        search_tuning: SearchTuning | None = None,
        reader_url: str | None = None,
    ) -> None:
        self._init_common(payload_threshold, token_counter, search_tuning)
        self.url = url
        # A login granted ``scroll_reader`` (and nothing more): ``ms.sql_query`` runs model
        # SQL as it, under row-level security (see ``pg_schema.m002_ms_reader``).
        self.reader_url = reader_url
        self.location = redact(url)
        self.payloads = PgPayloadStore(self)
        self._write_lock = threading.RLock()
        self._local = threading.local()
        self._readers: list[psycopg.Connection[Any]] = []
        self._closed = False
        self._writer = self._connect()
        migrate(self._writer)

    # ------------------------------------------------------------------ connections
    def _connect(self, *, readonly: bool = False) -> psycopg.Connection[Any]:
        # Reader connections cannot write even by mistake: every transaction is read-only.
        # JIT compiling costs more than these short queries ever run.
        options = "-c jit=off" + (" -c default_transaction_read_only=on" if readonly else "")
        try:
            return psycopg.connect(self.url, autocommit=True, options=options)
        except psycopg.OperationalError as exc:
            raise EventLogError(f"cannot connect to {self.location}: {exc}") from None

    def _reader(self) -> psycopg.Connection[Any]:
        if self._closed:
            raise EventLogError(f"event log {self.location} is closed")
        db: psycopg.Connection[Any] | None = getattr(self._local, "db", None)
        if db is None or db.closed:
            db = self._connect(readonly=True)
            self._local.db = db
            with self._write_lock:
                self._readers.append(db)
        return db

    @contextmanager
    def _write(self) -> Iterator[psycopg.Connection[Any]]:
        if self._closed:
            raise EventLogError(f"event log {self.location} is closed")
        with self._write_lock:
            if self._writer.closed:
                self._writer = self._connect()
            with self._writer.transaction():
                yield self._writer

    # ------------------------------------------------------------------ writing
    def _prepare_chunk(self, chunk: list[tuple[int, Mapping[str, Any]]]) -> list[_Row]:
        # Payloads are written inside the appending transaction (see _append_numbered).
        return [self._prepare(i, event) for i, event in chunk]

    def _append_numbered(self, numbered: list[tuple[int, Mapping[str, Any]]]) -> Seqs:
        prepared = self._prepare_batch(numbered)
        try:
            with self._write() as db:
                # Counts are resolved as the rows stream to the server: counting a later
                # chunk on the worker thread overlaps the COPY of an earlier one.
                return self._insert_rows(db, prepared.rows, prepared.count_of)
        except pgerrors.Error as exc:
            if exc.sqlstate == APPEND_ONLY_SQLSTATE:
                raise AppendOnlyViolation(str(exc).strip()) from exc
            # A trigger's RAISE EXCEPTION is PostgreSQL's RAISE(ABORT): the database refused
            # a row, as a constraint does; on SQLite both are IntegrityError -> InvalidEvent.
            refused = pgerrors.IntegrityError | pgerrors.DataError | pgerrors.RaiseException
            if isinstance(exc, refused):
                raise InvalidEvent(f"the log refused the batch: {exc}".strip()) from exc
            raise
        finally:
            prepared.cancel()

    def _insert_rows(
        self, db: psycopg.Connection[Any], rows: list[_Row], count_of: Callable[[int], int]
    ) -> Seqs:
        # The same lock the numbering trigger takes, taken first so that the dedup lookup
        # and the numbering see one unchanging log until this transaction ends.
        db.execute("SELECT pg_advisory_xact_lock(%s)", (SEQ_LOCK,))
        existing = _existing_keys(db, rows)
        fresh, slots = _plan(rows, existing)
        top = int(db.execute("SELECT coalesce(max(seq), 0) FROM events").fetchall()[0][0])
        payloads = {row.values[8]: row.payload for row in (rows[i] for i in fresh) if row.payload}
        if payloads:
            _put_payloads(db, payloads)
        values = ((top + 1 + n, *rows[i].values, count_of(i)) for n, i in enumerate(fresh))
        if len(fresh) >= _COPY_FROM:
            with db.cursor().copy(f"COPY events ({_INSERT_COLUMNS}) FROM STDIN") as copy:
                for value in values:
                    copy.write_row(value)
        elif fresh:
            marks = ", ".join(["%s"] * 18)
            db.cursor().executemany(
                f"INSERT INTO events ({_INSERT_COLUMNS}) VALUES ({marks})", list(values)
            )
        seqs = Seqs(existing[s] if isinstance(s, tuple) else top + 1 + s for s in slots)
        seqs.inserted = len(fresh)
        return seqs

    # ------------------------------------------------------------------ reading
    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._reader().execute(sql, params).fetchall()

    def get(self, seq: int) -> Event:
        """The event with this seq; ``EventNotFound`` when there is none (out of range too)."""
        if sqlite_int(seq) != int(seq):
            raise EventNotFound(int(seq))
        rows = self._rows(f"SELECT {_EVENT_COLUMNS} FROM events WHERE seq = %s", (int(seq),))
        if not rows:
            raise EventNotFound(seq)
        return self._event(rows[0])

    def range(self, lo: int, hi: int) -> list[Event]:
        rows = self._rows(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE seq BETWEEN %s AND %s ORDER BY seq",
            (sqlite_int(lo), sqlite_int(hi)),
        )
        return [self._event(r) for r in rows]

    def session_events(
        self, session_id: str, after_seq: int = 0, limit: int | None = 100
    ) -> list[Event]:
        sql = f"SELECT {_EVENT_COLUMNS} FROM events WHERE session_id = %s AND seq > %s ORDER BY seq"
        params: tuple[Any, ...] = (session_id, sqlite_int(after_seq))
        if limit is not None:
            sql += " LIMIT %s"
            params += (max(0, sqlite_int(limit)),)
        return [self._event(r) for r in self._rows(sql, params)]

    def session_events_before(
        self, session_id: str, before_seq: int, limit: int = 100
    ) -> list[Event]:
        rows = self._rows(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE session_id = %s AND seq < %s "
            "ORDER BY seq DESC LIMIT %s",
            (session_id, sqlite_int(before_seq), max(0, sqlite_int(limit))),
        )
        return [self._event(r) for r in reversed(rows)]

    def session(self, session_id: str) -> SessionSummary | None:
        rows = self._rows(f"{_SUMMARY_SELECT} WHERE session_id = %s", (session_id,))
        return SessionSummary(*rows[0]) if rows else None

    def by_tool_call(self, tool_call_id: str) -> list[Event]:
        rows = self._rows(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE tool_call_id = %s ORDER BY seq",
            (tool_call_id,),
        )
        return [self._event(r) for r in rows]

    def sessions(self, *, after_seq: int = 0, limit: int | None = None) -> list[SessionSummary]:
        sql = f"{_SUMMARY_SELECT} WHERE last_seq > %s ORDER BY last_seq DESC"
        params: tuple[Any, ...] = (sqlite_int(after_seq),)
        if limit is not None:
            sql += " LIMIT %s"
            params += (max(0, sqlite_int(limit)),)
        return [SessionSummary(*r) for r in self._rows(sql, params)]

    def count(self, session_id: str | None = None) -> int:
        sql = "SELECT coalesce(sum(events), 0) FROM session_stats"
        if session_id is None:
            return int(self._rows(sql)[0][0])
        return int(self._rows(f"{sql} WHERE session_id = %s", (session_id,))[0][0])

    def last_seq(self) -> int:
        return int(self._rows("SELECT coalesce(max(seq), 0) FROM events")[0][0])

    # ------------------------------------------------------------------ search
    def search(
        self,
        query: str,
        k: int = 10,
        *,
        session_id: str | None = None,
        agent_id: str | None = None,
        kind: str | Sequence[str] | None = None,
        since: str | datetime | date | None = None,
        until: str | datetime | date | None = None,
        before_seq: int | None = None,
        time_limit_s: float | None = None,
        step_limit: int | None = None,
        speaker: str | Sequence[str] | None = None,
    ) -> list[Hit]:
        """BM25 search, as ``EventLog.search``.

        ``time_limit_s`` becomes the ``statement_timeout`` of the search's statements, and
        is PostgreSQL's bound on the work of a search: ``step_limit`` counts SQLite VM
        instructions, which PostgreSQL has no equivalent of, so it is accepted and not
        applied (bound a search by time here).
        """
        with span(
            "scroll.search",
            {"gen_ai.operation.name": "search_memory", "gen_ai.agent.id": agent_id},
            query=query,
            k=k,
            filter_session=session_id,
            filter_kind=kind,
            since=since,
            until=until,
        ) as traced:
            filters = SearchFilters(
                session_id, agent_id, kind, since, until, before_seq, speaker=speaker
            )
            with self._limited(time_limit_s) as db:
                hits = run_search(
                    db, query, k, filters, self.search_tuning, PG_DIALECT, self.term_stats
                )
            if traced.recording:
                traced.set(hits=len(hits), hit_seqs=[h.seq for h in hits])
            return hits

    @contextmanager
    def _limited(self, time_limit_s: float | None) -> Iterator[psycopg.Connection[Any]]:
        db = self._reader()
        if time_limit_s is None:
            yield db
            return
        if time_limit_s <= 0:  # SQLite stops such a search at once; 1 ms might let it finish
            raise SearchTimeout(f"{time_limit_s:g} s")
        ms = max(1, int(time_limit_s * 1000))
        try:
            with db.transaction():
                db.execute(f"SET LOCAL statement_timeout = {ms}")
                yield db
        except pgerrors.QueryCanceled:
            raise SearchTimeout(f"{time_limit_s:g} s") from None

    # ------------------------------------------------------------------ FTS maintenance
    def fts_check(self) -> int:
        """Check that the full-text index and its BM25 statistics match the searchable
        events; return how many events it covers."""
        with span("scroll.fts", operation="check"):
            db = self._reader()
            with db.transaction():
                db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                missing = db.execute(
                    "SELECT count(*), min(e.seq) FROM events e WHERE e.searchable = 1 "
                    "AND NOT EXISTS (SELECT 1 FROM events_fts f WHERE f.seq = e.seq)"
                ).fetchall()[0]
                extra = db.execute(
                    "SELECT count(*), min(f.seq) FROM events_fts f WHERE NOT EXISTS "
                    "(SELECT 1 FROM events e WHERE e.seq = f.seq AND e.searchable = 1)"
                ).fetchall()[0]
                covered, tokens = db.execute(
                    "SELECT count(*), coalesce(sum(doclen), 0) FROM events_fts"
                ).fetchall()[0]
                totals = db.execute("SELECT docs, tokens FROM fts_totals").fetchall()[0]
                terms = db.execute(
                    "SELECT count(*) FROM (SELECT u.lexeme, count(*) AS docs "
                    "FROM events_fts, unnest(tsv) AS u GROUP BY u.lexeme) AS d "
                    "FULL JOIN fts_terms t USING (lexeme) "
                    "WHERE d.docs IS DISTINCT FROM t.docs"
                ).fetchall()[0][0]
        problems = []
        if missing[0]:
            problems.append(f"{missing[0]} searchable event(s) missing, first seq {missing[1]}")
        if extra[0]:
            problems.append(f"{extra[0]} entry(ies) for no searchable event, first {extra[1]}")
        if tuple(totals) != (covered, tokens):
            problems.append(f"totals {tuple(totals)} but the index holds {(covered, tokens)}")
        if terms:
            problems.append(f"{terms} lexeme(s) with a wrong document frequency")
        if problems:
            raise SearchIndexCorrupt(
                "the full-text index does not match the events: " + "; ".join(problems)
            )
        return int(covered)

    def fts_rebuild(self) -> int:
        """The PostgreSQL index is written only by the append trigger and cannot be edited,
        so there is nothing to rebuild: check it and return how many events it covers."""
        return self.fts_check()

    def fts_optimize(self) -> None:
        """Refresh the planner's statistics of the index tables (after bulk loads)."""
        with span("scroll.fts", operation="optimize"), self._write_lock:
            self._writer.execute("ANALYZE events_fts, fts_terms, events")


def _put_payloads(db: psycopg.Connection[Any], payloads: dict[str, bytes]) -> None:
    have = {
        row[0]
        for row in db.execute(
            "SELECT ref FROM payloads WHERE ref = ANY(%s)", (list(payloads),)
        ).fetchall()
    }
    new = [(ref, len(data), data) for ref, data in payloads.items() if ref not in have]
    if new:
        db.cursor().executemany(
            "INSERT INTO payloads (ref, size, data) VALUES (%s, %s, %s) "
            "ON CONFLICT (ref) DO NOTHING",
            new,
        )


def _existing_keys(db: psycopg.Connection[Any], rows: list[_Row]) -> dict[tuple[str, str], int]:
    by_session: dict[str, set[str]] = {}
    for row in rows:
        if row.dedup_key is not None:
            by_session.setdefault(row.session_id, set()).add(row.dedup_key)
    found: dict[tuple[str, str], int] = {}
    for session_id, keys in by_session.items():
        for key, seq in db.execute(
            "SELECT dedup_key, seq FROM events WHERE session_id = %s AND dedup_key = ANY(%s)",
            (session_id, sorted(keys)),
        ):
            found[(session_id, key)] = seq
    return found
