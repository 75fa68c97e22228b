"""After a PostgreSQL restart a page for something that does not exist answers 404, never a
500 (issue 30: "not found" pages answered a bare 500 for minutes on both web processes).

The console database and the Event Log are both on a PostgreSQL server this module stops
and starts, under a console process of its own (tests/console_child.py) that served pages
before the restart, so its connections lived through it."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from console_process import ConsoleProcess

MISSING = (
    "/sessions/no-such-session/",  # the Event Log has no such session
    "/events/987654/",  # nor such an event
    "/traces/spans/ffffffffffffffff/",  # the console database has no such span
    "/no-such-page/",  # no such URL: the 404 page reads the console database too
)


def _database(server_url: str) -> str:
    name = f"restart_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    return server_url.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture
def console(stoppable_pg, tmp_path):
    child = ConsoleProcess(
        _database(stoppable_pg.url),
        tmp_path,
        SCROLL_EVENTLOG_URL=_database(stoppable_pg.url),
    )
    yield child
    stoppable_pg.control.start()
    child.close()


def test_missing_pages_answer_404_before_and_right_after_a_restart(console, stoppable_pg):
    assert console.ask("get /")["status"] == 200
    for path in MISSING:
        assert console.ask(f"get {path}")["status"] == 404, path

    stoppable_pg.control.stop()
    during = {path: console.ask(f"get {path}")["status"] for path in MISSING}
    assert set(during.values()) == {503}, during  # "retry", not a bare 500

    stoppable_pg.control.start()
    after = {path: console.ask(f"get {path}")["status"] for path in MISSING}
    assert set(after.values()) == {404}, after
    assert console.ask("get /")["status"] == 200
    log = console.close()
    assert "Traceback" not in log, log
