"""What the two backends of the Event Log share: ``sqlite_log.EventLog`` and
``pg_log.PgEventLog`` are each an ``_EventLogBase``.

The base validates events, routes large contents to the payload store, counts tokens
(overlapping the writes of a large batch), turns rows into ``Event``s, and runs every read
and search as one statement written once in the backend's parameter mark. A backend
supplies its connections, the appending transaction (``_append_numbered``), the limits of a
search (``_limited``), its search dialect, and the maintenance of its full-text index.
"""

from __future__ import annotations

import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import date, datetime
from functools import partial
from itertools import repeat
from operator import itemgetter
from typing import Any, NamedTuple, Self, TypeVar

from ..errors import EventNotFound, InvalidEvent
from ..telemetry import SESSION, span
from ..timeutil import format_ts, now_ts
from ..tokens import TokenCounter, default_counter
from .payloads import PayloadSource, encode_payload, ref_of
from .plain_rows import APPEND_KEYS, plain_values
from .records import Event, Seqs, SessionSummary
from .schema_common import sqlite_int
from .search import Hit, SearchDialect, SearchFilters, SearchTuning, TermStats, run_search

T = TypeVar("T")

__all__ = ["DEFAULT_PAYLOAD_THRESHOLD", "EVENT_COLUMNS", "coverage_problems", "keys_by_session"]


# Above the default print cap (32,000 characters plus its notice), so whatever a kernel cell
# prints is stored inline and shown whole in the working view; larger contents (imported
# tool outputs, artifacts) move to the payload store behind a preview of this length.
DEFAULT_PAYLOAD_THRESHOLD = 32768
# Rows per INSERT of a large batch; token counting of other chunks overlaps it.
_PIPELINE_CHUNK = 50


EVENT_COLUMNS = (
    "seq, session_id, agent_id, kind, role, name, content, tool_call_id, tool_input, "
    "payload_ref, payload_size, payload_media, headline, metadata, created_at, tokens, dedup_key"
)
# The per-session summary the append path keeps, one row per session (sqlite_schema m002,
# pg_schema m001).
SUMMARY_SELECT = (
    "SELECT session_id, agent_id, events, tokens, first_seq, last_seq, first_at, last_at "
    "FROM session_stats"
)


class _Row(NamedTuple):
    """A validated event ready for INSERT (a named tuple: a third of a frozen dataclass's
    cost to make, once per appended event)."""

    values: tuple[Any, ...]
    session_id: str
    dedup_key: str | None
    payload: bytes | None


# A ``_Row`` made from a (values, session_id, dedup_key, payload) tuple, and the parts of one
# read in C (``map`` over a chunk rather than a Python expression per row).
_new_row = partial(tuple.__new__, _Row)
ROW_VALUES = itemgetter(0)
_EVENT = itemgetter(1)  # of an (index, event) pair
_SESSION_ID = itemgetter(0)
_CONTENT = itemgetter(5)
_DEDUP_KEY = itemgetter(14)


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
    contents to the payload store, counting tokens, turning rows into ``Event``s, and the
    reads and the search, each one statement in the backend's parameter mark.

    A backend supplies ``payloads``, its connections (``_reader``; ``_writer`` and
    ``_readers`` for ``close``), ``_append_numbered`` (the transaction), ``_limited`` (a
    reader bounded by a search's limits), ``_dialect`` and the full-text maintenance.
    """

    payloads: PayloadSource
    payload_threshold: int
    tokens: TokenCounter
    search_tuning: SearchTuning
    # Whole-log term statistics, cached for searches that weigh terms by them.
    term_stats: TermStats
    _pool: ThreadPoolExecutor | None
    # Whether a large batch's tokens are counted on a worker thread, overlapping the
    # writes (False: on the calling thread, by the method that costs the least CPU there,
    # for a machine with one core to give).
    token_thread: bool
    # Set by each backend: its writing connection, its readers' connections (one per thread),
    # and the lock that serialises writes; ``close`` releases them all.
    _writer: Any
    _readers: list[Any]
    _write_lock: threading.RLock
    _closed: bool
    # Whether a text column can hold NUL (SQLite's can; PostgreSQL's text cannot, so there
    # content with NUL goes whole to the payload store like text that is not UTF-8).
    _text_holds_nul: bool = True
    # How the backend's SQL marks a parameter and ranks BM25 candidates (``sqlite_search``,
    # ``pg_search``).
    _dialect: SearchDialect

    def _init_common(
        self,
        payload_threshold: int,
        token_counter: TokenCounter | None,
        search_tuning: SearchTuning | None,
        token_thread: bool = True,
    ) -> None:
        if payload_threshold < 1:
            raise ValueError("payload_threshold must be at least 1 character")
        self.payload_threshold = payload_threshold
        self.tokens = token_counter or default_counter()
        self.search_tuning = search_tuning or SearchTuning()
        self.term_stats = TermStats()
        self._pool = None
        self.token_thread = token_thread

    @abstractmethod
    def _append_numbered(self, numbered: list[tuple[int, Mapping[str, Any]]]) -> Seqs:
        """Validate, store and number ``numbered`` (index, event) in one transaction."""

    @abstractmethod
    def _reader(self) -> Any:
        """This thread's read-only connection (``EventLogError`` once the log is closed)."""

    def _read(self, work: Callable[[Any], T]) -> T:
        """``work`` on this thread's reader; a backend may run it again on a fresh connection
        (so ``work`` only reads)."""
        return work(self._reader())

    @abstractmethod
    def _limited(
        self, time_limit_s: float | None, step_limit: int | None
    ) -> AbstractContextManager[Any]:
        """A reader connection on which what runs inside the block stops with
        ``SearchTimeout`` once it passes the limits the backend can apply."""

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
        """``numbered`` validated and counted chunk by chunk. A text whose count is cheap
        (``count_cheap``: ASCII, with tiktoken) is counted on the calling thread; in a large
        batch the rest go to a worker thread as soon as their chunk is validated, where the
        encoder runs without the GIL, overlapping the validation of later chunks and the
        writing of earlier ones. A small batch, or any batch without ``token_thread``, is
        counted on the calling thread."""
        chunks: list[tuple[list[_Row], list[int] | Future[list[int]]]] = []
        threaded = self.token_thread and len(numbered) > _PIPELINE_CHUNK
        cheap = getattr(self.tokens, "count_cheap_many", None)
        for i in range(0, len(numbered), _PIPELINE_CHUNK):
            rows = self._prepare_chunk(numbered[i : i + _PIPELINE_CHUNK])
            if not threaded:
                chunks.append((rows, self._count(rows)))
                continue
            counts = cheap(contents(rows)) if cheap else [None] * len(rows)
            rest = [j for j, n in enumerate(counts) if n is None]
            if not rest:
                chunks.append((rows, counts))  # type: ignore[arg-type]  # no None left
                continue
            pool = self._token_pool()
            chunks.append((rows, pool.submit(self._count_rest, rows, counts, rest)))
        return _Prepared(chunks)

    def _count_rest(self, rows: list[_Row], counts: list[int | None], rest: list[int]) -> list[int]:
        """``counts`` with its gaps (at ``rest``) counted, on the worker thread."""
        count = getattr(self.tokens, "count_many_gil_free", self.tokens.count_many)
        for j, n in zip(rest, count([rows[j].values[5] for j in rest]), strict=True):
            counts[j] = n
        return counts  # type: ignore[return-value]  # every gap was filled

    def _prepare_chunk(self, chunk: list[tuple[int, Mapping[str, Any]]]) -> list[_Row]:
        rows = self._plain_rows(chunk)
        if rows is not None:
            return rows  # (no payloads)
        rows = [self._prepare(i, event) for i, event in chunk]
        for row in rows:
            if row.payload is not None:
                self.payloads.put(row.payload)
        return rows

    def _plain_rows(self, chunk: list[tuple[int, Mapping[str, Any]]]) -> list[_Row] | None:
        """The rows of a chunk of plain events, checked column by column (``plain_rows``);
        None when one is not plain and the chunk must go event by event (``_prepare``)."""
        values = plain_values(
            list(map(_EVENT, chunk)), self.payload_threshold, self._text_holds_nul
        )
        if values is None:
            return None
        parts = zip(values, map(_SESSION_ID, values), map(_DEDUP_KEY, values), repeat(None))
        return list(map(_new_row, parts))

    def _count(self, rows: list[_Row]) -> list[int]:
        return self.tokens.count_many(contents(rows))

    def _token_pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scroll-tokens")
        return self._pool

    def _prepare(self, index: int, event: Mapping[str, Any]) -> _Row:
        if not APPEND_KEYS.issuperset(event):
            unknown = set(event) - APPEND_KEYS
            raise InvalidEvent(f"event {index}: unknown field(s) {', '.join(sorted(unknown))}")
        get = event.get
        session_id: Any = get("session_id")  # (checked below)
        kind = get("kind")
        agent_id = get("agent_id") or "main"
        role = get("role")
        name = get("name")
        tool_call_id = get("tool_call_id")
        headline = get("headline")
        dedup_key = get("dedup_key")
        if not _plain_short_fields(
            session_id, kind, agent_id, role, name, tool_call_id, headline, dedup_key
        ):
            where = f"event {index}"
            session_id = _required_text(event, "session_id", where)
            kind = _required_text(event, "kind", where)
            role = _optional_text(event, "role", where)
            name = _optional_text(event, "name", where)
            tool_call_id = _optional_text(event, "tool_call_id", where)
            headline = _optional_text(event, "headline", where)
            dedup_key = _optional_text(event, "dedup_key", where)
            if not isinstance(agent_id, str):
                raise InvalidEvent(f"{where}: agent_id must be a string")
            _refuse_nul(agent_id, "agent_id", where)
        where = f"event {index}"  # (for messages; an f-string is cheap beside the rest)

        raw_created = get("created_at")
        try:
            created_at = now_ts() if raw_created is None else format_ts(raw_created)
        except ValueError as exc:
            raise InvalidEvent(f"{where}: invalid created_at: {exc}") from None

        metadata = get("metadata")
        if metadata is None:
            metadata_json = "{}"
        else:
            metadata = metadata or {}
            if not isinstance(metadata, Mapping):
                raise InvalidEvent(f"{where}: metadata must be a mapping")
            metadata_json = _to_json(dict(metadata), where, "metadata") if metadata else "{}"
        tool_input = get("tool_input")
        tool_input_json = None if tool_input is None else _to_json(tool_input, where, "tool_input")

        content = get("content")
        payload_value = get("payload")
        if not (
            # The common content needs none of ``_split_content``'s routing: ASCII text (no
            # surrogates) that fits the row, without NUL where the backend cannot hold it.
            payload_value is None
            and type(content) is str
            and len(content) <= self.payload_threshold
            and content.isascii()
            and (self._text_holds_nul or "\x00" not in content)
        ):
            content, payload_value = self._split_content(content, payload_value, where)
        payload_bytes: bytes | None = None
        payload_ref = payload_size = payload_media = None
        if payload_value is not None:
            try:
                payload_bytes, payload_media = encode_payload(payload_value)
            except (TypeError, ValueError) as exc:
                raise InvalidEvent(f"{where}: payload cannot be stored: {exc}") from None
            payload_ref = ref_of(payload_bytes)
            payload_size = len(payload_bytes)
        searchable = 1 if get("searchable", True) else 0
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

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._read(lambda db: db.execute(sql, tuple(params)).fetchall())

    def get(self, seq: int) -> Event:
        """The event with this seq; ``EventNotFound`` when there is none (out of range too)."""
        if sqlite_int(seq) != int(seq):
            raise EventNotFound(int(seq))
        mark = self._dialect.mark
        rows = self._rows(f"SELECT {EVENT_COLUMNS} FROM events WHERE seq = {mark}", (int(seq),))
        if not rows:
            raise EventNotFound(seq)
        return self._event(rows[0])

    def range(self, lo: int, hi: int) -> list[Event]:
        """Events with ``lo <= seq <= hi`` in seq order."""
        mark = self._dialect.mark
        rows = self._rows(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE seq BETWEEN {mark} AND {mark} ORDER BY seq",
            (sqlite_int(lo), sqlite_int(hi)),
        )
        return [self._event(r) for r in rows]

    def session_events(
        self, session_id: str, after_seq: int = 0, limit: int | None = 100
    ) -> list[Event]:
        """A session's events with seq greater than ``after_seq``, oldest first."""
        mark = self._dialect.mark
        sql = (
            f"SELECT {EVENT_COLUMNS} FROM events WHERE session_id = {mark} AND seq > {mark} "
            "ORDER BY seq"
        )
        params: tuple[Any, ...] = (session_id, sqlite_int(after_seq))
        if limit is not None:
            sql += f" LIMIT {mark}"
            params += (max(0, sqlite_int(limit)),)
        return [self._event(r) for r in self._rows(sql, params)]

    def session_events_before(
        self, session_id: str, before_seq: int, limit: int = 100
    ) -> list[Event]:
        """The ``limit`` events of a session just before ``before_seq``, oldest first."""
        mark = self._dialect.mark
        rows = self._rows(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE session_id = {mark} AND seq < {mark} "
            f"ORDER BY seq DESC LIMIT {mark}",
            (session_id, sqlite_int(before_seq), max(0, sqlite_int(limit))),
        )
        return [self._event(r) for r in reversed(rows)]

    def session(self, session_id: str) -> SessionSummary | None:
        """One session's summary, or None when the log has no event of it."""
        rows = self._rows(
            f"{SUMMARY_SELECT} WHERE session_id = {self._dialect.mark}", (session_id,)
        )
        return SessionSummary(*rows[0]) if rows else None

    def by_tool_call(self, tool_call_id: str) -> list[Event]:
        """The events that carry ``tool_call_id`` (the call and its result), in seq order."""
        rows = self._rows(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE tool_call_id = {self._dialect.mark} "
            "ORDER BY seq",
            (tool_call_id,),
        )
        return [self._event(r) for r in rows]

    def sessions(self, *, after_seq: int = 0, limit: int | None = None) -> list[SessionSummary]:
        """Session summaries, the most recently written first.

        ``after_seq`` keeps the sessions written to after that seq; ``limit`` caps how many
        come back. Read from the summary table, so the cost follows the number of sessions
        returned, not the number of events.
        """
        mark = self._dialect.mark
        sql = f"{SUMMARY_SELECT} WHERE last_seq > {mark} ORDER BY last_seq DESC"
        params: tuple[Any, ...] = (sqlite_int(after_seq),)
        if limit is not None:
            sql += f" LIMIT {mark}"
            params += (max(0, sqlite_int(limit)),)
        return [SessionSummary(*r) for r in self._rows(sql, params)]

    def count(self, session_id: str | None = None) -> int:
        """How many events the log holds, in all or in one session."""
        sql = "SELECT coalesce(sum(events), 0) FROM session_stats"
        if session_id is None:
            return int(self._rows(sql)[0][0])
        return int(
            self._rows(f"{sql} WHERE session_id = {self._dialect.mark}", (session_id,))[0][0]
        )

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
        """BM25 search over content, headline and name. Never raises on the query text.

        Terms are OR-ed after stop-word removal; a turn also gains from matches in the turns
        next to it in its session (see ``search.SearchTuning``); ties go to the older event.
        ``since`` and ``until`` bound ``created_at`` half-open, ``[since, until)``;
        ``before_seq`` keeps only older events (the agent's active turn stays out, neighbours
        included). ``speaker`` keeps events whose ``name`` (speaker or tool) is one given.
        An empty query with a date bound lists that range in seq order.

        ``time_limit_s`` (seconds) interrupts a search that runs past it with
        ``SearchTimeout`` on either backend (SQLite checks it every 1000 VM instructions;
        PostgreSQL makes it the ``statement_timeout`` of the search's statements).
        ``step_limit`` counts SQLite VM instructions, checked every 1000; PostgreSQL has no
        equivalent, so there it is accepted and not applied (bound a search by time there).
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
            hits = self._read(lambda _: self._search(query, k, filters, time_limit_s, step_limit))
            if traced.recording:
                traced.set(hits=len(hits), hit_seqs=[h.seq for h in hits])
            return hits

    def _search(
        self,
        query: str,
        k: int,
        filters: SearchFilters,
        time_limit_s: float | None,
        step_limit: int | None,
    ) -> list[Hit]:
        if time_limit_s is None and step_limit is None:
            # What ``_limited`` gives on every backend when there is nothing to limit.
            db = self._reader()
            return run_search(
                db, query, k, filters, self.search_tuning, self._dialect, self.term_stats
            )
        with self._limited(time_limit_s, step_limit) as db:
            return run_search(
                db, query, k, filters, self.search_tuning, self._dialect, self.term_stats
            )


def contents(rows: list[_Row]) -> list[str]:
    """The inline content of each row (what its tokens are counted from)."""
    return list(map(_CONTENT, map(ROW_VALUES, rows)))


def keys_by_session(rows: list[_Row]) -> dict[str, list[str]]:
    """The dedup keys ``rows`` carry, per session, sorted and each once (what an append
    looks up in the log before it inserts)."""
    by_session: dict[str, set[str]] = {}
    for row in rows:
        if row.dedup_key is not None:
            by_session.setdefault(row.session_id, set()).add(row.dedup_key)
    return {session_id: sorted(keys) for session_id, keys in by_session.items()}


def coverage_problems(missing: Sequence[Any], extra: Sequence[Any]) -> list[str]:
    """What ``fts_check`` reports of the full-text index against the searchable events,
    from the (count, first seq) of the events it is missing and of its extra entries."""
    problems = []
    if missing[0]:
        problems.append(f"{missing[0]} searchable event(s) missing, first seq {missing[1]}")
    if extra[0]:
        problems.append(f"{extra[0]} entry(ies) for no searchable event, first {extra[1]}")
    return problems


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


def _plain_short_fields(
    session_id: Any,
    kind: Any,
    agent_id: Any,
    role: Any,
    name: Any,
    tool_call_id: Any,
    headline: Any,
    dedup_key: Any,
) -> bool:
    """True when an event's ids and names need none of the per-field checks: the required
    ones non-blank strings, the optional ones strings or None, all ASCII without NUL (so no
    surrogates either). One concatenation and two scans in C for the common event; any
    other goes through the per-field checks, which say what is wrong."""
    if type(session_id) is not str or type(kind) is not str or type(agent_id) is not str:
        return False
    if not session_id or session_id.isspace() or not kind or kind.isspace():
        return False
    try:  # (a field that is not a string cannot be added to one)
        joined = (
            session_id
            + kind
            + agent_id
            + ("" if role is None else role)
            + ("" if name is None else name)
            + ("" if tool_call_id is None else tool_call_id)
            + ("" if headline is None else headline)
            + ("" if dedup_key is None else dedup_key)
        )
    except TypeError:
        return False
    return type(joined) is str and joined.isascii() and "\x00" not in joined


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
    # an agent id with one could never be read back (``scoped_common.scope_agents``). Both backends
    # refuse it alike rather than one storing what the other cannot.
    if "\x00" in value:
        raise InvalidEvent(f"{where}: {key} contains NUL (0x00), which the log cannot store")


def _to_json(value: Any, where: str, key: str) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidEvent(f"{where}: {key} is not JSON-serialisable: {exc}") from None
