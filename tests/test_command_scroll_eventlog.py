"""``manage.py scroll_eventlog``: the owner migrates the Event Log on PostgreSQL and makes the
writer and reader logins a deployment runs as; the writer can then read and append, nothing
more, and the reader is a member of ``scroll_reader`` only."""

from __future__ import annotations

import io
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from django.core.management import CommandError, call_command
from psycopg import errors as pgerrors

from scroll_core.store.pg_log import PgEventLog
from scroll_core.store.pg_schema import MIGRATIONS
from scroll_core.tokens import CharRatioCounter
from tests.cluster import drop_database, fresh_database


@pytest.fixture
def empty_db(postgres_server):
    url = fresh_database(postgres_server.url)
    yield url
    drop_database(url)


def _run(*args: str) -> str:
    out = io.StringIO()
    call_command("scroll_eventlog", *args, stdout=out)
    return out.getvalue()


def _as(url: str, login: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{login}@{parts.hostname}:{parts.port}"))


def test_migrate_applies_the_migrations_once(empty_db):
    said = _run("migrate", "--owner-url", empty_db)
    names = [m.__name__ for m in MIGRATIONS]
    assert ", ".join(names) in said
    assert "nothing: it is up to date" in _run("migrate", "--owner-url", empty_db)
    with psycopg.connect(empty_db) as db:
        stored = [row[0] for row in db.execute("SELECT name FROM _scroll_migrations ORDER BY name")]
    assert stored == sorted(names)


def test_roles_prints_the_sql_without_touching_a_database():
    said = _run("roles", "--writer", "scroll_app", "--reader", "scroll_model")
    assert "CREATE ROLE scroll_app LOGIN;" in said and "GRANT scroll_writer TO scroll_app;" in said
    assert "GRANT scroll_reader TO scroll_model;" in said
    assert "PASSWORD" not in said


def test_the_logins_it_makes_append_and_read_only(empty_db, monkeypatch):
    monkeypatch.setenv("FAULTSUITE_WRITER_PW", "it's s3cret")
    _run("roles", "--writer", "scroll_cmd_app", "--reader", "scroll_cmd_model", "--apply",
         "--owner-url", empty_db, "--writer-password-env", "FAULTSUITE_WRITER_PW")  # fmt: skip
    # Run again: the logins exist, nothing fails.
    _run("roles", "--writer", "scroll_cmd_app", "--apply", "--owner-url", empty_db)
    writer = _as(empty_db, "scroll_cmd_app")
    log = PgEventLog(writer, token_counter=CharRatioCounter(),
                     reader_url=_as(empty_db, "scroll_cmd_model"))  # fmt: skip
    try:
        seq = log.append(session_id="s", kind="context_msg", role="user", content="hello")
        assert log.get(seq).content == "hello"
    finally:
        log.close()
    with (
        psycopg.connect(writer, autocommit=True) as db,
        pytest.raises(pgerrors.InsufficientPrivilege),
    ):
        db.execute("CREATE TABLE mine (x int)")
    with psycopg.connect(empty_db) as db:
        member_of = db.execute(
            "SELECT r.rolname FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.roleid "
            "JOIN pg_roles u ON u.oid = m.member WHERE u.rolname = 'scroll_cmd_model'"
        ).fetchall()
        password = db.execute(
            "SELECT rolpassword IS NOT NULL FROM pg_authid WHERE rolname = 'scroll_cmd_app'"
        ).fetchone()[0]
    assert member_of == [("scroll_reader",)]
    assert password  # set from the variable, never printed


def test_bad_input_is_refused_with_the_reason(tmp_path):
    with pytest.raises(CommandError, match="not a plain PostgreSQL role name"):
        _run("roles", "--writer", "app; DROP TABLE events")
    with pytest.raises(CommandError, match="one of the roles the migrations make"):
        _run("roles", "--writer", "scroll_writer")
    with pytest.raises(CommandError, match="name a login"):
        _run("roles")
    with pytest.raises(CommandError, match=r"\$FAULTSUITE_UNSET is unset"):
        _run("roles", "--writer", "app", "--apply", "--writer-password-env", "FAULTSUITE_UNSET")
    with pytest.raises(CommandError, match="needs --reader"):
        _run("roles", "--writer", "app", "--apply", "--reader-password-env", "HOME")
    with pytest.raises(CommandError, match="not on PostgreSQL"):
        _run("migrate", "--owner-url", f"{tmp_path}/eventlog.sqlite3")
