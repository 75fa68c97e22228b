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
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import errors as pgerrors

from ..errors import (
    AppendOnlyViolation,
    EventLogError,
    InvalidEvent,
    PayloadCorrupt,
    PayloadMissing,
    SearchIndexCorrupt,
    SearchTimeout,
    StoreUnavailable,
)
from ..telemetry import span
from ..tokens import TokenCounter
from .log_common import (
    DEFAULT_PAYLOAD_THRESHOLD,
    _EventLogBase,
    _plan,
    _Row,
    coverage_problems,
    keys_by_session,
)
from .payloads import check_ref, ref_of
from .pg_outage import is_transient, outage_budget_s, ready, retrying
from .pg_schema import APPEND_ONLY_SQLSTATE, SEQ_LOCK, migrate
from .pg_search import PG_DIALECT
from .records import Seqs
from .search import SearchTuning

__all__ = ["PgEventLog", "PgPayloadStore", "redact"]

_INSERT_COLUMNS = (
    "seq, session_id, agent_id, kind, role, name, content, tool_call_id, tool_input, "
    "payload_ref, payload_size, payload_media, headline, metadata, created_at, dedup_key, "
    "searchable, tokens"
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
        found = self._log._read(
            lambda db: db.execute("SELECT data FROM payloads WHERE ref = %s", (ref,)).fetchone()
        )
        if found is None:
            raise PayloadMissing(ref, "no such row in the payloads table")
        data = bytes(found[0])
        if ref_of(data) != ref:
            raise PayloadCorrupt(ref, "the stored bytes do not match their sha256")
        return data

    def exists(self, ref: str) -> bool:
        check_ref(ref)
        found = self._log._read(
            lambda db: db.execute("SELECT 1 FROM payloads WHERE ref = %s", (ref,)).fetchone()
        )
        return found is not None


class PgEventLog(_EventLogBase):
    """The Event Log in the PostgreSQL database at ``url`` (created or migrated on open).

    ``reader_url`` is the login ``ms.sql_query`` runs model SQL as (a member of
    ``scroll_reader``); without it, sql_query on this log is refused.

    Content longer than ``payload_threshold`` characters is stored whole in the
    ``payloads`` table and the row keeps the first ``payload_threshold`` characters. So is
    content with NUL characters, which PostgreSQL text cannot hold: the row keeps it with
    each NUL shown as U+FFFD, and the payload keeps it exactly.

    A database restart is ridden out: a connection found dead is replaced before it is used,
    a read that meets a transient error runs again on a fresh connection, and so does an
    append that did not reach its commit or whose every event has a dedup key (a repeat
    returns the stored seqs). Past ``outage_s`` (``SCROLL_DB_OUTAGE_S``, 60 s) without an
    answer, or for an append without keys whose commit was cut off, ``StoreUnavailable``.
    """

    backend = "postgres"
    _text_holds_nul = False
    _dialect = PG_DIALECT

    def __init__(
        self,
        url: str,
        *,
        payload_threshold: int = DEFAULT_PAYLOAD_THRESHOLD,
        token_counter: TokenCounter | None = None,
        search_tuning: SearchTuning | None = None,
        token_thread: bool = True,
        reader_url: str | None = None,
        outage_s: float | None = None,
    ) -> None:
        self._init_common(payload_threshold, token_counter, search_tuning, token_thread)
        self.outage_s = outage_budget_s() if outage_s is None else outage_s
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
        # PostgreSQL refuses COPY FROM into a table whose row-level security applies to the
        # login ("COPY FROM not supported with row-level security"): the application's own
        # login, a member of ``scroll_writer`` (``scroll_eventlog roles``), is under the
        # writer policies of ``m002_ms_reader``; only the owner is not. Such a login sends a
        # batch as INSERTs.
        active = self._writer.execute("SELECT row_security_active('events')").fetchone()
        self._copy_ok = not (active and active[0])

    # ------------------------------------------------------------------ connections
    def _connect(self, *, readonly: bool = False) -> psycopg.Connection[Any]:
        # Reader connections cannot write even by mistake: every transaction is read-only.
        # JIT compiling costs more than these short queries ever run.
        options = "-c jit=off" + (" -c default_transaction_read_only=on" if readonly else "")
        try:
            return psycopg.connect(self.url, autocommit=True, options=options)
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"cannot connect to {self.location}: {exc}") from None

    def _reader(self) -> psycopg.Connection[Any]:
        if self._closed:
            raise EventLogError(f"event log {self.location} is closed")
        db: psycopg.Connection[Any] | None = getattr(self._local, "db", None)
        if db is None or not ready(db):
            self._drop_reader()
            db = self._connect(readonly=True)
            self._local.db = db
            with self._write_lock:
                self._readers.append(db)
        return db

    def _drop_reader(self) -> None:
        """Close this thread's reader (found dead); the next read connects afresh."""
        db: psycopg.Connection[Any] | None = getattr(self._local, "db", None)
        self._local.db = None
        if db is not None:
            with self._write_lock:
                if db in self._readers:
                    self._readers.remove(db)
            db.close()

    def _read(self, work: Callable[[psycopg.Connection[Any]], Any]) -> Any:
        return retrying(
            lambda: work(self._reader()),
            budget_s=self.outage_s,
            where=f"event log {self.location}",
            on_failure=self._drop_reader,
        )

    @contextmanager
    def _write(self) -> Iterator[psycopg.Connection[Any]]:
        if self._closed:
            raise EventLogError(f"event log {self.location} is closed")
        with self._write_lock:
            if not ready(self._writer):
                self._writer.close()
                self._writer = self._connect()
            with self._writer.transaction():
                yield self._writer

    # ------------------------------------------------------------------ writing
    def _prepare_chunk(self, chunk: list[tuple[int, Mapping[str, Any]]]) -> list[_Row]:
        # Payloads are written inside the appending transaction (see _append_numbered).
        return [self._prepare(i, event) for i, event in chunk]

    def _append_numbered(self, numbered: list[tuple[int, Mapping[str, Any]]]) -> Seqs:
        prepared = self._prepare_batch(numbered)
        rows = prepared.rows
        # With a dedup key on every event a second try returns the seqs the first stored.
        idempotent = all(row.dedup_key is not None for row in rows)

        def attempt() -> Seqs:
            committing = False
            try:
                with self._write() as db:
                    # Counts are resolved as the rows stream to the server: counting a later
                    # chunk on the worker thread overlaps the COPY of an earlier one.
                    seqs = self._insert_rows(db, rows, prepared.count_of)
                    committing = True
            except Exception as exc:
                if committing and not idempotent and is_transient(exc):
                    raise StoreUnavailable(
                        f"the connection to {self.location} broke while a batch without "
                        f"dedup keys committed; it may or may not be stored: {exc}".strip(),
                        outcome_unknown=True,
                    ) from exc
                raise
            return seqs

        try:
            return retrying(attempt, budget_s=self.outage_s, where=f"event log {self.location}")
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
        if len(fresh) >= _COPY_FROM and self._copy_ok:
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

    # ------------------------------------------------------------------ search
    @contextmanager
    def _limited(
        self, time_limit_s: float | None, step_limit: int | None
    ) -> Iterator[psycopg.Connection[Any]]:
        """This thread's reader; with ``time_limit_s``, inside a transaction whose
        ``statement_timeout`` it is. ``step_limit`` (SQLite VM instructions) has no
        PostgreSQL equivalent and is not applied."""
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
                covered = db.execute("SELECT count(*) FROM events_fts").fetchall()[0][0]
                totals = db.execute(
                    "SELECT count(*) FROM (SELECT e.agent_id, count(*) AS docs, "
                    "sum(f.doclen) AS tokens FROM events_fts f JOIN events e USING (seq) "
                    "GROUP BY e.agent_id) AS d FULL JOIN fts_agent_totals t USING (agent_id) "
                    "WHERE (d.docs, d.tokens) IS DISTINCT FROM (t.docs, t.tokens)"
                ).fetchall()[0][0]
                terms = db.execute(
                    "SELECT count(*) FROM (SELECT e.agent_id, u.lexeme, count(*) AS docs, "
                    "max(cardinality(u.positions)) AS max_tf, min(f.doclen) AS min_doclen, "
                    "bool_or(NOT u.weights <@ '{D}'::text[]) AS labelled "
                    "FROM events_fts f JOIN events e USING (seq), unnest(f.tsv) AS u "
                    "GROUP BY e.agent_id, u.lexeme) AS d "
                    "FULL JOIN fts_agent_terms t USING (agent_id, lexeme) "
                    "WHERE (d.docs, d.max_tf, d.min_doclen, d.labelled) "
                    "IS DISTINCT FROM (t.docs, t.max_tf, t.min_doclen, t.labelled)"
                ).fetchall()[0][0]
        problems = coverage_problems(missing, extra)
        if totals:
            problems.append(f"{totals} agent(s) whose totals do not match the index")
        if terms:
            problems.append(
                f"{terms} (agent, lexeme) pair(s) with a wrong document frequency or bound"
            )
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
        """After bulk loads: merge the full-text index's pending list of new entries and
        refresh the planner's statistics of the index tables.

        Every search reads the pending list whole until it is merged, and the planner
        counts its pages into the index's cost (``pg_schema.m006_fts_pending_limit``);
        after a load it can hold up to the limit. Merging needs the index's owner: a login
        that does not own it (``scroll_writer``'s) only refreshes the statistics, as ANALYZE
        itself skips, with a warning, a table its login does not own."""
        with span("scroll.fts", operation="optimize"), self._write_lock:
            # Not the owner: autovacuum merges it, as it always would.
            with suppress(pgerrors.InsufficientPrivilege):
                self._writer.execute("SELECT gin_clean_pending_list('events_fts_tsv')")
            self._writer.execute("ANALYZE events_fts, fts_agent_terms, events")


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
    """The seqs of dedup keys in ``rows`` that the log already holds."""
    found: dict[tuple[str, str], int] = {}
    for session_id, keys in keys_by_session(rows).items():
        for key, seq in db.execute(
            "SELECT dedup_key, seq FROM events WHERE session_id = %s AND dedup_key = ANY(%s)",
            (session_id, keys),
        ):
            found[(session_id, key)] = seq
    return found
