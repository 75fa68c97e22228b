"""Shared fixtures: a fresh temporary Event Log, where the shared data lives, and a live ASGI
server (daphne runs once per process: the browser and gateway tests share it)."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from scroll_core import EventLog
from tests.servers import in_ci

# The fault tests' servers, Event Log, worker and workload (issue 30).
pytest_plugins = ["tests.fault_fixtures"]

REPO = Path(__file__).resolve().parents[1]
# CI lays shared/ beside the checkout; the data is read in place, never copied in.
SHARED_DATA = REPO.parent / "shared" / "data"


# What CI installs so that no test may skip for its lack there (see .ci/run): a skip whose
# reason names one of these fails the test instead when CI=true.
CI_REQUIRED = (
    "bwrap",
    "bubblewrap",
    "chromium",
    "playwright",
    "docker compose",
    "docker-compose",
    "@anthropic-ai/claude-code",
    "@openai/codex",
    "opencode-ai",
    "aider-chat",
)


def _fail_a_skip_for_a_ci_tool(report: Any) -> None:
    """Under CI=true, turn ``report`` (a skipped test or module) into a failure when its
    reason names a tool CI installs."""
    if not (report.skipped and in_ci()) or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if any(tool in reason.lower() for tool in CI_REQUIRED):
        report.outcome = "failed"
        report.longrepr = f"CI=true and a tool CI must have is missing, so this fails: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_a_skip_for_a_ci_tool(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A module that skips as a whole (``pytest.importorskip`` at its top) is a collection
    report, not a test's: the same rule applies to it."""
    outcome = yield
    _fail_a_skip_for_a_ci_tool(outcome.get_result())


# What the second pass (`make test-scaled`: the console database on PostgreSQL, the channel
# layer on Redis) can change: a test is run there when it reaches the console's database or
# settings through one of these fixtures (directly or through the fixtures it uses), carries
# pytest-django's django_db mark, or its module talks to the channel layer. Every other test
# (the core library, kernels, servers it starts with an environment of its own) gets the
# same result on both passes, so it runs once. `pytest -m console_backend` selects the rest.
# A module may mark itself `same_on_every_backend` when it reaches the backends but checks
# what they cannot change; it says why (the browser pages' layout and scripts, the real
# agent CLIs' wire protocols: the database and channel layer under them are tested on both
# passes by the view, gateway and live tests). That keeps the second pass to what it can find.
# (Not django_db_blocker: pytest-django's autouse fixtures request it for every test.)
CONSOLE_BACKEND_FIXTURES = frozenset(
    {
        "db", "transactional_db", "django_db_setup", "settings",
        "client", "async_client", "admin_client", "admin_user", "django_user_model",
        "live_server", "asgi_server", "console_log", "console_store", "gateway",
    }
)  # fmt: skip
CHANNEL_LAYER_WORDS = ("get_channel_layer", "WebsocketCommunicator", "channel_layer")


def _uses_channel_layer(module: Any, seen: dict[str, bool]) -> bool:
    path = str(getattr(module, "__file__", "") or "")
    if path not in seen:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError:
            text = ""
        seen[path] = any(word in text for word in CHANNEL_LAYER_WORDS)
    return seen[path]


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "console_backend: reaches the console's database, settings or channel layer (set by "
        "conftest.py, never by hand): the PostgreSQL and Redis pass runs only these",
    )
    config.addinivalue_line(
        "markers",
        "same_on_every_backend: reaches the console's backends, but what it checks cannot "
        "change with them (a page's layout, a real agent CLI's protocol); the module says why. "
        "Not run again on PostgreSQL and Redis",
    )


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the mark set here
def pytest_collection_modifyitems(config, items):
    seen: dict[str, bool] = {}
    for item in items:
        if item.get_closest_marker("same_on_every_backend") is not None:
            continue
        if (
            CONSOLE_BACKEND_FIXTURES.intersection(getattr(item, "fixturenames", ()))
            or item.get_closest_marker("django_db") is not None
            or _uses_channel_layer(getattr(item, "module", None), seen)
        ):
            item.add_marker(pytest.mark.console_backend)


def _worker_redis_url(url: str, worker: str) -> str:
    """``url`` on a Redis database of this xdist worker's own (gw0 -> 1, gw1 -> 2, ...)."""
    number = int(worker.removeprefix("gw")) + 1
    return urlunsplit(urlsplit(url)._replace(path=f"/{number}"))


def _isolate_xdist_worker() -> None:
    """Under pytest-xdist the workers of the PostgreSQL and Redis pass share one Redis server:
    each takes a database of its own there, so channel groups and the gateway's keys never
    cross. (pytest-django already gives each its own test database.)"""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return
    for name in ("SCROLL_REDIS_URL", "SCROLL_TEST_REDIS_URL"):
        if os.environ.get(name):
            os.environ[name] = _worker_redis_url(os.environ[name], worker)
    try:
        from django.conf import settings
    except ImportError:
        return
    if settings.configured and getattr(settings, "SCROLL_REDIS_URL", ""):
        settings.SCROLL_REDIS_URL = os.environ["SCROLL_REDIS_URL"]
        from dashboard.settings import redis_channel_layer

        settings.CHANNEL_LAYERS["default"] = redis_channel_layer(settings.SCROLL_REDIS_URL)


_isolate_xdist_worker()


@pytest.fixture
def log(tmp_path):
    """A fresh Event Log in a temporary folder."""
    with EventLog(tmp_path / "eventlog.sqlite3") as event_log:
        yield event_log


@pytest.fixture
def log_small(tmp_path):
    """A fresh Event Log whose payload threshold is 100 characters."""
    with EventLog(tmp_path / "small.sqlite3", payload_threshold=100) as event_log:
        yield event_log


@pytest.fixture
def slog(tmp_path):
    """A fresh Event Log that moves any message over 200 characters to its payload store and
    counts tokens at four characters each (no tokenizer: the gateway's core tests)."""
    from scroll_core.tokens import CharRatioCounter

    with EventLog(
        tmp_path / "eventlog.sqlite3", payload_threshold=200, token_counter=CharRatioCounter()
    ) as event_log:
        yield event_log


@pytest.fixture
def ring(monkeypatch):
    """Spans kept in memory (no exporter from the environment), reset after the test."""
    from scroll_core import telemetry

    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    state = telemetry.configure(ring_size=5000)
    yield state.ring
    telemetry.reset()


@pytest.fixture
def shared_data():
    """The folder of real data written by others; tests that need it skip without it."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def console_log(settings, tmp_path):
    """The console's Event Log, moved to a fresh temporary data folder for this test."""
    from dashboard.eventlog import get_event_log

    data = tmp_path / "data"
    data.mkdir()
    settings.SCROLL_DATA_DIR = data
    settings.SCROLL_EVENTLOG_PATH = data / "eventlog.sqlite3"
    settings.SCROLL_PAYLOAD_DIR = data / "payloads"
    return get_event_log()


@pytest.fixture
def console_store(request, backend, settings, tmp_path):
    """The console's Event Log on each backend: ``console_log``'s SQLite file, or a fresh
    PostgreSQL database set as SCROLL_EVENTLOG_URL (with its read-only login for ms)."""
    if backend == "postgres":
        url = request.getfixturevalue("pg_url")
        settings.SCROLL_EVENTLOG_URL = url
        settings.SCROLL_EVENTLOG_READER_URL = pg_reader_url(url)
    event_log = request.getfixturevalue("console_log")
    assert event_log.backend == backend
    return event_log


@pytest.fixture(scope="session")
def postgres_server():
    """A throwaway PostgreSQL server on loopback for the whole run (see tests/servers.py)."""
    from tests import servers

    try:
        with servers.postgres() as server:
            yield server
    except servers.ServerUnavailable as exc:
        servers.unavailable("PostgreSQL", str(exc))


@pytest.fixture(scope="session")
def redis_server():
    """A throwaway Redis server on loopback for the whole run (see tests/servers.py)."""
    from tests import servers

    try:
        with servers.redis() as server:
            yield server
    except servers.ServerUnavailable as exc:
        servers.unavailable("Redis", str(exc))


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's test database, and on PostgreSQL no session left on it at the end.

    A daemon thread (span sink, embedded worker) may still hold a connection when the run
    ends; PostgreSQL then refuses to drop the test database, while SQLite just deletes its
    file. Ending those sessions first is the PostgreSQL side of the same teardown.
    """
    yield
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    connection.close()


@pytest.fixture(scope="session")
def pg_template(postgres_server):
    """A database migrated once, copied by ``pg_url`` for every test that needs a fresh log."""
    import psycopg

    from scroll_core.store.pg_log import PgEventLog

    # One per xdist worker: the workers of the PostgreSQL pass share one server.
    name = f"scroll_template_{os.environ.get('PYTEST_XDIST_WORKER') or 'main'}"
    with psycopg.connect(postgres_server.url, autocommit=True) as db:
        db.execute(f"DROP DATABASE IF EXISTS {name}")
        db.execute(f"CREATE DATABASE {name}")
    PgEventLog(_database_url(postgres_server.url, name)).close()
    return name


@contextmanager
def fresh_pg_database(server_url: str, template: str) -> Iterator[str]:
    """The superuser URL of a new database copied from ``template``, dropped afterwards."""
    import uuid

    import psycopg

    name = f"scroll_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as db:
        db.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
    try:
        yield _database_url(server_url, name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as db:
            db.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def pg_reader_url(url: str) -> str:
    """The URL of a login that is a member of ``scroll_reader`` only (made once per run),
    for the database at ``url``: what ``ms.sql_query`` runs model SQL as."""
    import psycopg

    from scroll_core.store.pg_schema import READER_ROLE

    login = "scroll_ms_test"
    with psycopg.connect(url, autocommit=True) as db:
        # Another xdist worker may make it between the check and the CREATE.
        db.execute(
            f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{login}') "
            f"THEN CREATE ROLE {login} LOGIN IN ROLE {READER_ROLE}; END IF; "
            "EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
        )
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{login}@{parts.hostname}:{parts.port}"))


@pytest.fixture
def pg_url(postgres_server, pg_template):
    """The superuser URL of a fresh, migrated, empty Event Log database (dropped after)."""
    with fresh_pg_database(postgres_server.url, pg_template) as url:
        yield url


def _database_url(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


# The Event Log backends every parametrized suite runs on (test ids ``[sqlite]``/``[postgres]``).
BACKENDS = ("sqlite", "postgres")


@contextmanager
def open_store(
    request: pytest.FixtureRequest, backend: str, folder: Path, **options: Any
) -> Iterator[Any]:
    """A fresh Event Log on ``backend`` with ``options`` (``payload_threshold``,
    ``token_counter``...): SQLite as a file in ``folder``, PostgreSQL in a fresh database of
    the throwaway server. Without a server the ``postgres`` test skips (fails under CI), as
    ``postgres_server`` does; fixtures of any scope may use it."""
    if backend == "sqlite":
        with EventLog(folder / "eventlog.sqlite3", **options) as event_log:
            yield event_log
        return
    from scroll_core.store.pg_log import PgEventLog

    server = request.getfixturevalue("postgres_server")
    template = request.getfixturevalue("pg_template")
    with (
        fresh_pg_database(server.url, template) as url,
        PgEventLog(url, reader_url=pg_reader_url(url), **options) as event_log,
    ):
        yield event_log


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    """Which Event Log backend this test runs on; ``store`` opens a log on it."""
    return request.param


@pytest.fixture
def store_options() -> dict[str, Any]:
    """Keyword options ``store`` opens its log with; a test module overrides this fixture
    to give every log in it, e.g., a token counter or a small payload threshold."""
    return {}


@pytest.fixture
def store(request, backend, tmp_path, store_options):
    """A fresh Event Log on each backend: SQLite in a temporary folder, PostgreSQL in a
    fresh database of the throwaway server."""
    with open_store(request, backend, tmp_path, **store_options) as event_log:
        yield event_log


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def asgi_server():
    """daphne on 127.0.0.1 serving dashboard.asgi (the reactor runs once per process)."""
    from daphne.endpoints import build_endpoint_description_strings
    from daphne.server import Server

    from dashboard.asgi import application

    port = _free_port()
    server = Server(
        application=application,
        endpoints=build_endpoint_description_strings(host="127.0.0.1", port=port),
        signal_handlers=False,
        verbosity=0,
    )
    thread = threading.Thread(target=server.run, name="daphne", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    else:
        pytest.fail("daphne did not start listening on 127.0.0.1")
    yield f"http://127.0.0.1:{port}"


@pytest.fixture
def operator(client, django_user_model):
    """A logged-in client whose account holds the console's permissions only through the
    Operators group."""
    from django.contrib.auth.models import Group

    from dashboard.runs.permissions import OPERATORS_GROUP

    user = django_user_model.objects.create_user("operator", password="pw-operator-1")
    user.groups.add(Group.objects.get(name=OPERATORS_GROUP))
    client.force_login(user)
    return client


@pytest.fixture
def live_runner(console_log):
    """A worker of its own (one slot, a process-tier kernel pool), and telemetry feeding a
    console span sink, for one test. Yields the worker and the sink."""
    from dashboard.runs.worker import Worker
    from dashboard.telemetry.spans import ConsoleSpanSink
    from scroll_core import telemetry
    from scroll_core.kernel import KernelConfig, KernelManager

    kernels = KernelManager(KernelConfig(sandbox="process"), pool_size=0)
    runner = Worker(slots=1, kernels=kernels, poll_s=0.05).start()
    sink = ConsoleSpanSink()
    telemetry.configure(sinks=[sink], ring_size=None, otlp=False)
    try:
        yield runner, sink
    finally:
        runner.shutdown()
        sink.flush(5.0)
        telemetry.reset()
        sink.close()


@pytest.fixture
def upstream():
    """A scripted loopback upstream, OpenAI- and Anthropic-format (tests/gateway_upstream.py)."""
    from gateway_upstream import ScriptedUpstream

    server = ScriptedUpstream()
    yield server
    server.close()


def _forget_gateway_state_at_redis() -> None:
    """Delete the gateway's keys at Redis (PostgreSQL + Redis runs). Sessions held, leases,
    rate windows and token counts outlive a service there, unlike the embedded run's
    in-memory limits: a request an earlier test left running (its client hung up) keeps its
    session held until its lease ends, and key ids restart with each test's database."""
    from django.conf import settings

    url = getattr(settings, "SCROLL_REDIS_URL", "")
    if not url:
        return
    import redis

    client = redis.Redis.from_url(url)
    try:
        stale = list(client.scan_iter(match="scroll:gateway:*"))
        if stale:
            client.delete(*stale)
    finally:
        client.close()


@pytest.fixture
def gateway(asgi_server, console_log, upstream, monkeypatch):
    """The gateway's server URL, with a fresh Event Log, no live conversations and nothing
    held at Redis; the clients made with tests/gateway_clients.py are closed after the
    test."""
    from gateway_clients import close_clients

    from dashboard.gateway.service import reset_service

    reset_service()
    _forget_gateway_state_at_redis()
    monkeypatch.setenv("GW_TEST_UPSTREAM_KEY", "sk-upstream-secret")
    yield asgi_server
    close_clients()
    reset_service()
