"""``ms``: the Event Log as the kernel sees it, served by the host.

The kernel never touches the log file. Each ``ms.*`` call travels over the pipe and runs
here, against ``EventLog``'s read methods and, for ``sql_query``, a separate read-only
connection (``mode=ro``) whose authorizer allows only SELECT, READ and FUNCTION, with a row
cap, an explicit truncation flag and a time limit. Scope defaults to the current agent across
its sessions; search leaves out the active turn. Every call is recorded in ``calls``.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from ..errors import QueryRefused
from ..eventlog import Event, EventLog
from ..telemetry import span
from ..timeutil import parse_ts
from .protocol import to_wire

__all__ = ["MsCall", "MsCapability", "QueryRefused"]

DEFAULT_ROW_CAP = 1000
DEFAULT_SQL_TIME_LIMIT_S = 2.0
MAX_EXPAND = 500
MAX_SQL_CHARS = 100_000
MAX_SEQS_RECORDED = 1000
ALL = "*"
# The span each ms call opens (a child of the cell's ``execute_tool`` span); the rest are
# ``scroll.ms.<name>``.
SPAN_NAMES = {
    "search": "search_memory",
    "expand": "scroll.expand",
    "sql_query": "scroll.sql_query",
    "recall_tool": "scroll.recall_tool",
}
# Calls whose seqs are mapped to the evicted blocks they hit (retrieval counts per block).
_RESOLVED = frozenset({"expand", "recall_tool"})

_ALLOWED_SQL_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)
_DENIED_FUNCTIONS = frozenset({"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"})

SCHEMA_NOTES = (
    "events is append-only; seq is the address of every event. created_at is ISO-8601 UTC. "
    "content may be a bounded preview when payload_ref is set: expand(seq).payload.load() "
    "returns the full text. events_fts(content, headline) supports MATCH with bm25(). "
    "sql_query is read-only, capped in rows and time; aggregate in SQL or in the kernel."
)


@dataclass
class MsCall:
    """One ``ms`` call: what was asked, which events it touched, how long, how big."""

    name: str
    args: list[Any]
    kwargs: dict[str, Any]
    seqs: list[int] = field(default_factory=list)
    duration_ms: float = 0.0
    result_chars: int = 0
    error: str | None = None


class MsCapability:
    """The host side of ``ms`` for one session of one agent."""

    def __init__(
        self,
        log: EventLog,
        *,
        agent_id: str = "main",
        session_id: str | None = None,
        row_cap: int = DEFAULT_ROW_CAP,
        sql_time_limit_s: float = DEFAULT_SQL_TIME_LIMIT_S,
        block_resolver: Callable[[int], Any] | None = None,
    ) -> None:
        self.log = log
        # seq -> the evicted block holding it (an IndexBlock, its key, or None); e.g. the
        # session's ``index.block_for``. Used only to say in telemetry which block an
        # expand hit.
        self.block_resolver = block_resolver
        self.agent_id = agent_id
        self.session_id = session_id
        self.row_cap = row_cap
        self.sql_time_limit_s = sql_time_limit_s
        self.active_from_seq: int | None = None
        self.calls: list[MsCall] = []
        self._db: sqlite3.Connection | None = None
        self._db_lock = threading.Lock()

    # -- host-facing ----------------------------------------------------------------------

    def functions(self) -> dict[str, Callable[..., Any]]:
        """The host functions to register on a kernel, each recorded in ``calls``."""
        table: dict[str, Callable[..., Any]] = {
            "search": self.search,
            "expand": self.expand,
            "sql_query": self.sql_query,
            "days_between": self.days_between,
            "recall_tool": self.recall_tool,
            "sessions": self.sessions,
            "session": self.session,
            "schema": self.schema,
            "_payload": self._payload,
        }
        return {f"ms.{name}": self._recorded(name, fn) for name, fn in table.items()}

    def _span_attributes(self, name: str, record: MsCall, value: Any) -> dict[str, Any]:
        """What a span says about one finished call: its range, size and the blocks hit."""
        attrs: dict[str, Any] = {"result_chars": record.result_chars, "events": len(record.seqs)}
        if record.seqs:
            attrs["seq_lo"], attrs["seq_hi"] = record.seqs[0], record.seqs[-1]
        args = record.args
        if name == "expand" and args:
            attrs["requested_lo"] = args[0]
            attrs["requested_hi"] = args[1] if len(args) > 1 else args[0]
        elif name == "search":
            attrs["query"] = args[0] if args else record.kwargs.get("query")
            attrs["hits"] = len(record.seqs)
            attrs["hit_seqs"] = record.seqs
        elif name == "sql_query":
            attrs["sql"] = args[0] if args else record.kwargs.get("sql")
            if isinstance(value, dict):
                attrs["rows"] = value.get("row_count")
                attrs["truncated"] = value.get("truncated")
        elif name == "recall_tool":
            attrs["tool_call_id"] = args[0] if args else record.kwargs.get("tool_call_id")
        if name in _RESOLVED and self.block_resolver is not None and record.seqs:
            blocks = self._blocks(record.seqs)
            attrs["evicted"] = bool(blocks)
            if blocks:
                attrs["block"] = blocks[0][0]
                attrs["blocks"] = [key for key, _ in blocks]
                attrs["tier"] = blocks[0][1]
        return attrs

    def _blocks(self, seqs: list[int]) -> list[tuple[str, int | None]]:
        """The distinct evicted blocks holding ``seqs`` (sorted), as (key, tier)."""
        resolver = self.block_resolver
        assert resolver is not None
        found: list[tuple[str, int | None]] = []
        last: Any = None
        for seq in seqs:
            if last is not None and hasattr(last, "contains") and last.contains(seq):
                continue
            try:
                block = resolver(seq)
            except Exception:  # telemetry must never fail the model's call
                block = None
            if block is None:
                continue
            key = block if isinstance(block, str) else str(getattr(block, "key", block))
            if not found or found[-1][0] != key:
                found.append((key, getattr(block, "tier", None)))
            last = block
        return found

    def begin_turn(self, first_seq: int | None) -> None:
        """Events from ``first_seq`` on belong to the active turn: search skips them."""
        self.active_from_seq = first_seq

    def close(self) -> None:
        with self._db_lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    def _recorded(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        span_name = SPAN_NAMES.get(name, f"scroll.ms.{name}")
        operation = {"gen_ai.operation.name": "search_memory"} if name == "search" else None

        def call(*args: Any, **kwargs: Any) -> Any:
            record = MsCall(name=name, args=list(args), kwargs=dict(kwargs))
            with span(span_name, operation, ms_call=name, agent=self.agent_id) as traced:
                began = time.perf_counter()
                try:
                    value, seqs = fn(*args, **kwargs)
                except Exception as exc:
                    record.error = f"{type(exc).__name__}: {exc}"
                    raise
                finally:
                    record.duration_ms = (time.perf_counter() - began) * 1000
                    self.calls.append(record)
                wire = to_wire(value)
                record.seqs = sorted(set(seqs))[:MAX_SEQS_RECORDED]
                record.result_chars = len(json.dumps(wire, default=str))
                if traced.recording:
                    traced.set(**self._span_attributes(name, record, value))
            return wire

        call.__name__ = name
        return call

    # -- the surface ----------------------------------------------------------------------

    def search(
        self,
        query: str,
        k: int = 10,
        *,
        session: str | None = None,
        kind: str | Sequence[str] | None = None,
        since: str | None = None,
        until: str | None = None,
        on: str | None = None,
        agent: str | None = None,
    ) -> tuple[list[dict[str, Any]], list[int]]:
        if not isinstance(query, str):
            raise TypeError("query must be a str")
        k = max(0, min(int(k), 200))
        if on is not None:
            day = parse_ts(on).date()
            since, until = day.isoformat(), (day + timedelta(days=1)).isoformat()
        hits = self.log.search(
            query,
            k,
            session_id=None if session in (None, ALL) else session,
            agent_id=self._agent(agent),
            kind=kind,
            since=since,
            until=until,
            before_seq=self.active_from_seq,
        )
        return [to_wire(h) for h in hits], [h.seq for h in hits]

    def expand(self, lo: int, hi: int | None = None) -> tuple[Any, list[int]]:
        lo = int(lo)
        if hi is None:
            event = self.log.get(lo)
            return _event(event), [event.seq]
        hi = int(hi)
        if hi < lo:
            raise ValueError(f"expand({lo}, {hi}): hi is below lo")
        if hi - lo + 1 > MAX_EXPAND:
            raise ValueError(
                f"expand spans at most {MAX_EXPAND} seqs; ask for a smaller range or use "
                "sql_query to select columns"
            )
        events = self.log.range(lo, hi)
        return [_event(e) for e in events], [e.seq for e in events]

    def recall_tool(self, tool_call_id: str) -> tuple[list[dict[str, Any]], list[int]]:
        events = self.log.by_tool_call(str(tool_call_id))
        return [_event(e) for e in events], [e.seq for e in events]

    def sessions(self, *, agent: str | None = None) -> tuple[list[Any], list[int]]:
        wanted = self._agent(agent)
        found = [s for s in self.log.sessions() if wanted is None or s.agent_id == wanted]
        return found, []

    def session(
        self, session_id: str, *, after_seq: int = 0, limit: int = 200
    ) -> tuple[dict[str, Any], list[int]]:
        summary = next((s for s in self.log.sessions() if s.session_id == session_id), None)
        if summary is None:
            raise LookupError(f"no session {session_id!r}")
        events = self.log.session_events(
            session_id, after_seq=int(after_seq), limit=max(1, min(int(limit), MAX_EXPAND))
        )
        body = {
            "__scroll__": "record",
            "type": "Session",
            "fields": {
                **to_wire(summary)["fields"],
                "event_count": summary.events,
                "events": [_event(e) for e in events],
            },
        }
        return body, [e.seq for e in events]

    def days_between(self, d1: str, d2: str, inclusive: bool = False) -> tuple[int, list[int]]:
        first, second = _day(d1), _day(d2)
        days = (second - first).days
        if inclusive:
            days += 1 if days >= 0 else -1
        return days, []

    def schema(self) -> tuple[dict[str, Any], list[int]]:
        rows = self._query(
            "SELECT name, sql FROM sqlite_master WHERE type IN ('table', 'view') "
            "AND name NOT LIKE 'sqlite_%' AND name NOT LIKE 'events_fts_%' "
            "AND substr(name, 1, 1) != '_' ORDER BY name",
            (),
        )[1]
        tables: dict[str, dict[str, Any]] = {}
        for name, create_sql in rows:
            columns = self._query(f'SELECT * FROM "{name}" LIMIT 0', ())[0]
            tables[name] = {"columns": columns, "sql": create_sql}
        return {"tables": tables, "notes": SCHEMA_NOTES, "row_cap": self.row_cap}, []

    def sql_query(self, sql: str, params: Any = None) -> tuple[dict[str, Any], list[int]]:
        if not isinstance(sql, str):
            raise QueryRefused("sql must be a str")
        if len(sql) > MAX_SQL_CHARS:
            raise QueryRefused(f"sql longer than {MAX_SQL_CHARS} characters")
        if params is None:
            params = ()
        if not isinstance(params, (list, tuple, dict)):
            raise QueryRefused("params must be a list or a dict")
        columns, rows, truncated = self._query(sql, params, cap=self.row_cap)
        seqs: list[int] = []
        if "seq" in columns:
            at = columns.index("seq")
            seqs = [r[at] for r in rows[:MAX_SEQS_RECORDED] if isinstance(r[at], int)]
        result = {
            "columns": columns,
            "rows": [list(r) for r in rows],
            "row_count": len(rows),
            "truncated": truncated,
            "row_cap": self.row_cap,
        }
        return result, seqs

    def _payload(self, seq: int) -> tuple[Any, list[int]]:
        event = self.log.get(int(seq))
        handle = event.payload
        if handle is None:
            return event.content, [event.seq]
        return handle.load(), [event.seq]

    # -- the read-only connection ---------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            uri = f"file:{self.log.path.resolve()}?mode=ro"
            db = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA query_only = ON")
            db.set_authorizer(_authorize)
            self._db = db
        return self._db

    def _query(
        self, sql: str, params: Any, cap: int | None = None
    ) -> tuple[list[str], list[tuple[Any, ...]], bool]:
        with self._db_lock:
            db = self._connection()
            deadline = time.monotonic() + self.sql_time_limit_s
            db.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
            try:
                cursor = db.execute(sql, params)
                columns = [d[0] for d in cursor.description or ()]
                rows = cursor.fetchmany(cap + 1) if cap is not None else cursor.fetchall()
                cursor.close()
            except sqlite3.DatabaseError as exc:
                if time.monotonic() > deadline:
                    raise QueryRefused(
                        f"query stopped at the {self.sql_time_limit_s:g}s time limit"
                    ) from None
                if "not authorized" in str(exc) or "readonly" in str(exc):
                    raise QueryRefused(f"read-only: {exc}") from None
                raise QueryRefused(str(exc)) from None
            except sqlite3.Warning as exc:  # e.g. more than one statement
                raise QueryRefused(str(exc)) from None
            finally:
                db.set_progress_handler(None, 0)
        truncated = cap is not None and len(rows) > cap
        return columns, rows[:cap] if cap is not None else rows, truncated

    def _agent(self, agent: str | None) -> str | None:
        if agent == ALL:
            return None
        return agent or self.agent_id


def _authorize(
    action: int, arg1: str | None, arg2: str | None, db: str | None, src: str | None
) -> int:
    if action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master" and src is None and db == "main":
        # FTS5's constructor issues this internally while it loads the virtual table; the
        # connection is mode=ro and query_only, so it cannot write whatever the authorizer says.
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and arg1 == "data_version" and arg2 is None:
        return sqlite3.SQLITE_OK
    if action not in _ALLOWED_SQL_ACTIONS:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def _event(event: Event) -> dict[str, Any]:
    fields = event.to_dict()
    payload = None
    if event.payload_ref is not None:
        payload = {
            "__scroll__": "payload",
            "loader": "ms._payload",
            "ref": event.payload_ref,
            "key": event.seq,
            "size": event.payload_size,
        }
    fields["payload"] = payload
    return {"__scroll__": "record", "type": "Event", "fields": to_wire(fields)}


def _day(value: Any) -> date:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    return parse_ts(str(value)).date()
