"""The Event Log as everything above it sees it: one interface, two backends.

``EventStore`` is what the view, eviction, the agent loop, ``ms``, ingest, replay and the
console use. Two classes implement it: ``EventLog`` (one SQLite file, the embedded default)
and ``PgEventLog`` (PostgreSQL, one history shared by every machine). ``open_event_store``
picks one from a path or a ``postgres://`` URL, as ``SCROLL_EVENTLOG_URL`` does for the
console.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime
from typing import Any, Protocol, Self, runtime_checkable

from ..tokens import TokenCounter
from .payloads import PayloadSource
from .records import Event, Seqs, SessionSummary
from .search import Hit, SearchTuning
from .sqlite_log import EventLog

__all__ = ["EventStore", "is_postgres_url", "open_event_store"]

_POSTGRES_SCHEMES = ("postgres://", "postgresql://")


@runtime_checkable
class EventStore(Protocol):
    """An append-only, searchable Event Log, whichever database holds it.

    Every implementation keeps the same guarantees: seqs are unique and only ever appear in
    increasing order to a reader; the database refuses to change or remove an event; a
    batch is all or nothing; a repeated (session, dedup key) returns the first event's seq;
    large contents go to content-addressed payloads behind lazy, sha256-checked handles.
    """

    #: "sqlite" or "postgres": which SQL dialect ``ms.sql_query`` speaks on this store.
    backend: str

    @property
    def location(self) -> str:
        """Where the log is, for messages (a file path, or a URL without its password)."""
        ...

    payloads: PayloadSource
    payload_threshold: int
    tokens: TokenCounter
    search_tuning: SearchTuning

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
    ) -> int: ...

    def append_many(self, events: Iterable[Mapping[str, Any]]) -> Seqs: ...

    def get(self, seq: int) -> Event: ...

    def range(self, lo: int, hi: int) -> list[Event]: ...

    def session_events(
        self, session_id: str, after_seq: int = 0, limit: int | None = 100
    ) -> list[Event]: ...

    def session_events_before(
        self, session_id: str, before_seq: int, limit: int = 100
    ) -> list[Event]: ...

    def session(self, session_id: str) -> SessionSummary | None: ...

    def by_tool_call(self, tool_call_id: str) -> list[Event]: ...

    def sessions(self, *, after_seq: int = 0, limit: int | None = None) -> list[SessionSummary]: ...

    def count(self, session_id: str | None = None) -> int: ...

    def last_seq(self) -> int: ...

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
        """BM25 search; ``time_limit_s`` bounds it on every backend, ``step_limit`` (SQLite
        VM instructions) only on SQLite."""
        ...

    def fts_check(self) -> int: ...

    def fts_rebuild(self) -> int: ...

    def fts_optimize(self) -> None: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...


def is_postgres_url(target: object) -> bool:
    return isinstance(target, str) and target.startswith(_POSTGRES_SCHEMES)


def open_event_store(
    target: str | os.PathLike[str],
    *,
    payload_dir: str | os.PathLike[str] | None = None,
    **options: Any,
) -> EventStore:
    """Open the Event Log at ``target``: a ``postgres://`` URL or a SQLite file path.

    ``options`` (``payload_threshold``, ``token_counter``, ``search_tuning``) go to either
    backend; ``payload_dir`` only means something to SQLite (PostgreSQL keeps payloads in
    the database, where every machine reaches them).
    """
    if is_postgres_url(target):
        from .pg_log import PgEventLog  # psycopg is only needed by deployments that use it

        return PgEventLog(str(target), **options)
    return EventLog(target, payload_dir=payload_dir, **options)
