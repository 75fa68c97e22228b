"""The tenant boundary of ``ms`` on the SQLite Event Log (``pg_scoped`` is PostgreSQL's,
``scoped_common`` what both share): the Event Log as one agent sees it.

A scoped connection is a read-only connection (``mode=ro``,
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import quote

from ..errors import AgentNotReadable
from .records import SessionSummary
from .scoped_common import FTS_REFUSED, SUMMARY_COLUMNS, ScopedReads, scope_agents
from .sqlite_log import EventLog
from .sqlite_search import SQLITE

__all__ = [
    "BY_SESSION_VIEW",
    "MAX_COLUMNS",
    "MAX_VALUE_BYTES",
    "SCOPED_TABLES",
    "ScopedReader",
    "open_scoped",
]

# Tables of the log that may be exposed, each through a view scoped by its agent_id column.
SCOPED_TABLES = ("events", "session_stats")
BY_SESSION_VIEW = "events_by_session"
# No single value model SQL loads or makes (a cell, a concatenation, a randomblob) may exceed
# this, and a row has at most MAX_COLUMNS of them: SQLite refuses before the host holds it,
# which bounds what one fetched row can cost (more than the byte budget ever returns).
MAX_VALUE_BYTES = 32 * 1024 * 1024
MAX_COLUMNS = 100

_ALLOWED_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
_DENIED_FUNCTIONS = frozenset(
    {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "fts5"}
)
_TABLE_FUNCTIONS = frozenset({"json_each", "json_tree"})
_SUMMARY_SELECT = (
    "SELECT session_id, min(agent_id), count(*), coalesce(sum(tokens), 0), min(seq), "
    "max(seq), min(created_at), max(created_at)"
)


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


class ScopedReader(ScopedReads):
    """Every non-SQL read ``ms`` makes on SQLite, through one scoped connection."""

    dialect = SQLITE
    session_view = BY_SESSION_VIEW

    def __init__(self, log: EventLog, agents: Sequence[str]) -> None:
        self.log = log
        self.agents = scope_agents(agents[0], agents[1:]) if agents else ()
        self._db, self.views, self._denial = open_scoped(log, self.agents, model_sql=False)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def sessions(self, agents: Sequence[str] | None = None) -> list[SessionSummary]:
        """The sessions of ``agents`` (default: every readable agent), newest first."""
        wanted = self._wanted(agents)
        if not wanted:
            return []
        marks = ", ".join("?" * len(wanted))
        if "session_stats" in self.views:
            sql = (
                f"SELECT {SUMMARY_COLUMNS} FROM session_stats WHERE agent_id IN ({marks}) "
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
            sql = f"SELECT {SUMMARY_COLUMNS} FROM session_stats WHERE session_id = ?"
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
