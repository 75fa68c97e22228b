"""The tenant boundary of ``ms`` on the PostgreSQL Event Log (``sqlite_scoped`` is SQLite's,
``scoped_common`` what both share).

Two paths, as on SQLite:

- ``PgScopedReader`` serves every non-SQL read (get, range, tool call, sessions, search,
  payloads) on its own connection, switched to ``scroll_host_reader``: row-level security
  shows it only the readable agents' events, summaries and full-text rows (and every
  statement also carries ``agent_id = ANY(<readable agents>)`` as a bound parameter), so
  no forged seq, session id or tool-call id reaches another agent's rows.
- ``PgModelSql`` runs the SQL a model writes, on its own connection logged in as a member
  of ``scroll_reader`` (``reader_url``): SELECT on ``events`` and ``session_stats`` only,
  row-level security showing only the agents the host registered for that connection's
  backend pid (``pg_schema.m002_ms_reader`` says why a pid and not a setting), every call in
  its own READ ONLY transaction with a ``statement_timeout``, rolled back afterwards, and
  rows streamed through a server-side cursor so the row cap and byte budget stop the fetch;
  a row over the byte budget on its own is sized and withheld by the server (``_capped``).
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import errors as pgerrors

from ..errors import QueryRefused
from .pg_schema import HOST_READER_ROLE
from .pg_search import PG_DIALECT
from .records import SessionSummary
from .schema_common import sqlite_int
from .scoped_common import (
    FTS_REFUSED,
    SUMMARY_COLUMNS,
    ScopedReads,
    refuse_unless_reading,
    scope_agents,
)

if TYPE_CHECKING:
    from .pg_log import PgEventLog

__all__ = ["PgModelSql", "PgScopedReader", "to_pg_params"]

_FETCH = 50
# A quoted literal, quoted identifier, dollar-quoted string or comment (skipped when
# placeholders are translated), or one of the characters that are translated.
_SQL_TOKENS = re.compile(
    r"'(?:[^']|'')*'?|\"(?:[^\"]|\"\")*\"?|(\$[A-Za-z_0-9]*\$).*?(?:\1|$)|--[^\n]*|/\*.*?(?:\*/|$)"
    r"|::|:[A-Za-z_][A-Za-z_0-9]*|\?|%",
    re.DOTALL,
)


class PgScopedReader(ScopedReads):
    """Every non-SQL read ``ms`` makes on PostgreSQL, narrowed to ``agents``."""

    views = ("events", "session_stats")
    dialect = PG_DIALECT

    def __init__(self, log: PgEventLog, agents: Sequence[str]) -> None:
        self.log = log
        self.agents = scope_agents(agents[0], agents[1:]) if agents else ()
        self._lock = threading.Lock()
        self._db = _scoped_connection(log, log.url, self.agents, role=HOST_READER_ROLE)

    def close(self) -> None:
        with self._lock:
            _release(self.log, self._db)

    def _integer(self, value: Any) -> int:
        return sqlite_int(value)

    def _scope(self) -> tuple[str, tuple[Any, ...]]:
        # Row-level security scopes the rows; the agent term is also bound in every statement.
        return "agent_id = ANY(%s) AND ", (list(self.agents),)

    def sessions(self, agents: Sequence[str] | None = None) -> list[SessionSummary]:
        wanted = self._wanted(agents)
        if not wanted:
            return []
        rows = self._rows(
            f"SELECT {SUMMARY_COLUMNS} FROM session_stats WHERE agent_id = ANY(%s) "
            "ORDER BY last_seq DESC",
            (list(wanted),),
        )
        return [SessionSummary(*row) for row in rows]

    def session(self, session_id: str) -> SessionSummary | None:
        rows = self._rows(
            f"SELECT {SUMMARY_COLUMNS} FROM session_stats "
            "WHERE session_id = %s AND agent_id = ANY(%s)",
            (str(session_id), list(self.agents)),
        )
        return SessionSummary(*rows[0]) if rows else None

    def table_sql(self, name: str) -> str | None:
        """The table's columns and types, in the form of a CREATE TABLE."""
        rows = self._rows(
            "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = %s ORDER BY ordinal_position",
            (name,),
        )
        if not rows:
            return None
        columns = ", ".join(
            f"{col} {kind.upper()}{' NOT NULL' if nullable == 'NO' else ''}"
            for col, kind, nullable in rows
        )
        return f"CREATE TABLE {name} ({columns})"


class PgModelSql:
    """Model SQL on PostgreSQL: a reader-role connection scoped to ``agents``."""

    def __init__(self, log: PgEventLog, agents: Sequence[str]) -> None:
        if not log.reader_url:
            raise QueryRefused(
                "sql_query on the PostgreSQL Event Log needs a read-only login: set "
                "SCROLL_EVENTLOG_READER_URL (a role granted scroll_reader) for this deployment"
            )
        self.log = log
        self.agents = tuple(agents)
        self._db = _scoped_connection(log, log.reader_url, self.agents)

    def close(self) -> None:
        _release(self.log, self._db)

    def query(
        self,
        sql: str,
        params: Any,
        *,
        cap: int | None,
        byte_budget: int,
        time_limit_s: float,
        leading_word: str,
    ) -> tuple[list[str], list[tuple[Any, ...]], str | None]:
        refuse_unless_reading(leading_word)  # the transaction is read-only as well
        text, bound = to_pg_params(sql, params)
        rows: list[tuple[Any, ...]] = []
        truncated_by: str | None = None
        columns: list[str] = []
        try:
            with self._db.transaction(force_rollback=True):
                self._db.execute("SET TRANSACTION READ ONLY")
                self._db.execute(
                    f"SET LOCAL statement_timeout = {max(1, int(time_limit_s * 1000))}"
                )
                # Declared only (planned, not run) to learn the columns and their types.
                with self._db.cursor(name=f"ms_{uuid.uuid4().hex[:12]}") as probe:
                    probe.execute(text, bound)
                    described = [(d.name, d.type_code) for d in probe.description or ()]
                columns = [name for name, _ in described]
                capped = _capped(text, [oid for _, oid in described], byte_budget)
                with self._db.cursor(name=f"ms_{uuid.uuid4().hex[:12]}") as cursor:
                    cursor.itersize = _FETCH
                    cursor.execute(capped or text, bound)
                    size = 0
                    while truncated_by is None:
                        batch = cursor.fetchmany(_FETCH)
                        if not batch:
                            break
                        for row in batch:
                            if cap is not None and len(rows) >= cap:
                                truncated_by = "rows"
                                break
                            if capped and row[-1]:  # over the budget on its own: not sent
                                truncated_by = "bytes"
                                break
                            values = tuple(row[:-1]) if capped else tuple(row)
                            size += sum(len(v) if isinstance(v, str | bytes) else 8 for v in values)
                            if size > byte_budget:
                                truncated_by = "bytes"
                                break
                            rows.append(values)
        except pgerrors.QueryCanceled:
            raise QueryRefused(f"query stopped at the {time_limit_s:g}s time limit") from None
        except pgerrors.InsufficientPrivilege as exc:
            if "events_fts" in sql.lower():
                raise QueryRefused(FTS_REFUSED) from None
            raise QueryRefused(
                f"not readable here ({_first_line(exc)}); readable: events, session_stats"
            ) from None
        except pgerrors.ReadOnlySqlTransaction as exc:
            raise QueryRefused(f"read-only: {_first_line(exc)}") from None
        except pgerrors.SyntaxError as exc:
            # FTS5's ``events_fts MATCH`` is a syntax error here before any privilege check;
            # point the model to ms.search as SQLite's refusal does.
            if "events_fts" in sql.lower():
                raise QueryRefused(FTS_REFUSED) from None
            raise QueryRefused(_first_line(exc)) from None
        except (psycopg.Error, ValueError, TypeError, KeyError, IndexError) as exc:
            raise QueryRefused(_first_line(exc)) from None
        return columns, rows, truncated_by


# Types whose values have a small fixed size (bool, "char", int2/4/8, oid, xid, cid, float4/8,
# money, date, time, timetz, timestamp(tz), interval, uuid): never worth measuring.
_FIXED_SIZE_TYPES = frozenset(
    {16, 18, 20, 21, 23, 26, 28, 29, 700, 701, 790, 1082, 1083, 1114, 1184, 1186, 1266, 2950}
)
# text, varchar, bpchar, name: measured in characters as they are; bytea in bytes.
_TEXT_TYPES = frozenset({19, 25, 1042, 1043})
_BYTEA = 17


def _capped(sql: str, oids: Sequence[int], byte_budget: int) -> str | None:
    """Model SQL wrapped so that no row larger than ``byte_budget`` crosses the wire.

    A row is sized in the server as the fetch loop sizes it (characters of text, bytes of
    bytea, 8 for a fixed-size value, the text form of anything else); a row over the budget
    on its own comes back with its variable-size values NULL and the last column true, so
    the host stops there without ever holding it (the SQLite side cuts each text value at
    the budget as it is decoded, and refuses any value over its length limit). None when
    the statement has no columns to wrap.
    """
    if not oids:
        return None
    body = sql.rstrip().rstrip(";").rstrip()
    names = [f"c{i}" for i in range(len(oids))]
    sizes = []
    for name, oid in zip(names, oids, strict=True):
        if oid in _FIXED_SIZE_TYPES:
            sizes.append("8")
        elif oid in _TEXT_TYPES:
            sizes.append(f"coalesce(char_length(q.{name}), 0)")
        elif oid == _BYTEA:
            sizes.append(f"coalesce(octet_length(q.{name}), 0)")
        else:
            sizes.append(f"coalesce(char_length(q.{name}::text), 0)")
    picked = ", ".join(
        f"q.{name}" if oid in _FIXED_SIZE_TYPES else f"CASE WHEN o.over THEN NULL ELSE q.{name} END"
        for name, oid in zip(names, oids, strict=True)
    )
    return (
        f"SELECT {picked}, o.over FROM (\n{body}\n) AS q({', '.join(names)}) "
        f"CROSS JOIN LATERAL (SELECT ({' + '.join(sizes)})::bigint > {int(byte_budget)} AS over) o"
    )


def _scoped_connection(
    log: PgEventLog, url: str, agents: Sequence[str], *, role: str | None = None
) -> psycopg.Connection[Any]:
    """A read-only connection whose backend pid the host has registered in
    ``scroll_scope`` with ``agents``; switched to ``role`` when one is given."""
    try:
        db = psycopg.connect(
            url, autocommit=True, options="-c jit=off -c default_transaction_read_only=on"
        )
    except psycopg.OperationalError as exc:
        raise QueryRefused(f"cannot open a scoped connection: {_first_line(exc)}") from None
    try:
        with log._write() as writer:
            writer.execute(
                "INSERT INTO scroll_scope (pid, agents) VALUES (%s, %s) ON CONFLICT (pid) "
                "DO UPDATE SET agents = excluded.agents, set_at = now()",
                (db.info.backend_pid, list(agents)),
            )
        if role is not None:
            db.execute(f"SET ROLE {role}")
    except BaseException:
        db.close()
        raise
    return db


def _release(log: PgEventLog, db: psycopg.Connection[Any]) -> None:
    if db.closed:
        return
    pid = db.info.backend_pid
    db.close()
    try:
        with log._write() as writer:
            writer.execute("DELETE FROM scroll_scope WHERE pid = %s", (pid,))
    except Exception:  # the log may be closed first; a stale row scopes no live connection
        pass


def to_pg_params(sql: str, params: Any) -> tuple[str, Any]:
    """SQL written with SQLite placeholders (``?`` with a list, ``:name`` with a dict) in
    psycopg's (``%s``, ``%(name)s``), every other ``%`` doubled. Literals, quoted names and
    comments are left alone (but their ``%`` doubled too: psycopg reads the whole text).
    SQL already using ``%s``/``%(name)s`` is passed on as it is; without params, so is
    any ``%``."""
    if not params:
        return sql, None
    found = {m.group(0) for m in _SQL_TOKENS.finditer(sql) if m.group(0) in ("?",)} or {
        m.group(0)
        for m in _SQL_TOKENS.finditer(sql)
        if m.group(0).startswith(":") and m.group(0) != "::"
    }
    if not found:
        return sql, params
    named = isinstance(params, dict)

    def swap(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "?" and not named:
            return "%s"
        if named and token.startswith(":") and token != "::":
            return f"%({token[1:]})s"
        return token.replace("%", "%%")

    return _SQL_TOKENS.sub(swap, sql), params if named else list(params)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
