"""The guarantees of the PostgreSQL Event Log that SQLite keeps by other means: several
writer processes, a writer killed with SIGKILL mid-batch, the application role, the derived
tables, payloads in the database. The shared suites run on both backends via ``store``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid

import psycopg
import pytest

from scroll_core import PayloadCorrupt
from scroll_core.store import EventStore, open_event_store
from scroll_core.store.pg_log import PgEventLog, redact
from scroll_core.store.pg_schema import SEQ_LOCK, WRITER_ROLE

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WRITER = """
import sys
from scroll_core.store.pg_log import PgEventLog
from scroll_core.tokens import CharRatioCounter
url, name, batches, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
log = PgEventLog(url, token_counter=CharRatioCounter())
for b in range(batches):
    seqs = log.append_many(
        [{"session_id": name, "kind": "context_msg", "content": f"{name} {b} {i}"}
         for i in range(size)]
    )
    print("committed", " ".join(map(str, seqs)), flush=True)
if len(sys.argv) > 5:
    print("starting the batch that will be killed", flush=True)
    log.append_many(
        [{"session_id": name, "kind": "context_msg", "content": "doomed " * 50}
         for _ in range(int(sys.argv[5]))]
    )
    print("the doomed batch committed", flush=True)
log.close()
"""


def _writer(url: str, name: str, batches: int, size: int, doomed: int | None = None):
    args = [sys.executable, "-c", WRITER, url, name, str(batches), str(size)]
    if doomed:
        args.append(str(doomed))
    return subprocess.Popen(args, stdout=subprocess.PIPE, text=True, cwd=REPO)


def _summary_matches_events(db: psycopg.Connection) -> None:
    grouped = db.execute(
        "SELECT session_id, min(agent_id), count(*), sum(tokens), min(seq), max(seq), "
        "min(created_at), max(created_at) FROM events GROUP BY session_id ORDER BY 1"
    ).fetchall()
    kept = db.execute("SELECT * FROM session_stats ORDER BY session_id").fetchall()
    assert [tuple(r) for r in kept] == [tuple(r) for r in grouped]


def test_a_postgres_url_opens_the_postgres_backend(pg_url, tmp_path):
    with open_event_store(pg_url) as log:
        assert isinstance(log, PgEventLog)
        assert isinstance(log, EventStore)
        assert log.backend == "postgres"
    with open_event_store(tmp_path / "log.sqlite3") as log:
        assert log.backend == "sqlite"
        assert isinstance(log, EventStore)


def test_a_password_is_never_shown():
    assert redact("postgres://app:s3cret@db:5432/scroll") == "postgres://app:***@db:5432/scroll"


def test_readers_never_see_a_seq_appear_below_one_already_seen(pg_url):
    writers = [_writer(pg_url, f"w{i}", batches=15, size=7) for i in range(4)]
    seen: list[int] = []
    problems: list[str] = []
    done = threading.Event()

    def read() -> None:
        with psycopg.connect(pg_url, autocommit=True) as db:
            top = 0
            while True:
                finished = done.is_set()  # read once more after the writers are gone
                rows = db.execute(
                    "SELECT seq FROM events WHERE seq > %s ORDER BY seq", (top,)
                ).fetchall()
                new = [r[0] for r in rows]
                # Every seq below the highest one seen must already have been visible.
                low = db.execute(
                    "SELECT count(*) FROM events WHERE seq <= %s", (new[-1] if new else top,)
                ).fetchone()[0]
                if new:
                    if new != list(range(top + 1, top + 1 + len(new))):
                        problems.append(f"after {top} saw {new[:5]}... (a gap)")
                    if low != new[-1]:
                        problems.append(f"{low} rows at or below seq {new[-1]}")
                    seen.extend(new)
                    top = new[-1]
                if finished:
                    return

    readers = [threading.Thread(target=read) for _ in range(2)]
    for reader in readers:
        reader.start()
    outputs = [w.communicate(timeout=120)[0] for w in writers]
    done.set()
    for reader in readers:
        reader.join(timeout=60)
    assert all(w.returncode == 0 for w in writers)
    assert not problems
    committed = sorted(
        int(s) for out in outputs for line in out.splitlines() for s in line.split()[1:]
    )
    assert committed == list(range(1, 4 * 15 * 7 + 1))
    assert sorted(set(seen)) == committed
    with psycopg.connect(pg_url, autocommit=True) as db:
        _summary_matches_events(db)
        for i in range(4):  # each batch got consecutive seqs
            rows = db.execute(
                "SELECT seq, content FROM events WHERE session_id = %s ORDER BY seq", (f"w{i}",)
            ).fetchall()
            assert [c for _, c in rows] == [f"w{i} {b} {j}" for b in range(15) for j in range(7)]


def test_a_writer_killed_mid_batch_loses_no_committed_seq(pg_url):
    writer = _writer(pg_url, "victim", batches=3, size=4, doomed=3000)
    assert writer.stdout is not None
    committed: list[int] = []
    for line in writer.stdout:
        if line.startswith("committed"):
            committed.extend(int(s) for s in line.split()[1:])
        if line.startswith("starting"):
            break
    # The doomed batch holds the seq lock once its transaction has begun: kill it then.
    with psycopg.connect(pg_url, autocommit=True) as db:
        while not db.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
            "AND objid = %s AND pid <> pg_backend_pid()",
            (SEQ_LOCK,),
        ).fetchone()[0]:
            assert writer.poll() is None, "the writer finished before it could be killed"
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=30)
        writer.stdout.close()
        with PgEventLog(pg_url) as log:
            # The next append waits for the server to roll the dead transaction back.
            after = log.append(session_id="survivor", kind="context_msg", content="next")
            assert committed == list(range(1, 13))
            assert after == 13
            assert [e.seq for e in log.range(1, 12)] == committed
            assert log.count("victim") == 12
            assert log.fts_check() == 13
        _summary_matches_events(db)


def test_the_application_role_may_only_read_and_append(pg_url):
    role = f"app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as db:
        db.execute(f"CREATE ROLE {role} LOGIN IN ROLE {WRITER_ROLE}")
    app_url = pg_url.replace("//scroll@", f"//{role}@")
    with PgEventLog(app_url) as log:
        seq = log.append(session_id="s", kind="context_msg", content="by the app", payload=b"\x00")
        assert log.get(seq).payload.load() == b"\x00"
        assert [h.seq for h in log.search("app")] == [seq]
        assert log.session("s").events == 1
        # A batch long enough for COPY, which row-level security refuses this login: sent as
        # INSERTs instead, every event stored and found.
        batch = [
            {"session_id": "s", "kind": "context_msg", "content": f"batch note {i}"}
            for i in range(20)
        ]
        seqs = log.append_many(batch)
        assert list(seqs) == list(range(seq + 1, seq + 21))
        assert log.session("s").events == 21
        assert sum(h.matched for h in log.search("batch note", k=50)) == 20
    with psycopg.connect(app_url, autocommit=True) as db:
        for sql in (
            "UPDATE events SET content = 'x'",
            "DELETE FROM events",
            "TRUNCATE events",
            "DELETE FROM payloads",
            "INSERT INTO session_stats VALUES ('s2', 'a', 1, 1, 99, 99, 'x', 'x')",
            "UPDATE fts_agent_totals SET docs = 0",
            "CREATE TABLE sneaky (x int)",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                db.execute(sql)


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE session_stats SET events = 0",
        "INSERT INTO session_stats VALUES ('forged', 'a', 1, 1, 99, 99, 'x', 'x')",
        "DELETE FROM session_stats",
        "UPDATE fts_agent_terms SET docs = 0",
        "DELETE FROM events_fts",
        "INSERT INTO events_fts VALUES (99, 'forged', 1)",
        "UPDATE fts_agent_totals SET docs = 0",
        "TRUNCATE session_stats",
        "TRUNCATE payloads",
        "UPDATE payloads SET data = 'x'",
        "INSERT INTO events (seq, session_id, kind, content, created_at, tokens) "
        "VALUES (1, 's', 'k', 'reused seq', 'x', 0)",
    ],
)
def test_even_the_owner_cannot_change_history_or_the_derived_tables(pg_url, sql):
    with PgEventLog(pg_url) as log:
        log.append(session_id="s", kind="context_msg", content="original", payload="p" * 10)
        with psycopg.connect(pg_url, autocommit=True) as db:
            with pytest.raises(psycopg.Error, match="append-only"):
                db.execute(sql)
            _summary_matches_events(db)
        assert log.fts_check() == 1
        assert log.get(1).content == "original"


def test_a_raw_insert_is_numbered_after_the_last_seq(pg_url):
    with PgEventLog(pg_url) as log:
        log.append(session_id="s", kind="context_msg", content="first")
        with psycopg.connect(pg_url, autocommit=True) as db:
            db.execute(
                "INSERT INTO events (session_id, kind, content, created_at, tokens) "
                "VALUES ('s', 'k', 'raw', '2024-01-01T00:00:00Z', 1)"
            )
        assert log.get(2).content == "raw"
        assert log.session("s").events == 2
        assert log.fts_check() == 2


def test_payloads_live_in_the_database_and_are_checked_on_load(pg_url):
    with PgEventLog(pg_url, payload_threshold=10) as log:
        seq = log.append(session_id="s", kind="tool_result", content="a long output " * 10)
        again = log.append(session_id="t", kind="tool_result", content="a long output " * 10)
        event = log.get(seq)
        assert event.is_preview and event.payload.load() == "a long output " * 10
        assert log.get(again).payload_ref == event.payload_ref
        with psycopg.connect(pg_url, autocommit=True) as db:
            assert db.execute("SELECT count(*) FROM payloads").fetchone()[0] == 1
            # Only by switching the guard off can the owner damage a payload; it is noticed.
            db.execute("ALTER TABLE payloads DISABLE TRIGGER payloads_no_change")
            db.execute("UPDATE payloads SET data = 'tampered'")
        with pytest.raises(PayloadCorrupt, match="sha256"):
            event.payload.load()


def test_a_batch_refused_midway_leaves_nothing_behind(pg_url):
    with PgEventLog(pg_url) as log:
        log.append(session_id="s", kind="context_msg", content="before")
        with psycopg.connect(pg_url, autocommit=True) as db:
            # A constraint the app does not check makes the database refuse the batch.
            db.execute("ALTER TABLE events ADD CONSTRAINT short CHECK (length(content) < 50)")
        with pytest.raises(Exception, match="short"):
            log.append_many(
                [
                    {"session_id": "s", "kind": "k", "content": "fine", "payload": b"big"},
                    {"session_id": "n", "kind": "k", "content": "x" * 60},
                ]
            )
        assert log.count() == 1 and log.last_seq() == 1
        assert log.session("n") is None
        assert log.fts_check() == 1
        assert log.append(session_id="s", kind="k", content="after") == 2
        with psycopg.connect(pg_url, autocommit=True) as db:
            assert db.execute("SELECT count(*) FROM payloads").fetchone()[0] == 0


def test_the_console_serves_a_session_another_process_wrote_to_postgres(
    client, db, django_user_model, settings, pg_url
):
    from dashboard.eventlog import get_event_log, reset_event_log

    writer = _writer(pg_url, "shared-session", batches=2, size=3)
    assert writer.communicate(timeout=120)[0].count("committed") == 2
    settings.SCROLL_EVENTLOG_URL = pg_url
    try:
        log = get_event_log()
        assert log.backend == "postgres" and log.count("shared-session") == 6
        client.force_login(django_user_model.objects.create_user("viewer", password="pw"))
        response = client.get("/sessions/shared-session/")
        assert response.status_code == 200
        assert [e.seq for e in response.context["events"]] == list(range(1, 7))
        assert b"shared-session 1 2" in response.content
    finally:
        reset_event_log()


@pytest.mark.parametrize(
    ("sql", "params", "expected"),
    [
        (
            "SELECT seq FROM events WHERE day BETWEEN ? AND ? AND content LIKE '%a?b%'",
            ["x", "y"],
            "SELECT seq FROM events WHERE day BETWEEN %s AND %s AND content LIKE '%%a?b%%'",
        ),
        (
            "SELECT seq::text FROM events WHERE session_id = :s AND 7 % 2 = 1",
            {"s": "x"},
            "SELECT seq::text FROM events WHERE session_id = %(s)s AND 7 %% 2 = 1",
        ),
        ("SELECT '%' || content FROM events", None, "SELECT '%' || content FROM events"),
        ("SELECT %s", ["already"], "SELECT %s"),
        ('SELECT "odd?name" FROM events WHERE a = ? -- why?', [1], None),
    ],
)
def test_sqlite_placeholders_become_psycopg_ones_outside_literals(sql, params, expected):
    from scroll_core.store.pg_scoped import to_pg_params

    text, bound = to_pg_params(sql, params)
    if expected is None:
        assert text == 'SELECT "odd?name" FROM events WHERE a = %s -- why?'
    else:
        assert text == expected
    assert bound == (params if params else None)


def test_the_hosts_own_ms_reads_are_scoped_by_the_database_not_only_by_its_sql(pg_url):
    from scroll_core.store.pg_scoped import PgScopedReader

    with PgEventLog(pg_url) as log:
        mine = log.append(session_id="a", agent_id="alpha", kind="k", content="shared word")
        log.append(session_id="b", agent_id="bravo", kind="k", content="shared word secret")
        reader = PgScopedReader(log, ["alpha"])
        try:
            # Even SQL without the agent term sees only alpha's rows on this connection.
            assert reader._rows("SELECT seq FROM events", ()) == [(mine,)]
            assert reader._rows("SELECT seq FROM events_fts", ()) == [(mine,)]
            assert reader._rows("SELECT session_id FROM session_stats", ()) == [("a",)]
            assert [h.seq for h in reader.search("shared word secret", 10)] == [mine]
            with pytest.raises(psycopg.Error):
                reader._rows("SELECT data FROM payloads", ())
        finally:
            reader.close()
        with psycopg.connect(pg_url, autocommit=True) as db:  # its scope row is gone
            assert db.execute("SELECT count(*) FROM scroll_scope").fetchone()[0] == 0


BIG_VALUE = """
import json, resource, sys
from scroll_core.kernel.ms import MsCapability
from scroll_core.store.pg_log import PgEventLog

log = PgEventLog(sys.argv[1], reader_url=sys.argv[2])
ms = MsCapability(log, agent_id='main', session_id='s', byte_budget=4096, sql_time_limit_s=60)
ms.sql_query('SELECT 1')
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result, _ = ms.sql_query("SELECT seq, repeat('x', 60000000) AS big FROM events")
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({'growth_kb': after - before, 'rows': result['row_count'],
                  'by': result['truncated_by'], 'columns': result['columns']}))
"""


def test_a_row_over_the_byte_budget_never_reaches_the_host(pg_url):
    from tests.conftest import pg_reader_url

    with PgEventLog(pg_url) as log:
        log.append(session_id="s", kind="context_msg", content="small")
    done = subprocess.run(
        [sys.executable, "-c", BIG_VALUE, pg_url, pg_reader_url(pg_url)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["rows"] == 0 and report["by"] == "bytes", report
    assert report["columns"] == ["seq", "big"], report
    # 60 MB made in the server; the host grew by far less than one copy of it.
    assert report["growth_kb"] < 20 * 1024, report


def test_values_under_the_budget_keep_their_types_and_rows_their_order(pg_url):
    from scroll_core.kernel.ms import MsCapability
    from tests.conftest import pg_reader_url

    with PgEventLog(pg_url, reader_url=pg_reader_url(pg_url)) as log:
        seqs = [
            log.append(session_id="s", kind="k", content=f"row {i} " + "a" * 100) for i in range(6)
        ]
        ms = MsCapability(log, agent_id="main", session_id="s", byte_budget=200)
        try:
            result, _ = ms.sql_query(
                "SELECT seq, content, array_agg(seq) OVER () AS every, seq > 2 AS later, "
                "NULL AS nothing FROM events ORDER BY seq DESC;"
            )
            assert result["truncated_by"] == "bytes" and result["row_count"] == 1, result
            seq, content, every, later, nothing = result["rows"][0]
            assert (seq, later, nothing) == (seqs[-1], True, None)
            assert content.startswith("row 5 ") and sorted(every) == seqs
            whole, _ = ms.sql_query("SELECT count(*) AS n, min(seq) FROM events")
            assert whole["rows"] == [[6, seqs[0]]] and whole["truncated"] is False
            blob, _ = ms.sql_query("SELECT decode(repeat('ff', 400), 'hex') AS b")
            assert blob["row_count"] == 0 and blob["truncated_by"] == "bytes"
        finally:
            ms.close()
