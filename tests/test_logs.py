"""The console's logs (dashboard/logs.py): one line per request, the console's and the
gateway's, a traceback for every view that raises, JSON lines on request."""

from __future__ import annotations

import json
import logging.config

import httpx
import pytest
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse
from django.urls import include, path

from dashboard.logs import AccessLog, logging_config


def _ok(request):
    return HttpResponse("ok")


def _boom(request):
    raise RuntimeError("the view broke")


# This module is the URL conf of the tests that need a view of their own.
urlpatterns = [path("ok/", _ok), path("boom/", _boom), path("", include("dashboard.urls"))]


@pytest.fixture
def apply_logging():
    """Applies the logging built from an env mapping; the settings' own afterwards."""

    def apply(env):
        logging.config.dictConfig(logging_config(env))

    yield apply
    logging.config.dictConfig(django_settings.LOGGING)


@pytest.fixture
def console(settings, transactional_db):
    """An httpx client on the whole ASGI application, this module as its URL conf (the 404
    page reads the database, from the thread Django runs views in)."""
    from dashboard.asgi import application

    settings.ROOT_URLCONF = __name__
    transport = httpx.ASGITransport(app=application)
    return httpx.AsyncClient(transport=transport, base_url="http://localhost")


def _request_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if " dashboard.requests: " in line]


async def test_a_request_leaves_exactly_one_line_with_its_status(apply_logging, console, capsys):
    apply_logging({})
    async with console as client:
        assert (await client.get("/ok/")).status_code == 200
        assert (await client.get("/missing/")).status_code == 404
    lines = _request_lines(capsys.readouterr().err)
    assert len(lines) == 2, lines
    assert "GET /ok/ 200 " in lines[0] and lines[0].endswith("ms")
    assert "GET /missing/ 404 " in lines[1]
    # Django's own "Not Found: /missing/" would be a second line for the same request.
    assert "Not Found" not in capsys.readouterr().err


async def test_a_view_that_raises_leaves_a_500_line_and_its_traceback(
    apply_logging, console, capsys
):
    apply_logging({})
    async with console as client:
        assert (await client.get("/boom/")).status_code == 500
    err = capsys.readouterr().err
    lines = _request_lines(err)
    assert len(lines) == 1 and "ERROR" in lines[0] and "GET /boom/ 500 " in lines[0]
    assert "Traceback (most recent call last)" in err
    assert "RuntimeError: the view broke" in err


async def test_json_lines_carry_the_request_fields_and_the_traceback(
    apply_logging, console, capsys
):
    apply_logging({"SCROLL_LOG_FORMAT": "json"})
    async with console as client:
        await client.get("/ok/")
        await client.get("/boom/")
    records = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    requests = [r for r in records if r["logger"] == "dashboard.requests"]
    assert [(r["method"], r["path"], r["status"]) for r in requests] == [
        ("GET", "/ok/", 200),
        ("GET", "/boom/", 500),
    ]
    assert all(isinstance(r["duration_ms"], float) and r["time"] for r in requests)
    assert requests[0]["level"] == "INFO" and requests[1]["level"] == "ERROR"
    (error,) = [r for r in records if r["logger"] == "dashboard.errors"]
    assert "RuntimeError: the view broke" in error["exc_info"]


async def test_a_gateway_request_leaves_one_line_before_django(apply_logging, console, capsys):
    apply_logging({})
    async with console as client:
        answer = await client.get("/v1/models")  # a gateway route: no key
    assert answer.status_code == 401
    lines = _request_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "GET /v1/models 401 " in lines[0]


async def test_an_exception_out_of_the_app_is_a_500_with_its_traceback(apply_logging, capsys):
    async def broken(scope, receive, send):  # as a gateway endpoint that raises
        raise ValueError("no answer")

    apply_logging({"SCROLL_LOG_FORMAT": "json"})
    transport = httpx.ASGITransport(app=AccessLog(broken))
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        answer = await client.post("/v1/chat/completions", content=b"{}")
    assert answer.status_code == 500
    (line,) = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert (line["method"], line["path"], line["status"]) == ("POST", "/v1/chat/completions", 500)
    assert "ValueError: no answer" in line["exc_info"]


async def test_the_level_hides_the_lines_of_answers_below_it(apply_logging, console, capsys):
    apply_logging({"SCROLL_LOG_LEVEL": "warning"})
    async with console as client:
        await client.get("/ok/")
        await client.get("/missing/")
    lines = _request_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "GET /missing/ 404 " in lines[0]


@pytest.mark.parametrize(
    "env", [{"SCROLL_LOG_FORMAT": "xml"}, {"SCROLL_LOG_LEVEL": "loud"}], ids=["format", "level"]
)
def test_an_unknown_format_or_level_is_refused(env):
    with pytest.raises(ImproperlyConfigured, match=next(iter(env))):
        logging_config(env)


def test_daphnes_own_request_lines_are_dropped_and_its_websocket_lines_kept(apply_logging, capsys):
    apply_logging({})
    server = logging.getLogger("django.channels.server")
    details = {"method": "GET", "path": "/", "status": 200, "time_taken": 0.01, "client": "x"}
    server.info("HTTP %(method)s %(path)s %(status)s [%(time_taken).2f, %(client)s]", details)
    server.info("WebSocket CONNECT %(path)s [%(client)s]", {"path": "/ws/", "client": "x"})
    err = capsys.readouterr().err
    assert "HTTP GET" not in err and "WebSocket CONNECT /ws/" in err
