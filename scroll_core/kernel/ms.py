"""``ms``: the Event Log as the kernel sees it, served by the host.

The kernel never touches the log file. Each ``ms.*`` call travels over the pipe and runs
here. The agent is the tenant: every read goes through scoped connections
(``store.sqlite_scoped``, ``store.pg_scoped``) that see only the session's own agent and the
agents an operator granted it (``readable_agents``), so no argument, SQL text or forged seq
widens it. ``sql_query`` runs on a read-only scoped
connection whose authorizer allows only SELECT, READ of the scoped views and FUNCTION, with
a row cap, a byte budget counted while rows are fetched, explicit truncation flags and a time
limit. Memory spans the agent's sessions; ``scope="session"`` narrows search to the current
one, and search leaves out the active turn. Every call is recorded in ``calls``.
"""

from __future__ import annotations

import json
import operator
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from ..errors import AgentNotReadable, QueryRefused
from ..store import EventLog, EventStore
from ..store.dialect_notes import dialect_notes
from ..store.scoped_common import FTS_REFUSED, ScopedEvent, refuse_unless_reading, scope_agents
from ..store.sqlite_scoped import SCOPED_TABLES, ScopedReader, open_scoped
from ..telemetry import span
from ..timeutil import parse_ts
from .protocol import to_wire

if TYPE_CHECKING:
    from ..store.pg_log import PgEventLog
    from ..store.pg_scoped import PgModelSql, PgScopedReader

__all__ = ["MsCall", "MsCapability", "QueryRefused"]

DEFAULT_ROW_CAP = 1000
# What one ms call may hand back, in bytes (text counted in characters): sql_query stops
# fetching at it, expand shares it between the contents it returns, payloads above it are
# refused.
DEFAULT_BYTE_BUDGET = 4 * 1024 * 1024
SCOPES = ("agent", "session")
DEFAULT_SQL_TIME_LIMIT_S = 2.0
MAX_EXPAND = 500
MAX_SQL_CHARS = 100_000
# A search query and a date are short; a longer one is refused before it costs the host any
# work (a 3.5 MB query took 5.35 s of host time the cell's timeout cannot interrupt).
MAX_QUERY_CHARS = 2_000
MAX_DATE_CHARS = 64
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

SCHEMA_NOTES = (
    "events holds this agent's events across all its sessions (and those of agents an "
    "operator granted it); it is append-only and seq is the address of every event. "
    "created_at is ISO-8601 UTC. content may be a bounded preview when payload_ref is set: "
    "expand(seq).payload.load() returns the full text. Full-text search is ms.search (see "
    "'search'): events_fts is not open to sql_query. sql_query is read-only, capped in rows, "
    "bytes and time (truncated_by says which); aggregate in SQL or in the kernel."
)
MAX_NEIGHBOURS = 5
# What ms.schema() says about ms.search: every filter, and what a hit carries.
SEARCH_DOC: dict[str, Any] = {
    "call": (
        "ms.search(query, k=10, *, session=None, kind=None, speaker=None, since=None, "
        "until=None, on=None, agent=None, scope='agent', neighbours=1)"
    ),
    "ranking": (
        "BM25 over content, headline and name (terms OR-ed, stop words dropped), raised for a "
        "turn holding more of the query's terms and holding two of them close together; a "
        "turn also gains from matches in the turns beside it in its session. Deterministic, "
        "no model."
    ),
    "filters": {
        "session": "one session id (ms.sessions() lists them); '*' or None for all",
        "kind": "an event kind or a list of kinds, e.g. 'message' or ['tool_call', 'tool_result']",
        "speaker": "the name column (who spoke a message, or the tool's name) or a list of them",
        "since": "ISO date or timestamp, inclusive lower bound on created_at",
        "until": "ISO date or timestamp, exclusive upper bound on created_at",
        "on": "one ISO day; the same as since=that day, until=the next",
        "agent": "an agent id, a list of them, or '*' for every readable agent",
        "scope": "'agent' (all this agent's sessions) or 'session' (the current one only)",
        "neighbours": f"turns on each side whose seqs a hit carries, 0..{MAX_NEIGHBOURS}",
    },
    "empty_query": "with since/until/on, lists that range in seq order",
    "hit_fields": {
        "seq": "the event's address (ms.expand(seq) reads it whole)",
        "session_id": "the session it belongs to",
        "date": "its day, YYYY-MM-DD (created_at holds the full timestamp)",
        "neighbours": "seqs of the turns just before and after it in its session, ascending",
        "matched": "False when it ranks only by the turns beside it",
        "score": "higher is better; comparable within one call only",
    },
}


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
        log: EventStore,
        *,
        agent_id: str = "main",
        session_id: str | None = None,
        readable_agents: Iterable[str] | Callable[[str], Iterable[str]] = (),
        row_cap: int = DEFAULT_ROW_CAP,
        byte_budget: int = DEFAULT_BYTE_BUDGET,
        sql_time_limit_s: float = DEFAULT_SQL_TIME_LIMIT_S,
        block_resolver: Callable[[int], Any] | None = None,
    ) -> None:
        """``readable_agents`` are the other agents this session may read, by an operator's
        grant: a collection, or a callable asked with ``agent_id`` at every call (the
        console passes its grant table, so a revoke closes a live session at its next
        call). Off by default: the session reads its own agent only."""
        if byte_budget < 1 or row_cap < 1:
            raise ValueError("row_cap and byte_budget must be at least 1")
        self.log = log
        self.readable_agents = readable_agents
        # seq -> the evicted block holding it (an IndexBlock, its key, or None); e.g. the
        # session's ``index.block_for``. Used only to say in telemetry which block an
        # expand hit.
        self.block_resolver = block_resolver
        self.agent_id = agent_id
        self.session_id = session_id
        self.row_cap = row_cap
        self.byte_budget = byte_budget
        self.sql_time_limit_s = sql_time_limit_s
        self.active_from_seq: int | None = None
        self.calls: list[MsCall] = []
        self._db: sqlite3.Connection | None = None
        self._denial: Any = None
        self._scoped: ScopedReader | PgScopedReader | None = None
        self._pg_sql: PgModelSql | None = None
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
            self._drop_connections()

    def _drop_connections(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._scoped is not None:
            self._scoped.close()
            self._scoped = None
        if self._pg_sql is not None:
            self._pg_sql.close()
            self._pg_sql = None

    def agents(self) -> tuple[str, ...]:
        """The readable agents now, own agent first. A grant source that fails reads as no
        grant: the session falls back to its own agent, never to more."""
        source = self.readable_agents
        try:
            granted = list(source(self.agent_id) if callable(source) else source)
        except Exception:
            granted = []
        checked = scope_agents(self.agent_id, granted)  # each id valid, own first, no repeats
        return (checked[0], *sorted(checked[1:]))

    def _reader(self) -> ScopedReader | PgScopedReader:
        """The scoped reader for the current readable set; rebuilt when a grant changes it."""
        agents = self.agents()
        with self._db_lock:
            if self._scoped is None or self._scoped.agents != agents:
                self._drop_connections()
                if isinstance(self.log, EventLog):
                    self._scoped = ScopedReader(self.log, agents)
                else:
                    from ..store.pg_scoped import PgScopedReader  # psycopg only where it is used

                    self._scoped = PgScopedReader(cast("PgEventLog", self.log), agents)
            return self._scoped

    def _wanted(self, reader: ScopedReader | PgScopedReader, agent: str | None) -> tuple[str, ...]:
        """The agents a call narrows to: its own by default, ``'*'`` for every readable one."""
        readable = reader.agents
        if agent is None:
            return readable[:1]
        if agent == ALL:
            return readable
        if not isinstance(agent, str) or agent not in readable:
            raise AgentNotReadable(
                f"agent {agent!r} is not readable from this session; readable: "
                f"{', '.join(readable)} (an operator grants more in the console)"
            )
        return (agent,)

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
        speaker: str | Sequence[str] | None = None,
        since: str | None = None,
        until: str | None = None,
        on: str | None = None,
        agent: str | None = None,
        scope: str = "agent",
        neighbours: int = 1,
    ) -> tuple[list[dict[str, Any]], list[int]]:
        if not isinstance(query, str):
            raise TypeError("query must be a str")
        if len(query) > MAX_QUERY_CHARS:
            raise ValueError(f"query longer than {MAX_QUERY_CHARS:,} characters")
        for label, when in (("since", since), ("until", until), ("on", on)):
            if when is not None and not isinstance(when, str):
                raise TypeError(f"{label} must be a date (a str)")
            if when is not None and len(when) > MAX_DATE_CHARS:
                raise ValueError(f"{label} is not a date: longer than {MAX_DATE_CHARS} characters")
        k = _whole(k, "k")
        if session is not None and not isinstance(session, str):
            raise TypeError("session must be a session id (a str)")
        for label, value in (("kind", kind), ("speaker", speaker)):
            if value is not None and not (
                isinstance(value, str)
                or (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value))
            ):
                raise TypeError(f"{label} must be a str or a list of str")
        if isinstance(neighbours, bool) or not isinstance(neighbours, int):
            raise TypeError("neighbours must be an int")
        if not 0 <= neighbours <= MAX_NEIGHBOURS:
            raise ValueError(f"neighbours must be between 0 and {MAX_NEIGHBOURS}")
        if scope not in SCOPES:
            raise ValueError(f"scope must be one of {', '.join(map(repr, SCOPES))}")
        if session == ALL:
            session = None
        if scope == "session":
            if self.session_id is None:
                raise ValueError("scope='session' needs a current session")
            if session is not None and session != self.session_id:
                raise ValueError(
                    "scope='session' is the current session; to search another of this "
                    "agent's sessions pass session=... with scope='agent'"
                )
            session = self.session_id
        k = max(0, min(k, 200))
        if on is not None:
            day = parse_ts(on).date()
            since, until = day.isoformat(), (day + timedelta(days=1)).isoformat()
        reader = self._reader()
        hits = reader.search(
            query,
            k,
            agents=self._wanted(reader, agent),
            session_id=session,
            kind=kind,
            since=since,
            until=until,
            before_seq=self.active_from_seq,
            speaker=speaker,
            neighbours=neighbours,
        )
        wire = []
        for hit in hits:
            record = to_wire(hit)
            # Memory spans sessions: each hit says which session and which day it is from.
            record["fields"]["date"] = hit.created_at[:10]
            wire.append(record)
        return wire, [h.seq for h in hits]

    def expand(self, lo: int, hi: int | None = None) -> tuple[Any, list[int]]:
        lo = _whole(lo, "a seq")
        if hi is None:
            found = self._reader().get(lo, self.byte_budget)
            return _event(found), [found.event.seq]
        hi = _whole(hi, "a seq")
        if hi < lo:
            raise ValueError(f"expand({lo}, {hi}): hi is below lo")
        if hi - lo + 1 > MAX_EXPAND:
            raise ValueError(
                f"expand spans at most {MAX_EXPAND} seqs; ask for a smaller range or use "
                "sql_query to select columns"
            )
        events = self._reader().range(lo, hi, self.byte_budget)
        return [_event(e) for e in events], [e.event.seq for e in events]

    def recall_tool(self, tool_call_id: str) -> tuple[list[dict[str, Any]], list[int]]:
        events = self._reader().by_tool_call(str(tool_call_id), self.byte_budget)
        return [_event(e) for e in events], [e.event.seq for e in events]

    def sessions(self, *, agent: str | None = None) -> tuple[list[Any], list[int]]:
        reader = self._reader()
        return reader.sessions(self._wanted(reader, agent)), []

    def session(
        self, session_id: str, *, after_seq: int = 0, limit: int = 200
    ) -> tuple[dict[str, Any], list[int]]:
        reader = self._reader()
        summary = reader.session(str(session_id))
        if summary is None:
            raise LookupError(f"no session {session_id!r}")
        events = reader.session_events(
            str(session_id),
            after_seq=int(after_seq),
            limit=max(1, min(int(limit), MAX_EXPAND)),
            char_budget=self.byte_budget,
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
        return body, [e.event.seq for e in events]

    def days_between(self, d1: str, d2: str, inclusive: bool = False) -> tuple[int, list[int]]:
        if not isinstance(inclusive, bool):
            raise TypeError("inclusive must be True or False")
        first, second = _day(d1), _day(d2)
        days = (second - first).days
        if inclusive:
            days += 1 if days >= 0 else -1
        return days, []

    def schema(self) -> tuple[dict[str, Any], list[int]]:
        reader = self._reader()
        tables: dict[str, dict[str, Any]] = {}
        for name in (view for view in reader.views if view in SCOPED_TABLES):
            columns = self._query(f'SELECT * FROM "{name}" LIMIT 0', ())[0]
            tables[name] = {"columns": columns, "sql": reader.table_sql(name)}
        body = {
            "tables": tables,
            "notes": SCHEMA_NOTES,
            "search": SEARCH_DOC,
            **dialect_notes(self.log.backend),
            "agent": self.agent_id,
            "readable_agents": list(reader.agents),
            "row_cap": self.row_cap,
            "byte_budget": self.byte_budget,
        }
        return body, []

    def sql_query(self, sql: str, params: Any = None) -> tuple[dict[str, Any], list[int]]:
        if not isinstance(sql, str):
            raise QueryRefused("sql must be a str")
        if len(sql) > MAX_SQL_CHARS:
            raise QueryRefused(f"sql longer than {MAX_SQL_CHARS} characters")
        if params is None:
            params = ()
        if not isinstance(params, (list, tuple, dict)):
            raise QueryRefused("params must be a list or a dict")
        leading = _leading_word(sql)
        if leading == "explain":
            raise QueryRefused("EXPLAIN is not allowed in sql_query")
        refuse_unless_reading(leading)
        columns, rows, truncated_by = self._query(sql, params, cap=self.row_cap)
        seqs: list[int] = []
        if "seq" in columns:
            at = columns.index("seq")
            seqs = [r[at] for r in rows[:MAX_SEQS_RECORDED] if isinstance(r[at], int)]
        result = {
            "columns": columns,
            "rows": [list(r) for r in rows],
            "row_count": len(rows),
            "truncated": truncated_by is not None,
            "truncated_by": truncated_by,
            "row_cap": self.row_cap,
            "byte_budget": self.byte_budget,
        }
        return result, seqs

    def _payload(self, seq: int) -> tuple[Any, list[int]]:
        return self._reader().payload(int(seq), self.byte_budget), [int(seq)]

    # -- the read-only connection ---------------------------------------------------------

    def _connection(self) -> tuple[sqlite3.Connection, Any]:
        reader = self._reader()
        with self._db_lock:
            if self._db is None:
                assert isinstance(self.log, EventLog)
                self._db, _, self._denial = open_scoped(self.log, reader.agents, model_sql=True)
                # A text cell longer than the budget can never be returned whole: keep one
                # character more than the budget (the fetch loop then cuts the row), so the
                # host never holds a decoded copy of the rest.
                keep = self.byte_budget + 1
                self._db.text_factory = lambda raw: raw[:keep].decode("utf-8", "replace")
            return self._db, self._denial

    def _query(
        self, sql: str, params: Any, cap: int | None = None
    ) -> tuple[list[str], list[tuple[Any, ...]], str | None]:
        """Run model SQL; rows are counted and sized one by one as they are fetched, and
        fetching stops at the row cap or the byte budget (which one is returned)."""
        if not isinstance(self.log, EventLog):
            return self._pg_query(sql, params, cap)
        db, denial = self._connection()
        with self._db_lock:
            deadline = time.monotonic() + self.sql_time_limit_s
            db.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
            denial.message = ""
            rows: list[tuple[Any, ...]] = []
            truncated_by: str | None = None
            try:
                cursor = db.execute(sql, params)
                columns = [d[0] for d in cursor.description or ()]
                size = 0
                while True:
                    row = cursor.fetchone()
                    if row is None:
                        break
                    if cap is not None and len(rows) >= cap:
                        truncated_by = "rows"
                        break
                    size += _row_size(row)
                    if size > self.byte_budget:
                        truncated_by = "bytes"
                        break
                    rows.append(row)
                cursor.close()
            except sqlite3.DatabaseError as exc:
                if time.monotonic() > deadline:
                    raise QueryRefused(
                        f"query stopped at the {self.sql_time_limit_s:g}s time limit"
                    ) from None
                if "events_fts" in sql.lower():
                    # Only for the message: the authorizer is what refused it (FTS5 loads
                    # its table through sqlite_master first, so its denial names that).
                    raise QueryRefused(FTS_REFUSED) from None
                if denial.message:  # the authorizer said no during this statement
                    raise QueryRefused(denial.message) from None
                if "not authorized" in str(exc) or "readonly" in str(exc):
                    raise QueryRefused(f"read-only: {exc}") from None
                if "too big" in str(exc):
                    raise QueryRefused(
                        f"{exc}: no single value may exceed the sql_query limit; select a "
                        "part of it with substr()"
                    ) from None
                raise QueryRefused(str(exc)) from None
            except sqlite3.Warning as exc:  # e.g. more than one statement
                raise QueryRefused(str(exc)) from None
            finally:
                db.set_progress_handler(None, 0)
        return columns, rows, truncated_by

    def _pg_query(
        self, sql: str, params: Any, cap: int | None
    ) -> tuple[list[str], list[tuple[Any, ...]], str | None]:
        reader = self._reader()
        with self._db_lock:
            if self._pg_sql is None or self._pg_sql.agents != reader.agents:
                if self._pg_sql is not None:
                    self._pg_sql.close()
                from ..store.pg_scoped import PgModelSql

                self._pg_sql = PgModelSql(cast("PgEventLog", self.log), reader.agents)
            return self._pg_sql.query(
                sql,
                params,
                cap=cap,
                byte_budget=self.byte_budget,
                time_limit_s=self.sql_time_limit_s,
                leading_word=_leading_word(sql),
            )


def _whole(value: Any, what: str) -> int:
    """``value`` as an int: an int or anything that is one (``operator.index``: a numpy
    integer), never a float, a str or a bool, which ``int()`` would quietly turn into one."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not a bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, not {type(value).__name__}") from None


def _row_size(row: tuple[Any, ...]) -> int:
    """Roughly what a row costs on the wire: text and bytes by length, the rest 8."""
    return sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in row)


def _leading_word(sql: str) -> str:
    """The first keyword of ``sql`` after whitespace and comments, lower-cased."""
    text = sql
    while True:
        text = text.lstrip()
        if text.startswith("--"):
            text = text.partition("\n")[2]
        elif text.startswith("/*"):
            text = text.partition("*/")[2]
        else:
            break
    word = ""
    for char in text:
        if not (char.isalnum() or char == "_"):
            break
        word += char
    return word.lower()


def _event(scoped: ScopedEvent) -> dict[str, Any]:
    event = scoped.event
    fields = event.to_dict()
    if scoped.content_cut:
        # Cut by the byte budget of the call; substr() in sql_query reads the rest.
        fields["content_cut"] = True
        fields["content_chars"] = scoped.content_chars
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
    if not isinstance(value, str):
        raise TypeError(f"a date must be a str, not {type(value).__name__}")
    if len(value) > MAX_DATE_CHARS:
        raise ValueError(f"not a date: longer than {MAX_DATE_CHARS} characters")
    return parse_ts(value).date()
