"""The agent is the tenant of ``ms``: a cross-agent corpus, run in real kernel cells.

Agent B's log holds a planted secret ("api key is ..."), a tool call, a payload and its own
sessions. Every attempt runs as agent A in a real kernel on both sandbox tiers, through every
``ms`` method, raw SQL included, and must bring back nothing of B: not the secret, not B's
rarest word, not B's ids (unless the attempt itself typed them), and no B seq among the
events the host recorded the call touching.
"""

from __future__ import annotations

import sqlite3

import pytest

from scroll_core import AgentNotReadable, EventLog, QueryRefused, ScopedReader
from scroll_core.kernel import Kernel, KernelConfig, bwrap_status
from scroll_core.kernel.ms import MsCapability
from scroll_core.store.sqlite_scoped import BY_SESSION_VIEW
from tests.conftest import BACKENDS, open_store

BWRAP_OK, BWRAP_WHY = bwrap_status()
TIERS = [
    "process",
    pytest.param("bwrap", marks=pytest.mark.skipif(not BWRAP_OK, reason=BWRAP_WHY)),
]
SECRET = "sk-live-8d2f0c41e9"
WORD = "zanzibar"  # in every one of B's events and nowhere else
B_AGENT = "agent-bravo"
B_SESSION = "sess-bravo"
B_CALL = "call-bravo-1"
A_AGENT = "agent-alpha"


def _plant(log: EventLog) -> dict[str, int]:
    seqs: dict[str, int] = {}
    a = {"agent_id": A_AGENT, "created_at": "2024-03-01T10:00:00Z"}
    seqs["a_note"] = log.append(
        session_id="sess-a1", kind="context_msg", role="user", content="the api key rotates", **a
    )
    seqs["a_big"] = log.append(
        session_id="sess-a1",
        kind="tool_result",
        name="dump",
        tool_call_id="call-alpha-1",
        content="alpha dump " + "x" * 40_000,
        **a,
    )
    b = {"agent_id": B_AGENT, "session_id": B_SESSION, "created_at": "2024-03-01T11:00:00Z"}
    seqs["b_secret"] = log.append(
        kind="context_msg", role="user", content=f"{WORD}: the api key is {SECRET}", **b
    )
    seqs["b_call"] = log.append(
        kind="model_turn",
        role="assistant",
        content=f"{WORD} lookup",
        tool_call_id=B_CALL,
        name="vault",
        headline=f"{WORD} api key",
        **b,
    )
    seqs["b_payload"] = log.append(
        kind="tool_result",
        name="vault",
        tool_call_id=B_CALL,
        content=f"{WORD} vault dump api key {SECRET} " + "y" * 40_000,
        **b,
    )
    seqs["a_later"] = log.append(
        session_id="sess-a2",
        kind="context_msg",
        role="user",
        content="what was the api key?",
        agent_id=A_AGENT,
        created_at="2024-03-02T09:00:00Z",
    )
    return seqs


@pytest.fixture(scope="module", params=BACKENDS)
def planted(request, tmp_path_factory):
    """The planted log on each backend: the boundary holds on both."""
    with open_store(request, request.param, tmp_path_factory.mktemp("tenant")) as log:
        yield log, _plant(log)


@pytest.fixture(scope="module", params=TIERS)
def tenant(request, planted):
    log, seqs = planted
    ms = MsCapability(log, agent_id=A_AGENT, session_id="sess-a2")
    with Kernel(KernelConfig(sandbox=request.param), host_functions=ms.functions()) as kernel:
        yield kernel, ms, seqs
    ms.close()


def _rows(ms: MsCapability, sql: str, params: list[str] | None = None) -> list[list[object]]:
    return ms.sql_query(sql, params)[0]["rows"]


def _sql(statement: str) -> str:
    return f"ms.sql_query({statement!r})"


# Each expression is evaluated in a cell as agent A; its value (or the refusal) is printed.
ATTEMPTS: dict[str, str] = {
    # -- raw SQL ----------------------------------------------------------------------
    "sql_direct_table": _sql("SELECT content FROM events"),
    "sql_where_other_agent": _sql(f"SELECT content FROM events WHERE agent_id = '{B_AGENT}'"),
    "sql_or_true_params": (
        "ms.sql_query('SELECT content FROM events WHERE agent_id = ? OR 1 = 1', ['x'])"
    ),
    "sql_qualified_main": _sql("SELECT content FROM main.events"),
    "sql_qualified_temp": _sql(f"SELECT content FROM temp.events WHERE agent_id = '{B_AGENT}'"),
    "sql_subquery_main": _sql("SELECT (SELECT group_concat(content) FROM main.events)"),
    "sql_exists_probe": _sql(
        f"SELECT CASE WHEN EXISTS (SELECT 1 FROM main.events WHERE content LIKE '%{WORD}%') "
        "THEN 'LEAK' END"
    ),
    "sql_cte_named_events": _sql(
        "WITH events AS (SELECT * FROM main.events) SELECT content FROM events"
    ),
    "sql_recursive_cte": _sql(
        "WITH RECURSIVE events(c) AS (SELECT content FROM main.events) SELECT c FROM events"
    ),
    "sql_union": _sql("SELECT content FROM events UNION ALL SELECT content FROM main.events"),
    "sql_join_main": _sql("SELECT m.content FROM events e JOIN main.events m ON m.seq > e.seq"),
    "sql_sqlite_master": _sql("SELECT name, sql FROM sqlite_master"),
    "sql_sqlite_temp_master": _sql("SELECT name, sql FROM sqlite_temp_master"),
    "sql_sqlite_schema_main": _sql("SELECT sql FROM main.sqlite_schema"),
    "sql_fts_match": _sql(f"SELECT rowid FROM events_fts WHERE events_fts MATCH '{WORD}'"),
    "sql_fts_count_probe": _sql(
        f"SELECT CASE WHEN count(*) > 0 THEN 'LEAK' END FROM events_fts "
        f"WHERE events_fts MATCH '{WORD}'"
    ),
    "sql_fts_content": _sql("SELECT content, headline FROM events_fts"),
    "sql_fts_shadow_table": _sql("SELECT * FROM events_fts_data"),
    "sql_fts_instances": _sql("SELECT term, doc FROM events_fts_instances"),
    "sql_fts_via_view_join": _sql(
        f"SELECT e.content FROM events e, events_fts f WHERE f.rowid = e.seq "
        f"AND events_fts MATCH '{WORD}'"
    ),
    "sql_pragma_function": _sql("SELECT * FROM pragma_table_info('events')"),
    "sql_pragma_statement": _sql("PRAGMA table_info(events)"),
    "sql_attach": _sql("ATTACH DATABASE 'file:eventlog.sqlite3?mode=ro' AS other"),
    "sql_explain": _sql("EXPLAIN SELECT * FROM events"),
    "sql_explain_after_comment": _sql("/* hi */ -- x\n EXPLAIN QUERY PLAN SELECT * FROM events"),
    "sql_other_tables": _sql("SELECT * FROM sqlite_sequence"),
    "sql_reader_only_view": _sql(f"SELECT content FROM {BY_SESSION_VIEW}"),
    "sql_migrations_table": _sql("SELECT * FROM _scroll_migrations"),
    # -- forged arguments to the other methods ------------------------------------------
    "expand_forged_seq": "ms.expand($b_secret)",
    "expand_range_across": "ms.expand(1, 50)",
    "expand_range_only_b": "ms.expand($b_secret, $b_payload)",
    "payload_forged_seq": "ms._payload($b_payload)",
    "payload_handle_forged_key": (
        "h = ms.expand($a_big).payload\nh._key = $b_payload\nh.ref = 'x'\nh.load()"
    ),
    "recall_tool_forged_id": f"ms.recall_tool({B_CALL!r})",
    "session_forged_id": f"ms.session({B_SESSION!r})",
    "sessions_all_agents": "ms.sessions(agent='*')",
    "sessions_other_agent": f"ms.sessions(agent={B_AGENT!r})",
    "search_all_agents": f"ms.search('api key {WORD}', agent='*')",
    "search_other_agent": f"ms.search('api key', agent={B_AGENT!r})",
    "search_other_session": f"ms.search('api key {WORD}', session={B_SESSION!r})",
    "search_scope_all": f"ms.search('api key {WORD}', scope='all')",
    "search_scope_session_other": (f"ms.search('api key', scope='session', session={B_SESSION!r})"),
    "search_date_listing": "ms.search('', on='2024-03-01', agent='*', k=50)",
    "search_agent_list": f"ms.search('api key', agent=[{B_AGENT!r}, {A_AGENT!r}])",
    "schema": "ms.schema()",
    # -- PostgreSQL: what a role, a setting or a SQL-running function could widen ----------
    "sql_pg_scope_table": _sql("SELECT * FROM scroll_scope"),
    "sql_pg_scope_forge": _sql(f"UPDATE scroll_scope SET agents = ARRAY['{B_AGENT}']"),
    "sql_pg_do_block": _sql(
        "DO $$ BEGIN RAISE EXCEPTION '%', (SELECT string_agg(content, ',') FROM events); END $$"
    ),
    "sql_pg_query_to_xml": _sql(
        "SELECT query_to_xml('SELECT content FROM events', true, false, '')"
    ),
    "sql_pg_set_role_then_query": _sql(
        "SELECT set_config('role', 'scroll', true), "
        "query_to_xml('SELECT content FROM events', true, false, '')"
    ),
    "sql_pg_payloads": _sql("SELECT convert_from(data, 'UTF8') FROM payloads"),
    "sql_pg_fts_table": _sql("SELECT tsv::text FROM events_fts"),
    "sql_pg_lexemes": _sql("SELECT lexeme FROM fts_agent_terms"),
    "sql_pg_stats": _sql("SELECT most_common_vals::text FROM pg_stats WHERE tablename = 'events'"),
    "sql_pg_copy": _sql("COPY events TO STDOUT"),
    "sql_pg_cast_error": _sql("SELECT 1 FROM events WHERE CAST(content AS int) = 1"),
    "sql_pg_public_schema": _sql("SELECT content FROM public.events"),
}


@pytest.mark.parametrize("name", sorted(ATTEMPTS))
def test_nothing_of_another_agent_comes_back(tenant, name):
    kernel, ms, seqs = tenant
    expr = ATTEMPTS[name]
    for key, seq in seqs.items():
        expr = expr.replace(f"${key}", str(seq))
    *setup, last = expr.split("\n")
    code = "\n".join(
        [
            "try:",
            *(f"    {line}" for line in setup),
            f"    print(repr({last}))",
            "except Exception as exc:",
            "    print('refused', type(exc).__name__, exc)",
        ]
    )
    before = len(ms.calls)
    result = kernel.execute(code)
    seen = result.stdout + (result.error.message if result.error else "")
    assert SECRET not in seen and WORD not in seen and "LEAK" not in seen, seen
    for marker in (B_AGENT, B_SESSION, B_CALL):
        if marker not in code:
            assert marker not in seen, seen
    b_seqs = {seqs["b_secret"], seqs["b_call"], seqs["b_payload"]}
    touched = {seq for call in ms.calls[before:] for seq in call.seqs}
    assert not touched & b_seqs
    assert result.status == "ok", seen


def test_the_corpus_has_at_least_twenty_attempts_through_every_method():
    assert len(ATTEMPTS) >= 20
    joined = "\n".join(ATTEMPTS.values())
    for method in ("search", "expand", "sql_query", "sessions", "session(", "recall_tool"):
        assert f"ms.{method}" in joined
    assert "ms.schema" in joined and "_payload" in joined and ".load()" in joined


def test_own_agent_reads_still_work(tenant):
    kernel, _, seqs = tenant
    result = kernel.execute(
        "print([h.seq for h in ms.search('api key')])\n"
        "print(ms.sql_query('SELECT count(*) FROM events')['rows'])\n"
        "print(sorted(s.session_id for s in ms.sessions()))\n"
        f"print(len(ms.expand({seqs['a_big']}).payload.load()))"
    )
    assert result.status == "ok", result.error
    lines = result.stdout.splitlines()
    assert str(seqs["a_note"]) in lines[0]
    assert lines[1] == "[[3]]"
    assert lines[2] == "['sess-a1', 'sess-a2']"
    assert lines[3] == str(len("alpha dump ") + 40_000)


# -- grants --------------------------------------------------------------------------


def test_a_grant_opens_another_agent_and_revoking_closes_it(planted):
    log, seqs = planted
    granted: set[str] = set()
    ms = MsCapability(log, agent_id=A_AGENT, readable_agents=lambda reader: granted)
    try:
        with pytest.raises(AgentNotReadable, match="not readable"):
            ms.search("api key", agent=B_AGENT)
        assert _rows(ms, "SELECT count(*) FROM events") == [[3]]

        granted.add(B_AGENT)
        hits, _ = ms.search("api key", agent="*")
        assert seqs["b_secret"] in {h["fields"]["seq"] for h in hits}
        rows = _rows(ms, "SELECT content FROM events WHERE agent_id = ?", [B_AGENT])
        assert any(SECRET in r[0] for r in rows)
        assert ms.expand(seqs["b_secret"])[0]["fields"]["content"].endswith(SECRET)
        assert ms.schema()[0]["readable_agents"] == [A_AGENT, B_AGENT]
        # Its own agent stays the default; the grant is used only when asked for.
        hits, _ = ms.search("api key")
        assert {h["fields"]["agent_id"] for h in hits} == {A_AGENT}

        granted.clear()
        assert _rows(ms, "SELECT count(*) FROM events") == [[3]]
        with pytest.raises(Exception, match="no event"):
            ms.expand(seqs["b_secret"])
        hits, _ = ms.search(f"api key {WORD}", agent="*")
        assert {h["fields"]["agent_id"] for h in hits} == {A_AGENT}
    finally:
        ms.close()


def test_a_failing_grant_source_reads_as_no_grant(planted):
    log, _ = planted

    def broken(reader: str) -> set[str]:
        raise RuntimeError("grant table unavailable")

    ms = MsCapability(log, agent_id=A_AGENT, readable_agents=broken)
    try:
        assert ms.agents() == (A_AGENT,)
        assert _rows(ms, "SELECT count(*) FROM events") == [[3]]
    finally:
        ms.close()


@pytest.mark.parametrize("bad", ["", "x\x00y", "a" * 500, 7, None])
def test_an_invalid_agent_id_is_refused(planted, bad):
    log, _ = planted
    ms = MsCapability(log, agent_id=A_AGENT, readable_agents=[bad])
    with pytest.raises(AgentNotReadable):
        ms.search("api key")
    ms.close()


def test_an_agent_id_with_quotes_cannot_break_out_of_the_view(store):
    log = store
    _plant(log)
    odd = "x') OR 1=1 --"
    log.append(session_id="odd", kind="context_msg", content="odd one", agent_id=odd)
    ms = MsCapability(log, agent_id=odd)
    rows = _rows(ms, "SELECT content FROM events")
    ms.close()
    assert rows == [["odd one"]]


# -- memory spans sessions, scope narrows it ---------------------------------------------


def test_hits_carry_session_and_date_and_scope_narrows_to_the_session(planted):
    log, seqs = planted
    ms = MsCapability(log, agent_id=A_AGENT, session_id="sess-a2")
    try:
        hits, _ = ms.search("api key")
        fields = {h["fields"]["seq"]: h["fields"] for h in hits}
        assert fields[seqs["a_note"]]["session_id"] == "sess-a1"
        assert fields[seqs["a_note"]]["date"] == "2024-03-01"
        assert fields[seqs["a_later"]]["date"] == "2024-03-02"
        _, in_session = ms.search("api key", scope="session")
        assert in_session == [seqs["a_later"]]
        with pytest.raises(ValueError, match="scope"):
            ms.search("api key", scope="everything")
        with pytest.raises(ValueError, match="current session"):
            ms.search("api key", scope="session", session="sess-a1")
    finally:
        ms.close()


# -- tables the log gains later ----------------------------------------------------------


def test_a_later_table_is_invisible_and_session_stats_is_scoped(tmp_path):
    with EventLog(tmp_path / "log.sqlite3") as log:
        _plant(log)
        with sqlite3.connect(log.path) as db:
            db.execute("CREATE TABLE notes (agent_id TEXT, body TEXT)")
            db.execute("INSERT INTO notes VALUES (?, ?)", (B_AGENT, SECRET))
        db.close()
        # session_stats is the log's own summary table (Event Log migration m002).
        ms = MsCapability(log, agent_id=A_AGENT)
        try:
            with pytest.raises(QueryRefused, match="not readable"):
                ms.sql_query("SELECT body FROM notes")
            rows = _rows(ms, "SELECT session_id FROM session_stats ORDER BY 1")
            assert rows == [["sess-a1"], ["sess-a2"]]
            with pytest.raises(QueryRefused, match="not readable directly"):
                ms.sql_query("SELECT session_id FROM main.session_stats")
            sessions, _ = ms.sessions(agent="*")
            assert [s.session_id for s in sessions] == ["sess-a2", "sess-a1"]
            assert set(ms.schema()[0]["tables"]) == {"events", "session_stats"}
        finally:
            ms.close()


def test_sql_over_the_scoped_view_keeps_json_functions_and_recursive_ctes(planted):
    log, _ = planted
    ms = MsCapability(log, agent_id=A_AGENT)
    each = "json_each" if log.backend == "sqlite" else "jsonb_array_elements"
    cast = "" if log.backend == "sqlite" else "::jsonb"
    try:
        if log.backend == "sqlite":
            assert _rows(ms, "SELECT count(*) FROM events, json_each(events.metadata)") == [[0]]
        else:
            assert _rows(ms, "SELECT count(*) FROM events, jsonb_each(metadata::jsonb)") == [[0]]
        assert _rows(ms, f"SELECT value FROM {each}('[1, 2]'{cast})") in ([[1], [2]], [[1], [2]])
        assert _rows(
            ms,
            "WITH RECURSIVE c(x) AS (SELECT min(seq) FROM events UNION ALL "
            "SELECT x + 1 FROM c WHERE x < 3) SELECT count(*) FROM c",
        ) == [[3]]
        if log.backend == "sqlite":
            with pytest.raises(QueryRefused, match="pragma_table_info"):
                ms.sql_query("SELECT * FROM pragma_table_info('events')")
    finally:
        ms.close()


def test_a_log_path_with_uri_characters_still_opens_scoped(tmp_path):
    folder = tmp_path / "odd ?name #1 %20"
    with EventLog(folder / "log.sqlite3") as log:
        log.append(session_id="s", kind="context_msg", content="found", agent_id=A_AGENT)
        ms = MsCapability(log, agent_id=A_AGENT)
        try:
            assert _rows(ms, "SELECT content FROM events") == [["found"]]
            assert [e["fields"]["content"] for e in ms.expand(1, 1)[0]] == ["found"]
        finally:
            ms.close()


def test_a_session_is_read_by_its_index_not_by_scanning_the_agent(planted):
    if planted[0].backend != "sqlite":
        pytest.skip("SQLite's query plan through its scoped view; PostgreSQL reads by index")
    log, _ = planted
    reader = ScopedReader(log, (A_AGENT,))
    try:
        plan = reader._db.execute(
            f"EXPLAIN QUERY PLAN SELECT seq FROM {BY_SESSION_VIEW} "
            "WHERE session_id = ? AND seq > ? ORDER BY seq",
            ("sess-a1", 0),
        ).fetchall()
        assert "events_session_seq" in str(plan)
        assert [e.event.seq for e in reader.session_events("sess-a1", 0, 10, 1000)] == [1, 2]
        assert reader.session(B_SESSION) is None
    finally:
        reader.close()


def test_a_grant_of_one_agent_opens_that_agent_only(store):
    log = store
    _plant(log)
    log.append(session_id="sess-c", kind="context_msg", content="charlie notes", agent_id="c")
    ms = MsCapability(log, agent_id=A_AGENT, readable_agents=["c"])
    try:
        contents = [r[0] for r in _rows(ms, "SELECT content FROM events")]
        assert "charlie notes" in contents
        assert not any(WORD in c for c in contents)
        hits, _ = ms.search(f"api key {WORD} charlie", agent="*")
        assert {h["fields"]["agent_id"] for h in hits} == {A_AGENT, "c"}
        with pytest.raises(AgentNotReadable):
            ms.sessions(agent=B_AGENT)
    finally:
        ms.close()
