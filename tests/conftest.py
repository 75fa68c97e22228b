"""Shared fixtures: a fresh temporary Event Log, and where the shared data lives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scroll_core import EventLog

REPO = Path(__file__).resolve().parents[1]
# CI lays shared/ beside the checkout; the data is read in place, never copied in.
SHARED_DATA = REPO.parent / "shared" / "data"


# What CI installs so that no test may skip for its lack there (see .ci/run): a skip whose
# reason names one of these fails the test instead when CI=true.
CI_REQUIRED = ("bwrap", "bubblewrap", "chromium", "playwright", "docker compose", "docker-compose")


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and _ci()) or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if any(tool in reason.lower() for tool in CI_REQUIRED):
        report.outcome = "failed"
        report.longrepr = f"CI=true and a tool CI must have is missing, so this fails: {reason}"


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
