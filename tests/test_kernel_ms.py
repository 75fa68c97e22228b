"""``ms`` from inside a kernel: read-only, scoped, capped, and every call recorded."""

from __future__ import annotations

import pytest

from scroll_core.kernel import Kernel, KernelConfig
from scroll_core.kernel.ms import MsCapability, QueryRefused
from tests.conftest import BACKENDS, open_store


@pytest.fixture(scope="module", params=BACKENDS)
def event_log(request, tmp_path_factory):
    """The planted log, on SQLite and on PostgreSQL: ``ms`` keeps one contract on both."""
    with open_store(request, request.param, tmp_path_factory.mktemp("ms")) as log:
        log.append(
            session_id="s1",
            kind="context_msg",
            role="user",
            content="the zebra moved to Paris",
            created_at="2024-01-02T10:00:00Z",
        )
        log.append(
            session_id="s1",
            kind="model_turn",
            role="assistant",
            content="noted: zebra",
            created_at="2024-01-02T10:01:00Z",
            tool_call_id="call-1",
            name="lookup",
        )
        log.append(
            session_id="s1",
            kind="tool_result",
            name="lookup",
            tool_call_id="call-1",
            content="zebra facts " + "stripes " * 5000,
            created_at="2024-01-02T10:02:00Z",
        )
        log.append(
            session_id="s2",
            kind="context_msg",
            role="user",
            content="zebra in session two",
            created_at="2024-01-05T09:00:00Z",
        )
        log.append(
            session_id="o1",
            kind="context_msg",
            role="user",
            agent_id="other",
            content="zebra of another agent",
            created_at="2024-01-06T09:00:00Z",
        )
        log.append(
            session_id="s2",
            kind="context_msg",
            role="user",
            content="zebra active turn",
            created_at="2024-01-07T09:00:00Z",
        )
        yield log


@pytest.fixture(scope="module")
def ms(event_log):
    cap = MsCapability(event_log, agent_id="main", session_id="s2", row_cap=3)
    yield cap
    cap.close()


@pytest.fixture(scope="module")
def kernel(ms):
    with Kernel(KernelConfig(sandbox="process"), host_functions=ms.functions()) as k:
        yield k


def run(kernel, code):
    result = kernel.execute(code)
    assert result.status == "ok", (result.error, result.stdout)
    return result.stdout


def test_search_is_scoped_to_the_agent_and_skips_the_active_turn(kernel, ms):
    ms.begin_turn(6)
    out = run(kernel, "hits = ms.search('zebra', k=10)\nprint(sorted(h.seq for h in hits))")
    assert out == "[1, 2, 3, 4]\n"
    # '*' is every readable agent: without a grant that is still only its own.
    out = run(kernel, "print(sorted(h.seq for h in ms.search('zebra', agent='*')))")
    assert out == "[1, 2, 3, 4]\n"
    ms.begin_turn(None)


def test_search_filters_by_session_kind_and_day(kernel):
    out = run(kernel, "print(sorted(h.seq for h in ms.search('zebra', session='s2')))")
    assert out == "[4, 6]\n"
    out = run(kernel, "print(sorted(h.seq for h in ms.search('zebra', on='2024-01-02')))")
    assert out == "[1, 2, 3]\n"
    out = run(kernel, "print([h.seq for h in ms.search('zebra', kind='tool_result')])")
    assert out == "[3]\n"


def test_expand_returns_exact_events_with_lazy_payloads(kernel, ms):
    before = len(ms.calls)
    out = run(kernel, "e = ms.expand(3)\nprint(e.seq, e.kind, e.payload.size > 8192)")
    assert out == "3 tool_result True\n"
    assert len(ms.calls) == before + 1  # the payload was not fetched yet
    out = run(kernel, "full = e.payload.load()\nprint(len(full), full.count('stripes'))")
    assert out == f"{len('zebra facts ' + 'stripes ' * 5000)} 5000\n"
    assert ms.calls[-1].name == "_payload"


def test_expand_a_range(kernel):
    assert run(kernel, "print([e.seq for e in ms.expand(2, 4)])") == "[2, 3, 4]\n"
    result = kernel.execute("ms.expand(1, 100000)")
    assert result.status == "error" and "at most" in result.error.message


def test_a_missing_seq_is_a_clear_error(kernel):
    result = kernel.execute("ms.expand(999)")
    assert result.status == "error" and "no event with seq 999" in result.error.message


def test_sql_query_caps_rows_and_says_so(kernel):
    out = run(
        kernel,
        "r = ms.sql_query('SELECT seq, kind FROM events ORDER BY seq')\n"
        "print(r['row_count'], r['truncated'], r['columns'], r['rows'][0])",
    )
    assert out == "3 True ['seq', 'kind'] [1, 'context_msg']\n"
    out = run(
        kernel,
        "r = ms.sql_query('SELECT count(*) FROM events WHERE session_id = ?', ['s1'])\n"
        "print(r['rows'], r['truncated'])",
    )
    assert out == "[[3]] False\n"


def test_sql_query_points_full_text_search_to_ms_search(kernel):
    result = kernel.execute(
        "ms.sql_query(\"SELECT rowid FROM events_fts WHERE events_fts MATCH 'paris'\")"
    )
    assert result.status == "error" and "use ms.search" in result.error.message


def test_a_runaway_query_stops_at_the_time_limit(event_log):
    cap = MsCapability(event_log, sql_time_limit_s=0.2)
    with pytest.raises(QueryRefused, match="time limit"):
        cap.sql_query(
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c"
        )
    cap.close()


def test_days_between(kernel):
    assert run(kernel, "print(ms.days_between('2024-01-01', '2024-01-31'))") == "30\n"
    assert (
        run(kernel, "print(ms.days_between('2024-01-01', '2024-01-31', inclusive=True))") == "31\n"
    )
    assert run(kernel, "print(ms.days_between('2024-03-01T23:00:00Z', '2024-02-28'))") == "-2\n"


def test_recall_tool_sessions_session_and_schema(kernel):
    assert run(kernel, "print([e.seq for e in ms.recall_tool('call-1')])") == "[2, 3]\n"
    assert run(kernel, "print(sorted(s.session_id for s in ms.sessions()))") == "['s1', 's2']\n"
    out = run(kernel, "s = ms.session('s1')\nprint(s.event_count, [e.seq for e in s.events])")
    assert out == "3 [1, 2, 3]\n"
    out = run(
        kernel,
        "sc = ms.schema()['tables']\nprint('events' in sc, 'seq' in sc['events']['columns'])",
    )
    assert out == "True True\n"


def test_every_call_is_recorded(kernel, ms):
    ms.calls.clear()
    run(kernel, "ms.search('paris')\nms.expand(1, 2)")
    names = [c.name for c in ms.calls]
    assert names == ["search", "expand"]
    search, expand = ms.calls
    assert search.args == ["paris"] and search.seqs[0] == 1
    assert expand.seqs == [1, 2] and expand.result_chars > 0 and expand.duration_ms >= 0


def test_failed_calls_are_recorded_too(kernel, ms):
    ms.calls.clear()
    kernel.execute("ms.sql_query('DELETE FROM events')")
    assert ms.calls[-1].error and "QueryRefused" in ms.calls[-1].error


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM events",
        "UPDATE events SET content = 'x'",
        "INSERT INTO events(session_id, kind, content, created_at, tokens) "
        "VALUES ('a', 'b', 'c', 'd', 1)",
        "DROP TABLE events",
        "PRAGMA journal_mode = DELETE",
        "PRAGMA query_only = OFF",
        "ATTACH DATABASE '/tmp/x.sqlite3' AS x",
        "CREATE TABLE t(x)",
        "SELECT 1; DELETE FROM events",
        "SELECT load_extension('/tmp/evil')",
        "VACUUM",
        "REINDEX",
        "BEGIN IMMEDIATE",
    ],
)
def test_sql_query_only_reads(ms, event_log, sql):
    count = event_log.count()
    with pytest.raises(QueryRefused):
        ms.sql_query(sql)
    assert event_log.count() == count


def test_the_active_turn_stays_out_of_search_even_as_a_neighbour(store):
    log = store
    log.append(session_id="s", kind="model_turn", content="an earlier, unrelated reply")
    first_active = log.append(session_id="s", kind="context_msg", content="the ferry leaves?")
    cap = MsCapability(log, session_id="s")
    cap.begin_turn(first_active)
    _, seqs = cap.search("ferry")
    cap.close()
    # The earlier reply shares no word with the query; only the live question next to it
    # could have lent it a score.
    assert seqs == []


def test_before_seq_bounds_the_log_search(store):
    log = store
    for text in ("kiwi one", "kiwi two", "kiwi three"):
        log.append(session_id="s", kind="context_msg", content=text)
    assert sorted(h.seq for h in log.search("kiwi", before_seq=3)) == [1, 2]


@pytest.mark.parametrize(
    "call, says",
    [
        ("ms.search('zebra', k='5')", "k must be an int, not str"),
        ("ms.search('zebra', k=2.5)", "k must be an int, not float"),
        ("ms.search('zebra', session=5)", "session must be a session id (a str)"),
        ("ms.expand('1')", "a seq must be an int, not str"),
        ("ms.expand(1.5)", "a seq must be an int, not float"),
        ("ms.expand(1, True)", "a seq must be an int, not a bool"),
        ("ms.days_between('2024-01-01', '2024-02-01', inclusive='yes')", "inclusive must be"),
        ("ms.days_between('x' * 3_900_000, '2020-01-01')", "not a date: longer than 64"),
        ("ms.days_between(20240101, '2020-01-01')", "a date must be a str, not int"),
        ("ms.search('zebra ' * 100_000)", "query longer than 2,000 characters"),
        ("ms.search('zebra', since='2' * 100_000)", "since is not a date: longer than 64"),
        ("ms.search('zebra', on=20240101)", "on must be a date (a str)"),
        ("ms.sql_query('')", "not an empty statement"),
        ("ms.sql_query('  -- only a comment')", "not an empty statement"),
        ("ms.sql_query('DELETE FROM events')", "only SELECT (or WITH/VALUES/TABLE) statements"),
    ],
)
def test_a_wrong_argument_is_refused_in_the_same_words_on_both_backends(kernel, call, says):
    # Before, int() turned 1.5 into seq 1 and "1" into 1; a session id that is no string
    # matched nothing on SQLite and failed inside PostgreSQL's planner; an empty statement
    # ran on SQLite and was refused on PostgreSQL.
    result = kernel.execute(call)
    assert result.status == "error"
    assert says in result.error.message


def test_ints_of_any_kind_still_address_events(kernel):
    out = run(kernel, "print(ms.expand(1).seq, len(ms.search('zebra', k=True + 1)))")
    assert out.split() == ["1", "2"]


def test_a_huge_argument_in_a_failing_call_leaves_spans_of_bounded_size(kernel, ring):
    # Issue 31: each failing call recorded an exception event holding the whole argument
    # (~7.8 MB), which the console kept, exported and stored.
    import json

    code = (
        "x = 'x' * 3_900_000\n"
        "failed = 0\n"
        "for _ in range(3):\n"
        "    try:\n"
        "        ms.days_between(x, '2020-01-01')\n"
        "    except Exception:\n"
        "        failed += 1\n"
        "print(failed)"
    )
    assert run(kernel, code) == "3\n"
    records = ring.records()
    assert records
    assert max(len(json.dumps(r.to_dict(), default=str)) for r in records) < 40_000
    messages = [
        e["attributes"].get("exception.message", "")
        for r in records
        for e in r.events
        if e["name"] == "exception"
    ]
    # Refused before any work, in a few words; a longer message would be cut (telemetry).
    assert messages and all(len(m) < 200 for m in messages)
