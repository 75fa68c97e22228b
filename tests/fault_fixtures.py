"""Fixtures of the fault tests (issue 30), loaded for every test module by
``tests/conftest.py``: PostgreSQL and Redis servers a module may stop, the console's Event Log
on such a PostgreSQL as the writer login a deployment uses, a worker, the console on Redis,
and the fault suite's ``Workload`` (``tests/faults.py``) over all of them."""

from __future__ import annotations

import uuid

import psycopg
import pytest

WRITER = "scroll_fault_app"


@pytest.fixture(scope="module")
def stoppable_pg():
    """A PostgreSQL server of this module's own: its tests stop it and change its settings."""
    from tests import servers

    try:
        with servers.postgres(own=True) as server:
            if server.control is None:
                pytest.skip("an external PostgreSQL server cannot be restarted by the tests")
            yield server
    except servers.ServerUnavailable as exc:
        servers.unavailable("PostgreSQL", str(exc))


@pytest.fixture(scope="module")
def stoppable_redis():
    """A Redis server of this module's own: its tests stop it and start it again (empty)."""
    from tests import servers

    try:
        with servers.redis(own=True) as server:
            yield server
    except servers.ServerUnavailable as exc:
        servers.unavailable("Redis", str(exc))


@pytest.fixture
def fault_log(request, settings, monkeypatch, stoppable_pg):
    """The console's Event Log in a fresh database on ``stoppable_pg``, migrated by its
    owner and used as the writer login; the owner's URL is returned (the checks read with
    it). The server runs again after the test, whatever it did."""
    from dashboard.eventlog import reset_event_log
    from scroll_core.store.pg_log import PgEventLog
    from scroll_core.store.pg_roles import login_statements
    from tests.faults import with_url

    name = f"faults_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(stoppable_pg.url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    owner = with_url(stoppable_pg.url, database=name)
    PgEventLog(owner).close()
    with psycopg.connect(owner, autocommit=True) as admin:
        for statement in login_statements(writer=WRITER, reader=None):
            admin.execute(statement)
    monkeypatch.setenv("SCROLL_DB_OUTAGE_S", "1")
    settings.SCROLL_EVENTLOG_URL = with_url(owner, login=WRITER)
    settings.SCROLL_EVENTLOG_READER_URL = None
    reset_event_log()
    log = request.getfixturevalue("console_log")
    assert log.backend == "postgres"
    yield owner
    stoppable_pg.control.start()
    reset_event_log()


@pytest.fixture
def console_on_redis(settings, stoppable_redis):
    """The console's channel layer and the gateway's shared limits on ``stoppable_redis``,
    as settings make them for SCROLL_REDIS_URL; its control is returned. Redis runs again
    after the test, whatever it did."""
    from channels.layers import channel_layers

    from dashboard.gateway.service import reset_service
    from dashboard.layer_outage import layer_outage
    from dashboard.settings import redis_channel_layer

    def fresh() -> None:
        channel_layers.backends.clear()
        layer_outage.down_since = None
        reset_service()

    settings.CHANNEL_LAYERS = {"default": redis_channel_layer(stoppable_redis.url)}
    settings.SCROLL_REDIS_URL = stoppable_redis.url
    fresh()
    yield stoppable_redis.control
    stoppable_redis.control.start()
    fresh()


@pytest.fixture
def worker():
    """A worker thread (sandbox ``process`` kernels) that waits up to 60 s for a database."""
    from dashboard.runs.worker import Worker
    from scroll_core.kernel import KernelConfig, KernelManager

    worker = Worker(kernels=KernelManager(KernelConfig(sandbox="process"), pool_size=0),
                    poll_s=0.05, outage_s=60).start()  # fmt: skip
    yield worker
    worker.shutdown()


@pytest.fixture
def workload(fault_log, gateway, upstream, operator, worker):
    """Runs, gateway requests and pages over ``fault_log``'s console (``tests/faults.py``)."""
    from gateway_clients import make_key

    from tests.faults import Workload

    operator.raise_request_exception = False
    key = make_key(upstream, agent="faults")
    return Workload(gateway=gateway, key=key, client=operator, upstream=upstream)
