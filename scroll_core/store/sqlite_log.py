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

import json
import os
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any, Self

from ..errors import (
    AppendOnlyViolation,
    EventLogError,
    EventNotFound,
    InvalidEvent,
    SearchIndexCorrupt,
    SearchTimeout,
)
from ..telemetry import SESSION, span
from ..timeutil import format_ts, now_ts
from ..tokens import TokenCounter, default_counter
from .payloads import (
    MEDIA_BYTES,
    MEDIA_TEXT,
    ArtifactRef,
    PayloadSource,
    PayloadStore,
    ToolResultRef,
    encode_payload,
    ref_of,
)
from .search import Hit, SearchFilters, SearchTuning, TermStats, run_search
from .sqlite_schema import APPEND_ONLY_MESSAGE, migrate, sqlite_int
from .sqlite_search import SQLITE

__all__ = [
    "KIND_CONTEXT_MSG",
    "KIND_MODEL_TURN",
    "KIND_TOOL_RESULT",
    "Event",
    "EventLog",
    "Hit",
    "SessionSummary",
]

KIND_CONTEXT_MSG = "context_msg"
KIND_MODEL_TURN = "model_turn"
KIND_TOOL_RESULT = "tool_result"

# Above the default print cap (32,000 characters plus its notice), so whatever a kernel cell
# prints is stored inline and shown whole in the working view; larger contents (imported
# tool outputs, artifacts) move to the payload store behind a preview of this length.
DEFAULT_PAYLOAD_THRESHOLD = 32768
BUSY_TIMEOUT_S = 30.0
# Rows per INSERT of a large batch; token counting of other chunks overlaps it.
_PIPELINE_CHUNK = 50
# SQLite VM instructions between two checks of a search's time or step limit.
_PROGRESS_STEPS = 1000
# What SQLite says when a (session_id, dedup_key) pair is already taken.
_DEDUP_CONFLICT = "UNIQUE constraint failed: events.session_id, events.dedup_key"


_EVENT_COLUMNS = (
    "seq, session_id, agent_id, kind, role, name, content, tool_call_id, tool_input, "
    "payload_ref, payload_size, payload_media, headline, metadata, created_at, tokens, dedup_key"
)
# The per-session summary the append path keeps (sqlite_schema m002), one row per session.
_SUMMARY_SELECT = (
    "SELECT session_id, agent_id, events, tokens, first_seq, last_seq, first_at, last_at "
    "FROM session_stats"
)
_APPEND_KEYS = frozenset(
    {
        "session_id",
        "kind",
        "content",
        "role",
        "agent_id",
        "name",
        "tool_call_id",
        "tool_input",
        "payload",
        "headline",
        "metadata",
        "created_at",
        "dedup_key",
        "searchable",
    }
)


@dataclass(frozen=True)
class Event:
    """One row of the log, exactly as stored."""

    seq: int
    session_id: str
    agent_id: str
    kind: str
    role: str | None
    name: str | None
    content: str
    tool_call_id: str | None
    tool_input: Any
    payload_ref: str | None
    payload_size: int | None
    payload_media: str | None
    headline: str | None
    metadata: dict[str, Any]
    created_at: str
    tokens: int
    dedup_key: str | None
    _store: PayloadSource | None = field(default=None, repr=False, compare=False)

    @property
    def payload(self) -> ToolResultRef | ArtifactRef | None:
        """A lazy handle on the full payload, or None when the content is all there is."""
        if self.payload_ref is None or self._store is None:
            return None
        handle = ArtifactRef if self.payload_media == MEDIA_BYTES else ToolResultRef
        return handle(
            self.payload_ref, self.payload_size or 0, self.payload_media or "", self._store
        )

    @property
    def is_preview(self) -> bool:
        """True when ``content`` is a bounded preview of a larger text payload."""
        return self.payload_ref is not None and self.payload_media == MEDIA_TEXT

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "session_id": self.session_id,
            "agent_id": self.agent_id,
            "kind": self.kind,
            "role": self.role,
            "name": self.name,
            "content": self.content,
            "tool_call_id": self.tool_call_id,
            "tool_input": self.tool_input,
            "payload_ref": self.payload_ref,
            "payload_size": self.payload_size,
            "headline": self.headline,
            "metadata": self.metadata,
            "created_at": self.created_at,
            "tokens": self.tokens,
        }


class Seqs(list[int]):
    """The seqs of an append, in input order; ``inserted`` counts the events that were new
    (the rest repeated a dedup key already in the log)."""

    inserted: int = 0


@dataclass(frozen=True)
class SessionSummary:
    session_id: str
    agent_id: str
    events: int
    tokens: int
    first_seq: int
    last_seq: int
    first_at: str
    last_at: str


@dataclass(frozen=True)
class _Row:
    """A validated event ready for INSERT."""

    values: tuple[Any, ...]
    session_id: str
    dedup_key: str | None
    payload: bytes | None


@dataclass(frozen=True)
class _Prepared:
    """A batch validated in chunks of ``_PIPELINE_CHUNK`` rows, each chunk with its token
    counts: counted already (a small batch) or still being counted on the worker thread."""

    chunks: list[tuple[list[_Row], list[int] | Future[list[int]]]]

    @property
    def rows(self) -> list[_Row]:
        return [row for rows, _ in self.chunks for row in rows]

    def counts(self, chunk: int) -> list[int]:
        """The token counts of chunk number ``chunk``, waiting for them if need be."""
        counts = self.chunks[chunk][1]
        return counts.result() if isinstance(counts, Future) else counts

    def count_of(self, index: int) -> int:
        """The token count of row ``index`` of the batch."""
        return self.counts(index // _PIPELINE_CHUNK)[index % _PIPELINE_CHUNK]

    def cancel(self) -> None:
        """Drop the counting not yet started (the batch failed or is done)."""
        for _, counts in self.chunks:
            if isinstance(counts, Future):
                counts.cancel()


class _EventLogBase(ABC):
    """What every backend of the Event Log shares: validating events, routing large
    contents to the payload store, counting tokens, and turning rows into ``Event``s.

    A backend supplies ``payloads``, its connections and ``_append_numbered`` (the
    transaction) and the reads.
    """

    payloads: PayloadSource
    payload_threshold: int
    tokens: TokenCounter
    search_tuning: SearchTuning
    # Whole-log term statistics, cached for searches that weigh terms by them.
    term_stats: TermStats
    _pool: ThreadPoolExecutor | None
    # Set by each backend: its writing connection, its readers' connections (one per thread),
    # and the lock that serialises writes; ``close`` releases them all.
    _writer: Any
    _readers: list[Any]
    _write_lock: threading.RLock
    _closed: bool
    # Whether a text column can hold NUL (SQLite's can; PostgreSQL's text cannot, so there
    # content with NUL goes whole to the payload store like text that is not UTF-8).
    _text_holds_nul: bool = True

    def _init_common(
        self,
        payload_threshold: int,
        token_counter: TokenCounter | None,
        search_tuning: SearchTuning | None,
    ) -> None:
        if payload_threshold < 1:
            raise ValueError("payload_threshold must be at least 1 character")
        self.payload_threshold = payload_threshold
        self.tokens = token_counter or default_counter()
        self.search_tuning = search_tuning or SearchTuning()
        self.term_stats = TermStats()
        self._pool = None

    @abstractmethod
    def _append_numbered(self, numbered: list[tuple[int, Mapping[str, Any]]]) -> Seqs:
        """Validate, store and number ``numbered`` (index, event) in one transaction."""

    def close(self) -> None:
        """Release the backend's connections (and the token-counting thread); idempotent."""
        if self._closed:
            return
        self._closed = True
        with self._write_lock:
            self._writer.close()
            for db in self._readers:
                db.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writing
    def append(
        self,
        *,
        session_id: str,
        kind: str,
        content: str | bytes,
        role: str | None = None,
        agent_id: str = "main",
        name: str | None = None,
        tool_call_id: str | None = None,
        tool_input: Any = None,
        payload: Any = None,
        headline: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        created_at: str | datetime | date | None = None,
        dedup_key: str | None = None,
        searchable: bool = True,
    ) -> int:
        """Append one event and return its seq (the existing seq for a repeated dedup key)."""
        return self.append_many(
            [
                {
                    "session_id": session_id,
                    "kind": kind,
                    "content": content,
                    "role": role,
                    "agent_id": agent_id,
                    "name": name,
                    "tool_call_id": tool_call_id,
                    "tool_input": tool_input,
                    "payload": payload,
                    "headline": headline,
                    "metadata": metadata,
                    "created_at": created_at,
                    "dedup_key": dedup_key,
                    "searchable": searchable,
                }
            ]
        )[0]

    def append_many(self, events: Iterable[Mapping[str, Any]]) -> Seqs:
        """Append events in one transaction, all or nothing; return their seqs in order
        (``.inserted`` on the result counts the new ones)."""
        numbered = list(enumerate(events))
        if not numbered:
            return Seqs()
        with span("scroll.append", events=len(numbered)) as traced:
            seqs = self._append_numbered(numbered)
            if traced.recording:
                sessions = {event.get("session_id") for _, event in numbered}
                traced.set(
                    inserted=seqs.inserted,
                    seq_lo=min(seqs),
                    seq_hi=max(seqs),
                    sessions=len(sessions),
                )
                if len(sessions) == 1:
                    traced.set_attributes({SESSION: sessions.pop()})
        return seqs

    def _prepare_batch(self, numbered: list[tuple[int, Mapping[str, Any]]]) -> _Prepared:
        """``numbered`` validated chunk by chunk. In a large batch each chunk's tokens are
        counted on a worker thread as soon as the chunk is validated, overlapping the
        validation of later chunks and the writing of earlier ones (the encoder and both
        databases release the GIL); a small batch is counted on the calling thread."""
        if len(numbered) <= _PIPELINE_CHUNK:
            rows = self._prepare_chunk(numbered)
            return _Prepared([(rows, self._count(rows))])
        pool = self._token_pool()
        chunks: list[tuple[list[_Row], list[int] | Future[list[int]]]] = []
        for i in range(0, len(numbered), _PIPELINE_CHUNK):
            rows = self._prepare_chunk(numbered[i : i + _PIPELINE_CHUNK])
            chunks.append((rows, pool.submit(self._count, rows)))
        return _Prepared(chunks)

    def _prepare_chunk(self, chunk: list[tuple[int, Mapping[str, Any]]]) -> list[_Row]:
        rows = [self._prepare(i, event) for i, event in chunk]
        for row in rows:
            if row.payload is not None:
                self.payloads.put(row.payload)
        return rows

    def _count(self, rows: list[_Row]) -> list[int]:
        return self.tokens.count_many([row.values[5] for row in rows])

    def _token_pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scroll-tokens")
        return self._pool

    def _prepare(self, index: int, event: Mapping[str, Any]) -> _Row:
        where = f"event {index}"
        unknown = set(event) - _APPEND_KEYS
        if unknown:
            raise InvalidEvent(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        session_id = _required_text(event, "session_id", where)
        kind = _required_text(event, "kind", where)
        agent_id = event.get("agent_id") or "main"
        role = _optional_text(event, "role", where)
        name = _optional_text(event, "name", where)
        tool_call_id = _optional_text(event, "tool_call_id", where)
        headline = _optional_text(event, "headline", where)
        dedup_key = _optional_text(event, "dedup_key", where)
        if not isinstance(agent_id, str):
            raise InvalidEvent(f"{where}: agent_id must be a string")
        _refuse_nul(agent_id, "agent_id", where)

        raw_created = event.get("created_at")
        try:
            created_at = now_ts() if raw_created is None else format_ts(raw_created)
        except ValueError as exc:
            raise InvalidEvent(f"{where}: invalid created_at: {exc}") from None

        metadata = event.get("metadata") or {}
        if not isinstance(metadata, Mapping):
            raise InvalidEvent(f"{where}: metadata must be a mapping")
        metadata_json = _to_json(dict(metadata), where, "metadata") if metadata else "{}"
        tool_input = event.get("tool_input")
        tool_input_json = None if tool_input is None else _to_json(tool_input, where, "tool_input")

        content, payload_value = self._split_content(
            event.get("content"), event.get("payload"), where
        )
        payload_bytes: bytes | None = None
        payload_ref = payload_size = payload_media = None
        if payload_value is not None:
            try:
                payload_bytes, payload_media = encode_payload(payload_value)
            except (TypeError, ValueError) as exc:
                raise InvalidEvent(f"{where}: payload cannot be stored: {exc}") from None
            payload_ref = ref_of(payload_bytes)
            payload_size = len(payload_bytes)
        searchable = 1 if event.get("searchable", True) else 0
        values = (
            session_id,
            agent_id,
            kind,
            role,
            name,
            content,
            tool_call_id,
            tool_input_json,
            payload_ref,
            payload_size,
            payload_media,
            headline,
            metadata_json,
            created_at,
            dedup_key,
            searchable,
        )
        return _Row(values, session_id, dedup_key, payload_bytes)

    def _split_content(self, content: Any, payload: Any, where: str) -> tuple[str, Any]:
        """Return the inline content and the value (if any) for the payload store.

        Nothing the caller gave is dropped: undecodable bytes and over-long text go whole
        to the payload store, and the row keeps a readable, bounded preview.
        """
        if content is None:
            raise InvalidEvent(f"{where}: content is required (use '' for none)")
        full: Any = None
        if isinstance(content, bytes | bytearray):
            try:
                content = bytes(content).decode("utf-8")
            except UnicodeDecodeError:
                full = bytes(content)
                content = full.decode("utf-8", "replace")
        elif not isinstance(content, str):
            raise InvalidEvent(
                f"{where}: content must be str or bytes, not {type(content).__name__}"
            )
        if full is None and _has_surrogates(content):
            full = content
            content = content.encode("utf-8", "replace").decode("utf-8")
        if not self._text_holds_nul and "\x00" in content:
            full = content if full is None else full
            content = content.replace("\x00", "\ufffd")
        if full is None and len(content) > self.payload_threshold:
            full = content
        if full is not None and payload is not None:
            raise InvalidEvent(
                f"{where}: content needs the payload store (over {self.payload_threshold} chars "
                "or not UTF-8) but a separate payload was also given; pass the full text as "
                "payload and a short preview as content"
            )
        if full is not None:
            payload = full
        return content[: self.payload_threshold], payload

    # ------------------------------------------------------------------ reading
    def _event(self, row: Sequence[Any]) -> Event:
        return Event(
            seq=row[0],
            session_id=row[1],
            agent_id=row[2],
            kind=row[3],
            role=row[4],
            name=row[5],
            content=row[6],
            tool_call_id=row[7],
            tool_input=None if row[8] is None else json.loads(row[8]),
            payload_ref=row[9],
            payload_size=row[10],
            payload_media=row[11],
            headline=row[12],
            metadata=json.loads(row[13]) if row[13] else {},
            created_at=row[14],
            tokens=row[15],
            dedup_key=row[16],
            _store=self.payloads,
        )


class EventLog(_EventLogBase):
    """The SQLite Event Log: open, create or migrate the log at ``path``.

    ``payload_dir`` defaults to a ``payloads`` folder beside the database. Content longer
    than ``payload_threshold`` characters is stored whole in the payload store and the row
    keeps the first ``payload_threshold`` characters as its preview.
    """

    backend = "sqlite"

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
    ) -> None:
        self._init_common(payload_threshold, token_counter, search_tuning)
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
                for chunk, (rows, _) in enumerate(prepared.chunks):
                    chunk_seqs, inserted = self._insert_rows(db, rows, prepared.counts(chunk))
                    seqs.extend(chunk_seqs)
                    seqs.inserted += inserted
        except sqlite3.IntegrityError as exc:
            if APPEND_ONLY_MESSAGE in str(exc):
                raise AppendOnlyViolation(str(exc)) from exc
            raise InvalidEvent(f"the log refused the batch: {exc}") from exc
        finally:
            prepared.cancel()
        return seqs

    def _insert_rows(
        self, db: sqlite3.Connection, rows: list[_Row], counts: list[int]
    ) -> tuple[list[int], int]:
        """INSERT what is new in ``rows``; return every row's seq (the existing seq for a
        repeated dedup key) and how many were new. Runs inside the caller's transaction."""
        before = _sequence(db)
        # Fast path: insert everything at once. A repeated dedup key (a re-import, or a key
        # repeated inside the batch) trips the unique index and stops executemany at that
        # row; the rows before it are in, and the rest are resolved key by key. (A SAVEPOINT
        # would be simpler, but it makes FTS5 flush its pending index on every chunk.)
        try:
            self._execute_insert(db, [(*r.values, n) for r, n in zip(rows, counts, strict=True)])
        except sqlite3.IntegrityError as exc:
            if _DEDUP_CONFLICT not in str(exc):
                raise
            done = _sequence(db) - before
            rest = rows[done:]
            existing = _existing_keys(db, rest)
            fresh, rest_slots = _plan(rest, existing)
            self._execute_insert(db, [(*rest[i].values, counts[done + i]) for i in fresh])
            slots = [*range(done), *(s if isinstance(s, tuple) else done + s for s in rest_slots)]
            inserted = done + len(fresh)
        else:
            slots, existing, inserted = list(range(len(rows))), {}, len(rows)
        # Under BEGIN IMMEDIATE this connection is the only writer, so AUTOINCREMENT hands out
        # consecutive seqs; check it rather than trust it.
        if _sequence(db) - before != inserted:
            raise EventLogError("seq allocation was not contiguous; batch rolled back")
        return [existing[s] if isinstance(s, tuple) else before + 1 + s for s in slots], inserted

    @staticmethod
    def _execute_insert(db: sqlite3.Connection, values: list[tuple[Any, ...]]) -> None:
        db.executemany(
            "INSERT INTO events (session_id, agent_id, kind, role, name, content, "
            "tool_call_id, tool_input, payload_ref, payload_size, payload_media, headline, "
            "metadata, created_at, dedup_key, searchable, tokens) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            values,
        )

    # ------------------------------------------------------------------ reading
    def get(self, seq: int) -> Event:
        """The event with this seq; ``EventNotFound`` when there is none (out of range too)."""
        if sqlite_int(seq) != int(seq):
            raise EventNotFound(int(seq))
        row = (
            self._reader()
            .execute(f"SELECT {_EVENT_COLUMNS} FROM events WHERE seq = ?", (int(seq),))
            .fetchone()
        )
        if row is None:
            raise EventNotFound(seq)
        return self._event(row)

    def range(self, lo: int, hi: int) -> list[Event]:
        """Events with ``lo <= seq <= hi`` in seq order."""
        rows = self._reader().execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE seq BETWEEN ? AND ? ORDER BY seq",
            (sqlite_int(lo), sqlite_int(hi)),
        )
        return [self._event(r) for r in rows]

    def session_events(
        self, session_id: str, after_seq: int = 0, limit: int | None = 100
    ) -> list[Event]:
        """A session's events with seq greater than ``after_seq``, oldest first."""
        sql = f"SELECT {_EVENT_COLUMNS} FROM events WHERE session_id = ? AND seq > ? ORDER BY seq"
        params: tuple[Any, ...] = (session_id, sqlite_int(after_seq))
        if limit is not None:
            sql += " LIMIT ?"
            params += (sqlite_int(limit),)
        return [self._event(r) for r in self._reader().execute(sql, params)]

    def session_events_before(
        self, session_id: str, before_seq: int, limit: int = 100
    ) -> list[Event]:
        """The ``limit`` events of a session just before ``before_seq``, oldest first."""
        rows = (
            self._reader()
            .execute(
                f"SELECT {_EVENT_COLUMNS} FROM events WHERE session_id = ? AND seq < ? "
                "ORDER BY seq DESC LIMIT ?",
                (session_id, sqlite_int(before_seq), sqlite_int(limit)),
            )
            .fetchall()
        )
        return [self._event(r) for r in reversed(rows)]

    def session(self, session_id: str) -> SessionSummary | None:
        """One session's summary, or None when the log has no event of it."""
        row = (
            self._reader()
            .execute(f"{_SUMMARY_SELECT} WHERE session_id = ?", (session_id,))
            .fetchone()
        )
        return SessionSummary(*row) if row else None

    def by_tool_call(self, tool_call_id: str) -> list[Event]:
        """The events that carry ``tool_call_id`` (the call and its result), in seq order."""
        rows = self._reader().execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE tool_call_id = ? ORDER BY seq",
            (tool_call_id,),
        )
        return [self._event(r) for r in rows]

    def sessions(self, *, after_seq: int = 0, limit: int | None = None) -> list[SessionSummary]:
        """Session summaries, the most recently written first.

        ``after_seq`` keeps the sessions written to after that seq; ``limit`` caps how many
        come back. Read from the summary table, so the cost follows the number of sessions
        returned, not the number of events.
        """
        sql = f"{_SUMMARY_SELECT} WHERE last_seq > ? ORDER BY last_seq DESC"
        params: tuple[Any, ...] = (sqlite_int(after_seq),)
        if limit is not None:
            sql += " LIMIT ?"
            params += (max(0, sqlite_int(limit)),)
        return [SessionSummary(*r) for r in self._reader().execute(sql, params)]

    def count(self, session_id: str | None = None) -> int:
        """How many events the log holds, in all or in one session."""
        sql = "SELECT coalesce(sum(events), 0) FROM session_stats"
        if session_id is None:
            row = self._reader().execute(sql).fetchone()
        else:
            row = self._reader().execute(f"{sql} WHERE session_id = ?", (session_id,)).fetchone()
        return int(row[0])

    def last_seq(self) -> int:
        row = self._reader().execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()
        return int(row[0])

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
        """BM25 search over content, headline and name. Never raises on the query text.

        Terms are OR-ed after stop-word removal; a turn also gains from matches in the turns
        next to it in its session (see ``search.SearchTuning``); ties go to the older event.
        ``since`` and ``until`` bound ``created_at`` half-open, ``[since, until)``;
        ``before_seq`` keeps only older events (the agent's active turn stays out, neighbours
        included). ``speaker`` keeps events whose ``name`` (speaker or tool) is one given.
        An empty query with a date bound lists that range in seq order.

        ``time_limit_s`` (seconds) and ``step_limit`` (SQLite VM instructions, checked every
        1000) interrupt a search that runs past them with ``SearchTimeout``.
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
            db = self._reader()
            with _limited(db, time_limit_s, step_limit):
                hits = run_search(
                    db,
                    query,
                    k,
                    SearchFilters(
                        session_id, agent_id, kind, since, until, before_seq, speaker=speaker
                    ),
                    self.search_tuning,
                    SQLITE,
                    self.term_stats,
                )
            if traced.recording:
                traced.set(hits=len(hits), hit_seqs=[h.seq for h in hits])
            return hits

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
            except sqlite3.DatabaseError as exc:
                raise SearchIndexCorrupt(
                    f"the full-text index failed its integrity check ({exc}); "
                    "rebuild it with `manage.py scroll_fts rebuild`"
                ) from exc
        problems = []
        if missing[0]:
            problems.append(f"{missing[0]} searchable event(s) missing, first seq {missing[1]}")
        if extra[0]:
            problems.append(f"{extra[0]} entry(ies) for no searchable event, first {extra[1]}")
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


@contextmanager
def _limited(
    db: sqlite3.Connection, time_limit_s: float | None, step_limit: int | None
) -> Iterator[None]:
    """Interrupt what ``db`` runs inside the block once it passes either limit."""
    if time_limit_s is None and step_limit is None:
        yield
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
        yield
    except sqlite3.OperationalError as exc:
        if "interrupted" not in str(exc):
            raise
        limit = f"{time_limit_s:g} s" if time_limit_s is not None else ""
        if step_limit is not None and steps > step_limit:
            limit = f"{step_limit} SQLite steps"
        raise SearchTimeout(limit) from None
    finally:
        db.set_progress_handler(None, 0)


def _existing_keys(db: sqlite3.Connection, rows: list[_Row]) -> dict[tuple[str, str], int]:
    """The seqs of dedup keys in ``rows`` that the log already holds."""
    by_session: dict[str, set[str]] = {}
    for row in rows:
        if row.dedup_key is not None:
            by_session.setdefault(row.session_id, set()).add(row.dedup_key)
    found: dict[tuple[str, str], int] = {}
    for session_id, keys in by_session.items():
        ordered = sorted(keys)
        for i in range(0, len(ordered), 500):
            part = ordered[i : i + 500]
            marks = ", ".join("?" * len(part))
            sql = (
                f"SELECT dedup_key, seq FROM events WHERE session_id = ? AND dedup_key IN ({marks})"
            )
            for key, seq in db.execute(sql, (session_id, *part)):
                found[(session_id, key)] = seq
    return found


def _plan(
    rows: list[_Row], existing: dict[tuple[str, str], int]
) -> tuple[list[int], list[tuple[str, str] | int]]:
    """Which rows to insert (their indices), and per row where its seq comes from: an
    existing event's dedup key, or its position among the inserted rows (a repeat inside
    the batch points at the first occurrence)."""
    fresh: list[int] = []
    slots: list[tuple[str, str] | int] = []
    pending: dict[tuple[str, str], int] = {}
    for index, row in enumerate(rows):
        ident = (row.session_id, row.dedup_key) if row.dedup_key is not None else None
        if ident is None:
            slots.append(len(fresh))
            fresh.append(index)
        elif ident in existing:
            slots.append(ident)
        elif ident in pending:
            slots.append(pending[ident])
        else:
            pending[ident] = len(fresh)
            slots.append(len(fresh))
            fresh.append(index)
    return fresh, slots


def _sequence(db: sqlite3.Connection) -> int:
    row = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
    return int(row[0]) if row else 0


def _has_surrogates(text: str) -> bool:
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _required_text(event: Mapping[str, Any], key: str, where: str) -> str:
    value = event.get(key)
    if not isinstance(value, str) or not value.strip():
        raise InvalidEvent(f"{where}: {key} must be a non-empty string")
    if _has_surrogates(value) or "\x00" in value:
        raise InvalidEvent(f"{where}: {key} contains characters that cannot be stored")
    return value


def _optional_text(event: Mapping[str, Any], key: str, where: str) -> str | None:
    value = event.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidEvent(f"{where}: {key} must be a string, not {type(value).__name__}")
    if _has_surrogates(value):
        raise InvalidEvent(f"{where}: {key} is not valid UTF-8")
    _refuse_nul(value, key, where)
    return value


def _refuse_nul(value: str, key: str, where: str) -> None:
    # The short fields are names and ids, not content: PostgreSQL text cannot hold NUL, and
    # an agent id with one could never be read back (``sqlite_scoped.scope_agents``). Both backends
    # refuse it alike rather than one storing what the other cannot.
    if "\x00" in value:
        raise InvalidEvent(f"{where}: {key} contains NUL (0x00), which the log cannot store")


def _to_json(value: Any, where: str, key: str) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidEvent(f"{where}: {key} is not JSON-serialisable: {exc}") from None
