"""A database outage (issue 30): the Event Log on a PostgreSQL server of this module's own,
stopped (``pg_ctl stop -m fast``'s signal) while the gateway and the console serve, then
started again. The gateway answers 503 with ``Retry-After`` in the provider's error shape,
appends nothing and sends nothing upstream, and the official clients' retries get through
once the server is back; a page answers a 503 "retry" page, never a 500."""

from __future__ import annotations

import sqlite3
import uuid

import anthropic
import httpx
import openai
import psycopg
import pytest
from django import db
from gateway_clients import an, ask, make_key, oa

from dashboard.gateway.asgi import Request
from dashboard.gateway.endpoints import unavailable
from dashboard.gateway.service import get_service
from dashboard.outage import database_unavailable, server_error
from scroll_core.errors import InvalidEvent, StoreUnavailable
from scroll_core.store.pg_log import PgEventLog

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def pg_log(request, settings, stoppable_pg):
    """The console's Event Log in a fresh database on ``stoppable_pg``; the server is running
    again after the test, whatever it did."""
    name = f"outage_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(stoppable_pg.url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    settings.SCROLL_EVENTLOG_URL = stoppable_pg.url.rsplit("/", 1)[0] + f"/{name}"
    settings.SCROLL_EVENTLOG_READER_URL = None
    log = request.getfixturevalue("console_log")
    assert log.backend == "postgres"
    yield log
    stoppable_pg.control.start()


def _outage_texts(log, session_id):
    get_service().flush()
    return [e.content for e in log.session_events(session_id, limit=None) if "during" in e.content]


def test_an_openai_client_gets_a_retryable_503_then_its_retries_get_through(
    pg_log, stoppable_pg, gateway, upstream
):
    key = make_key(upstream, agent="oa-outage")
    first = oa(gateway, key).chat.completions.with_raw_response.create(
        model="gpt-test", messages=[{"role": "user", "content": "hello"}]
    )
    session = first.headers["x-scroll-session"]
    get_service().flush()
    sent_upstream = len(upstream.requests)

    stoppable_pg.control.stop()
    during = httpx.post(
        f"{gateway}/v1/chat/completions",
        headers={"Authorization": f"Bearer {key}", "X-Scroll-Session": session},
        json={"model": "gpt-test", "messages": [{"role": "user", "content": "sent during"}]},
        timeout=30,
    )
    assert during.status_code == 503
    assert during.headers["content-type"] == "application/json"
    assert int(during.headers["retry-after"]) > 0
    error = during.json()["error"]
    assert error["type"] == "service_unavailable" and error["code"] == "database_unavailable"
    assert len(upstream.requests) == sent_upstream  # nothing went upstream

    stoppable_pg.control.start()
    retrying = openai.OpenAI(base_url=f"{gateway}/v1", api_key=key, max_retries=3)
    try:
        again = ask(retrying, [{"role": "user", "content": "after"}])
    finally:
        retrying.close()
    assert again.choices[0].message.content.startswith("ok")
    assert _outage_texts(pg_log, session) == []  # the refused request left nothing in the log


def test_an_anthropic_client_gets_an_overloaded_503_then_its_retries_get_through(
    pg_log, stoppable_pg, gateway, upstream
):
    key = make_key(upstream, agent="an-outage", upstream_format="anthropic")
    message = [{"role": "user", "content": "hello"}]
    an(gateway, key).messages.create(model="m", max_tokens=10, messages=message)
    sent_upstream = len(upstream.requests)

    stoppable_pg.control.stop()
    with pytest.raises(anthropic.InternalServerError) as caught:
        an(gateway, key).messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "sent during"}]
        )
    assert caught.value.status_code == 503
    assert int(caught.value.response.headers["retry-after"]) > 0
    assert caught.value.body["type"] == "error"
    assert caught.value.body["error"]["type"] == "overloaded_error"
    assert len(upstream.requests) == sent_upstream

    stoppable_pg.control.start()
    retrying = anthropic.Anthropic(base_url=gateway, api_key=key, max_retries=3)
    try:
        reply = retrying.messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "after"}]
        )
    finally:
        retrying.close()
    assert reply.content[0].text.startswith("ok")


def test_a_page_answers_503_during_the_outage_and_works_at_once_after_it(
    pg_log, stoppable_pg, operator
):
    pg_log.append(session_id="s-outage", kind="context_msg", role="user", content="hi")
    assert operator.get("/sessions/s-outage/").status_code == 200

    stoppable_pg.control.stop()
    during = operator.get("/sessions/s-outage/")
    assert during.status_code == 503
    assert during["Retry-After"]
    assert "Database unavailable" in during.content.decode()

    stoppable_pg.control.start()
    after = operator.get("/sessions/s-outage/")
    assert after.status_code == 200 and "hi" in after.content.decode()


# -- telling an outage from other errors, with the errors the real drivers raise -----------
def _raised(fn):
    try:
        fn()
    except Exception as exc:
        return exc
    raise AssertionError("nothing was raised")


def _closed_port_url() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"postgres://scroll@127.0.0.1:{port}/scroll"


def test_an_unreachable_database_is_told_from_a_bad_statement(tmp_path):
    refused = _raised(lambda: psycopg.connect(_closed_port_url(), connect_timeout=2))
    assert database_unavailable(refused)
    log_away = _raised(lambda: PgEventLog(_closed_port_url()))
    assert isinstance(log_away, StoreUnavailable) and database_unavailable(log_away)
    no_file = _raised(lambda: sqlite3.connect(tmp_path / "gone" / "db.sqlite3"))
    assert database_unavailable(no_file)
    try:
        sqlite3.connect(":memory:").execute("SELECT * FROM missing")
    except sqlite3.OperationalError as exc:
        bad_sql = exc
    assert not database_unavailable(bad_sql)
    # Django's wrapper (as DatabaseErrorWrapper raises it on SQLite) is judged by the
    # driver's error it wraps.
    for driver_error, outage in ((bad_sql, False), (no_file, True)):
        wrapped = db.OperationalError(*driver_error.args)
        wrapped.__cause__ = driver_error
        assert database_unavailable(wrapped) is outage
    assert not database_unavailable(InvalidEvent("bad"))


def test_each_api_gets_its_own_503_shape():
    exc = StoreUnavailable("cannot connect")
    openai_answer = unavailable(Request("POST", "/v1/responses", {}), exc)
    anthropic_answer = unavailable(Request("POST", "/v1/messages", {}), exc)
    assert openai_answer.status == anthropic_answer.status == 503
    assert openai_answer.headers["Retry-After"] == anthropic_answer.headers["Retry-After"]
    assert b'"error":{"message":' in openai_answer.body
    assert anthropic_answer.body.startswith(b'{"type":"error","error":{"type":"overloaded_error"')
    assert unavailable(Request("POST", "/v1/messages", {}), ValueError("a bug")) is None


def test_an_outage_met_outside_a_view_answers_the_503_page(rf):
    try:
        raise db.OperationalError("server closed the connection unexpectedly")
    except db.OperationalError:
        response = server_error(rf.get("/missing/"))
    assert response.status_code == 503 and b"Database unavailable" in response.content
    try:
        raise ValueError("a bug")
    except ValueError:
        assert server_error(rf.get("/missing/")).status_code == 500
