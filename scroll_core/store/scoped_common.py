"""The tenant boundary of ``ms``: what its two backends share.

The agent is the unit of memory. Every read ``ms`` makes goes through a connection the
database itself scopes to the readable agents: ``sqlite_scoped`` builds it from TEMP views
and an authorizer, ``pg_scoped`` from row-level security. What does not depend on how is
here: which agent ids may be read (``scope_agents``), which statements count as reads
(``refuse_unless_reading``), and ``ScopedReads``, every non-SQL read (get, range, tool
call, session, search, payload) written once in the backend's SQL dialect.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from ..errors import AgentNotReadable, EventNotFound, QueryRefused
from ..telemetry import span
from .records import Event, SessionSummary
from .search import Hit, SearchDialect, SearchFilters, neighbour_seqs, run_search

__all__ = [
    "FTS_REFUSED",
    "MAX_AGENT_ID_CHARS",
    "READ_WORDS",
    "SUMMARY_COLUMNS",
    "ScopedEvent",
    "ScopedReads",
    "refuse_unless_reading",
    "scope_agents",
]

MAX_AGENT_ID_CHARS = 200
FTS_REFUSED = (
    "events_fts is not open to sql_query: its matches would cross the agent boundary; use "
    "ms.search(query) for full-text search"
)
SUMMARY_COLUMNS = "session_id, agent_id, events, tokens, first_seq, last_seq, first_at, last_at"


# Statements a model may run: reads only. Either backend enforces it again where the rows
# are read (the authorizer and its views on SQLite, a read-only transaction and role on
# PostgreSQL); checked first, a statement is refused with the same words on both.
READ_WORDS = frozenset({"select", "with", "values", "table"})


def refuse_unless_reading(leading_word: str) -> None:
    """``QueryRefused`` unless a statement's first keyword (``leading_word``, lower-cased;
    empty for a statement of only whitespace and comments) starts a read."""
    if leading_word not in READ_WORDS:
        raise QueryRefused(
            "read-only: only SELECT (or WITH/VALUES/TABLE) statements run here, not "
            f"{leading_word.upper() or 'an empty statement'}"
        )


def scope_agents(own: str, others: Iterable[str] = ()) -> tuple[str, ...]:
    """The readable agent set, own agent first, each id checked."""
    found: list[str] = []
    for agent in (own, *others):
        if not isinstance(agent, str) or not agent or len(agent) > MAX_AGENT_ID_CHARS:
            raise AgentNotReadable(f"invalid agent id {agent!r}")
        if "\x00" in agent:
            raise AgentNotReadable("an agent id cannot contain NUL")
        if agent not in found:
            found.append(agent)
    return tuple(found)


def _event_columns(mark: str) -> str:
    """An event's columns with its content cut in the database to the characters a
    parameter (``mark``) allows, then the length of the whole content."""
    return (
        f"seq, session_id, agent_id, kind, role, name, substr(content, 1, {mark}), "
        "tool_call_id, tool_input, payload_ref, payload_size, payload_media, headline, "
        "metadata, created_at, tokens, dedup_key, length(content)"
    )


@dataclass(frozen=True)
class ScopedEvent:
    """An event as read through a scope; ``content`` is cut at a character budget."""

    event: Event
    content_chars: int

    @property
    def content_cut(self) -> bool:
        return self.content_chars > len(self.event.content)


class ScopedReads(ABC):
    """The reads of ``ms`` that do not depend on the backend, over a scoped connection.

    ``agents`` are the readable agents, own agent first. Every read names its rows with SQL
    in the backend's parameter ``mark`` and ``_events`` fetches them through the connection
    the database scopes (views and an authorizer on SQLite, row-level security on
    PostgreSQL), so methods that would name an event outside those agents find nothing:
    ``get`` raises ``EventNotFound`` exactly as for a seq that does not exist, and a forged
    seq learns nothing about another agent's log.
    """

    log: Any
    agents: tuple[str, ...]
    # The scoped connection, one statement at a time under the lock.
    _db: Any
    _lock: threading.Lock
    #: The backend's SQL: its parameter mark, its BM25 candidates.
    dialect: SearchDialect
    #: What a session's events are read from (SQLite has a view that keeps its index).
    session_view = "events"

    @property
    def mark(self) -> str:
        return self.dialect.mark

    def _scope(self) -> tuple[str, tuple[Any, ...]]:
        """A condition (ending in AND) and its parameters that every event read adds to the
        database's own scoping; none where the scoped views are all there is."""
        return "", ()

    def _integer(self, value: Any) -> int:
        return int(value)

    def _wanted(self, agents: Sequence[str] | None) -> tuple[str, ...]:
        """``agents`` (default: every readable agent) less the ones not readable here."""
        return self.agents if agents is None else tuple(a for a in agents if a in self.agents)

    def _rows(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql, tuple(params)).fetchall()

    def _events(
        self,
        where: str,
        params: Sequence[Any],
        char_budget: int,
        limit: int | None = None,
        *,
        view: str = "events",
    ) -> list[ScopedEvent]:
        """Events matching ``where``, oldest first, their contents sharing ``char_budget``
        characters, each cut in the database (to what is not yet spent) so a huge content
        never reaches Python."""
        scope, bound = self._scope()
        sql = f"SELECT seq FROM {view} WHERE {scope}{where} ORDER BY seq"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        one = f"SELECT {_event_columns(self.mark)} FROM events WHERE {scope}seq = {self.mark}"
        found: list[ScopedEvent] = []
        left = max(0, int(char_budget))
        with self._lock:
            seqs = [row[0] for row in self._db.execute(sql, (*bound, *params)).fetchall()]
            for seq in seqs:
                row = self._db.execute(one, (left, *bound, seq)).fetchone()
                if row is None:
                    continue
                event: Event = self.log._event(row[:17])
                left = max(0, left - len(event.content))
                found.append(ScopedEvent(event, int(row[17] or 0)))
        return found

    @abstractmethod
    def close(self) -> None:
        """Release the scoped connection."""

    @abstractmethod
    def sessions(self, agents: Sequence[str] | None = None) -> list[SessionSummary]:
        """The sessions of ``agents`` (default: every readable agent), newest first."""

    @abstractmethod
    def session(self, session_id: str) -> SessionSummary | None:
        """One readable session's summary, or None."""

    @abstractmethod
    def table_sql(self, name: str) -> str | None:
        """How the log declares table ``name``, for ``ms.schema()``."""

    def _ranked(
        self, query: str, k: int, filters: SearchFilters, neighbours: int, before_seq: int | None
    ) -> list[Hit]:
        """``run_search`` on the scoped connection (under ``_lock``), neighbours filled."""
        tuning, stats = self.log.search_tuning, self.log.term_stats
        hits = run_search(self._db, query, k, filters, tuning, self.dialect, stats)
        return neighbour_seqs(self._db, hits, self.dialect, neighbours, before_seq)

    def get(self, seq: int, char_budget: int) -> ScopedEvent:
        found = self._events(f"seq = {self.mark}", (self._integer(seq),), char_budget)
        if not found:
            raise EventNotFound(seq)
        return found[0]

    def range(self, lo: int, hi: int, char_budget: int) -> list[ScopedEvent]:
        return self._events(
            f"seq BETWEEN {self.mark} AND {self.mark}",
            (self._integer(lo), self._integer(hi)),
            char_budget,
        )

    def by_tool_call(self, tool_call_id: str, char_budget: int) -> list[ScopedEvent]:
        return self._events(f"tool_call_id = {self.mark}", (str(tool_call_id),), char_budget)

    def session_events(
        self, session_id: str, after_seq: int, limit: int, char_budget: int
    ) -> list[ScopedEvent]:
        return self._events(
            f"session_id = {self.mark} AND seq > {self.mark}",
            (str(session_id), self._integer(after_seq)),
            char_budget,
            limit,
            view=self.session_view,
        )

    def search(
        self,
        query: str,
        k: int,
        *,
        agents: Sequence[str] | None = None,
        session_id: str | None = None,
        kind: str | Sequence[str] | None = None,
        since: str | datetime | date | None = None,
        until: str | datetime | date | None = None,
        before_seq: int | None = None,
        speaker: str | Sequence[str] | None = None,
        neighbours: int = 0,
    ) -> list[Hit]:
        """BM25 search (``run_search``) over the scoped rows, narrowed to ``agents``; each
        hit carries the seqs of up to ``neighbours`` turns on each side in its session."""
        wanted = self._wanted(agents)
        if not wanted:
            return []
        filters = SearchFilters(session_id, wanted, kind, since, until, before_seq, speaker=speaker)
        with span(
            "scroll.search",
            {"gen_ai.operation.name": "search_memory", "gen_ai.agent.id": wanted[0]},
            query=query,
            k=k,
            agents=list(wanted),
            filter_session=session_id,
            filter_kind=kind,
            since=since,
            until=until,
        ) as traced:
            with self._lock:
                hits = self._ranked(query, k, filters, neighbours, before_seq)
            if traced.recording:
                traced.set(hits=len(hits), hit_seqs=[h.seq for h in hits])
            return hits

    def payload(self, seq: int, byte_budget: int) -> Any:
        """The full payload of a readable event (its content when it has none)."""
        found = self._events(f"seq = {self.mark}", (self._integer(seq),), byte_budget)
        if not found:
            raise EventNotFound(seq)
        scoped = found[0]
        handle = scoped.event.payload
        if handle is None:
            if scoped.content_cut:
                raise QueryRefused(
                    f"event {seq} holds {scoped.content_chars:,} characters, more than the "
                    f"{byte_budget:,} one ms call returns; select parts of it with "
                    "sql_query and substr(content, start, length)"
                )
            return scoped.event.content
        if handle.size > byte_budget:
            raise QueryRefused(
                f"payload of event {seq} is {handle.size:,} bytes, more than the "
                f"{byte_budget:,} one ms call returns"
            )
        return handle.load()
