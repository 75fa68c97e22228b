"""The Event Log as one agent sees it: the tenant boundary of ``ms``.

The agent is the unit of memory. A scoped connection is a read-only connection (``mode=ro``,
``query_only``) on which the name ``events`` is a TEMP view of only the readable agents' rows
(unqualified names resolve to ``temp`` first), and whose authorizer lets ``main.events`` be
read only through that view's inner view. The inner view has a random name per connection:
SQLite reports a CTE as the "view" responsible for a read, so a CTE named ``events`` wrapping
``main.events`` must not pass as the real view. Every other table is denied unless it is on
an explicit allow-list, so a table added to the log later stays invisible until it is
exposed here through a scoped view (``session_stats`` is, when present).

``events_fts`` is denied to SQL a model writes: FTS5 ``MATCH`` needs the virtual table
itself (it cannot go through a view), its internal reads are not attributable to a view, and
even ``count(*)`` over a MATCH would tell whether another agent's log holds a word.
``ScopedReader.search`` ranks with it on its own connection, joining every candidate to the
scoped view, and ``ms.search`` is the way to full-text search.

``ScopedReader`` serves every non-SQL ``ms`` read (get, range, tool call, sessions, search,
payloads) through its scoped connection, so no forged seq, session id or tool-call id can
reach another agent's rows: the SQL cannot see them. Its connection has one more scoped view,
``events_by_session``: the same rows with the agent term kept off the indexes, so a session
is read through ``events_session_seq`` instead of a scan of the whole agent.
"""

from __future__ import annotations

import secrets
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from urllib.parse import quote

from ..errors import AgentNotReadable, EventNotFound, QueryRefused
from ..telemetry import span
from .records import Event, SessionSummary
from .search import Hit, SearchFilters, neighbour_seqs, run_search
from .sqlite_log import EventLog
from .sqlite_search import SQLITE

__all__ = [
    "BY_SESSION_VIEW",
    "FTS_REFUSED",
    "SCOPED_TABLES",
    "ScopedEvent",
    "ScopedReader",
    "ScopedReads",
    "open_scoped",
    "refuse_unless_reading",
    "scope_agents",
]

# Tables of the log that may be exposed, each through a view scoped by its agent_id column.
SCOPED_TABLES = ("events", "session_stats")
BY_SESSION_VIEW = "events_by_session"
MAX_AGENT_ID_CHARS = 200
# No single value model SQL loads or makes (a cell, a concatenation, a randomblob) may exceed
# this, and a row has at most MAX_COLUMNS of them: SQLite refuses before the host holds it,
# which bounds what one fetched row can cost (more than the byte budget ever returns).
MAX_VALUE_BYTES = 32 * 1024 * 1024
MAX_COLUMNS = 100

FTS_REFUSED = (
    "events_fts is not open to sql_query: its matches would cross the agent boundary; use "
    "ms.search(query) for full-text search"
)

_ALLOWED_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
_DENIED_FUNCTIONS = frozenset(
    {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "fts5"}
)
_TABLE_FUNCTIONS = frozenset({"json_each", "json_tree"})
_EVENT_COLUMNS = (
    "seq, session_id, agent_id, kind, role, name, substr(content, 1, ?), tool_call_id, "
    "tool_input, payload_ref, payload_size, payload_media, headline, metadata, created_at, "
    "tokens, dedup_key, length(content)"
)
_SUMMARY_COLUMNS = "session_id, agent_id, events, tokens, first_seq, last_seq, first_at, last_at"
_SUMMARY_SELECT = (
    "SELECT session_id, min(agent_id), count(*), coalesce(sum(tokens), 0), min(seq), "
    "max(seq), min(created_at), max(created_at)"
)


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


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@dataclass
class _Denial:
    """Why the authorizer last said no, so the error can say it plainly."""

    message: str = ""


def open_scoped(
    log: EventLog, agents: Sequence[str], *, model_sql: bool
) -> tuple[sqlite3.Connection, tuple[str, ...], _Denial]:
    """A read-only connection that sees only ``agents``' rows.

    ``model_sql`` connections run SQL a model wrote: ``events_fts`` and ``sqlite_master``
    are denied there and no value may exceed ``MAX_VALUE_BYTES``. Returns the connection,
    the names of the scoped views it exposes, and the holder of the last denial reason.
    """
    if not agents:
        raise AgentNotReadable("a scope needs at least one agent")
    uri = f"file:{quote(str(log.path.resolve()))}?mode=ro"
    db = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
    token = secrets.token_hex(16)
    where = f"agent_id IN ({', '.join(_literal(a) for a in agents)})"
    present = {
        name
        for (name,) in db.execute(
            "SELECT name FROM main.sqlite_master WHERE type = 'table' AND name IN "
            f"({', '.join('?' * len(SCOPED_TABLES))})",
            SCOPED_TABLES,
        )
    }
    # table -> the inner views allowed to read it; exposed: the names SQL may read.
    sources: dict[str, set[str]] = {}
    exposed: list[str] = []

    def scoped_view(name: str, table: str, condition: str) -> None:
        inner = f"_scope_{name}_{token}"
        db.execute(f'CREATE TEMP VIEW "{inner}" AS SELECT * FROM main."{table}" WHERE {condition}')
        db.execute(f'CREATE TEMP VIEW "{name}" AS SELECT * FROM "{inner}"')
        sources.setdefault(table, set()).add(inner)
        exposed.append(name)

    for table in SCOPED_TABLES:
        if table in present:
            scoped_view(table, table, where)
    if not model_sql:
        # The same rows, with the agent term kept off the indexes (unary +), so a session's
        # events are found by events_session_seq rather than by scanning the whole agent.
        scoped_view(BY_SESSION_VIEW, "events", f"+{where}")
    db.execute("PRAGMA query_only = ON")
    if model_sql:
        db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        db.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        db.setlimit(sqlite3.SQLITE_LIMIT_COLUMN, MAX_COLUMNS)
    denial = _Denial()
    db.set_authorizer(_authorizer(sources, exposed, trusted=not model_sql, denial=denial))
    return db, tuple(exposed), denial


def _authorizer(
    sources: dict[str, set[str]], exposed: list[str], *, trusted: bool, denial: _Denial
) -> Callable[[int, str | None, str | None, str | None, str | None], int]:
    inner = {name for names in sources.values() for name in names}
    visible = frozenset(exposed) | frozenset(inner)
    readable = ", ".join(sorted(exposed))

    def deny(message: str) -> int:
        denial.message = message
        return sqlite3.SQLITE_DENY

    def authorize(
        action: int, arg1: str | None, arg2: str | None, db: str | None, src: str | None
    ) -> int:
        if action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master" and src is None:
            # FTS5's constructor (and eponymous tables) issue this while loading the schema;
            # the connection is mode=ro and query_only, so nothing can be written.
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA and arg1 == "data_version" and arg2 is None:
            return sqlite3.SQLITE_OK
        if action not in _ALLOWED_ACTIONS:
            return deny("read-only: only SELECT statements run here")
        if action == sqlite3.SQLITE_FUNCTION:
            if (arg2 or "").lower() in _DENIED_FUNCTIONS:
                return deny(f"function {arg2}() is not allowed")
            return sqlite3.SQLITE_OK
        if action != sqlite3.SQLITE_READ:
            return sqlite3.SQLITE_OK
        table = arg1 or ""
        if db is None or (db == "temp" and table in visible):
            # db is None only for a recursive CTE reading itself: no stored table.
            return sqlite3.SQLITE_OK
        if db == "main" and table in sources:
            if src in sources[table]:
                return sqlite3.SQLITE_OK
            return deny(
                f"main.{table} is not readable directly; read {table} (unqualified), "
                "which holds this agent's rows"
            )
        if table in _TABLE_FUNCTIONS or (table == "sqlite_master" and arg2 == "ROWID"):
            # Table-valued functions that read only their arguments; loading any virtual
            # table reads sqlite_master's rowid (never its text).
            return sqlite3.SQLITE_OK
        if (
            trusted
            and db == "main"
            and (table == "sqlite_master" or table.startswith("events_fts"))
        ):
            # Only the reader's own SQL runs here: it ranks with FTS5 and joins every
            # candidate to the scoped view.
            return sqlite3.SQLITE_OK
        if table.startswith("events_fts"):
            return deny(FTS_REFUSED)
        return deny(f"table {table!r} is not readable here; readable: {readable}")

    return authorize


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
    _lock: threading.Lock
    #: The backend's parameter mark.
    mark = "?"
    #: What a session's events are read from (SQLite has a view that keeps its index).
    session_view = "events"

    @abstractmethod
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
        characters, each cut in the database so a huge content never reaches Python."""

    def _cut_to_budget(
        self, seqs: Sequence[int], char_budget: int, row_at: Callable[[int, int], Any]
    ) -> list[ScopedEvent]:
        """The events at ``seqs`` in order, their contents sharing ``char_budget``: ``row_at(
        left, seq)`` reads one row with its content cut in the database to the ``left``
        characters not yet spent (None when the row is gone)."""
        found: list[ScopedEvent] = []
        left = max(0, int(char_budget))
        for seq in seqs:
            row = row_at(left, seq)
            if row is None:
                continue
            event = self.log._event(row[:17])
            left = max(0, left - len(event.content))
            found.append(ScopedEvent(event, int(row[17] or 0)))
        return found

    @abstractmethod
    def _ranked(
        self, query: str, k: int, filters: SearchFilters, neighbours: int, before_seq: int | None
    ) -> list[Hit]:
        """``run_search`` on the scoped connection (under ``_lock``), neighbours filled."""

    def _integer(self, value: Any) -> int:
        return int(value)

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
        wanted = self.agents if agents is None else tuple(a for a in agents if a in self.agents)
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


class ScopedReader(ScopedReads):
    """Every non-SQL read ``ms`` makes on SQLite, through one scoped connection."""

    session_view = BY_SESSION_VIEW

    def __init__(self, log: EventLog, agents: Sequence[str]) -> None:
        self.log = log
        self.agents = scope_agents(agents[0], agents[1:]) if agents else ()
        self._db, self.views, self._denial = open_scoped(log, self.agents, model_sql=False)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

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
        sql = f"SELECT seq FROM {view} WHERE {where} ORDER BY seq"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        one = f"SELECT {_EVENT_COLUMNS} FROM events WHERE seq = ?"
        with self._lock:
            seqs = [row[0] for row in self._db.execute(sql, tuple(params)).fetchall()]
            return self._cut_to_budget(
                seqs, char_budget, lambda left, seq: self._db.execute(one, (left, seq)).fetchone()
            )

    def _ranked(
        self, query: str, k: int, filters: SearchFilters, neighbours: int, before_seq: int | None
    ) -> list[Hit]:
        hits = run_search(
            self._db, query, k, filters, self.log.search_tuning, SQLITE, self.log.term_stats
        )
        return neighbour_seqs(self._db, hits, SQLITE, neighbours, before_seq)

    def sessions(self, agents: Sequence[str] | None = None) -> list[SessionSummary]:
        """The sessions of ``agents`` (default: every readable agent), newest first."""
        wanted = self.agents if agents is None else tuple(a for a in agents if a in self.agents)
        if not wanted:
            return []
        marks = ", ".join("?" * len(wanted))
        if "session_stats" in self.views:
            sql = (
                f"SELECT {_SUMMARY_COLUMNS} FROM session_stats WHERE agent_id IN ({marks}) "
                "ORDER BY last_seq DESC"
            )
        else:
            sql = (
                f"{_SUMMARY_SELECT} FROM events WHERE agent_id IN ({marks}) "
                "GROUP BY session_id ORDER BY max(seq) DESC"
            )
        return [SessionSummary(*row) for row in self._rows(sql, wanted)]

    def session(self, session_id: str) -> SessionSummary | None:
        if "session_stats" in self.views:
            sql = f"SELECT {_SUMMARY_COLUMNS} FROM session_stats WHERE session_id = ?"
        else:
            sql = (
                f"{_SUMMARY_SELECT} FROM {BY_SESSION_VIEW} WHERE session_id = ? GROUP BY session_id"
            )
        rows = self._rows(sql, (str(session_id),))
        return SessionSummary(*rows[0]) if rows else None

    def table_sql(self, name: str) -> str | None:
        """How the log declares table ``name`` (what a scoped view of it filters)."""
        rows = self._rows("SELECT sql FROM main.sqlite_master WHERE name = ?", (name,))
        return str(rows[0][0]) if rows else None
