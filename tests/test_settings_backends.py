"""Settings choose PostgreSQL and Redis from URLs, and refuse what cannot work, clearly.

Settings are read once per process, so each case imports them in a fresh interpreter with
the environment under test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

_REPORT = """
import json, sys
{prelude}
from django.conf import settings
db = settings.DATABASES["default"]
layer = settings.CHANNEL_LAYERS["default"]
print(json.dumps({{"db": {{k: str(v) for k, v in db.items() if k != "TEST"}},
                  "layer": layer["BACKEND"], "config": layer.get("CONFIG", {{}})}}))
"""


def _settings(tmp_path: Path, prelude: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    # None of the caller's deployment (CI's second pass sets the URLs) leaks into the case.
    environ = {key: value for key, value in os.environ.items() if not key.startswith("SCROLL_")}
    environ.update(
        SCROLL_DATA_DIR=str(tmp_path),
        SCROLL_SECRET_KEY="x" * 50,
        DJANGO_SETTINGS_MODULE="dashboard.settings",
        **env,
    )
    return subprocess.run(
        [sys.executable, "-c", _REPORT.format(prelude=prelude)],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _report(tmp_path: Path, **env: str) -> dict:
    done = _settings(tmp_path, **env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_embedded_default_is_sqlite_and_the_in_memory_layer(tmp_path):
    report = _report(tmp_path)
    assert report["db"]["ENGINE"] == "django.db.backends.sqlite3"
    assert report["db"]["NAME"] == str(tmp_path / "console.sqlite3")
    assert report["layer"] == "dashboard.layers.ThrottledInMemoryChannelLayer"


def test_a_postgres_url_is_parsed_into_django_database_settings(tmp_path):
    url = "postgres://scroll:p%40ss%3Aword@db.internal:6543/console"
    report = _report(tmp_path, SCROLL_DATABASE_URL=url)
    assert report["db"]["ENGINE"] == "django.db.backends.postgresql"
    assert report["db"]["NAME"] == "console"
    assert report["db"]["USER"] == "scroll"
    assert report["db"]["PASSWORD"] == "p@ss:word"
    assert report["db"]["HOST"] == "db.internal"
    assert report["db"]["PORT"] == "6543"
    # A connection that died in a PostgreSQL restart is replaced before use (issue 30).
    assert report["db"]["CONN_HEALTH_CHECKS"] == "True"


def test_a_redis_url_selects_the_redis_channel_layer(tmp_path):
    report = _report(tmp_path, SCROLL_REDIS_URL="redis://cache.internal:6380/2")
    assert report["layer"] == "channels_redis.core.RedisChannelLayer"
    [host] = report["config"]["hosts"]
    assert host["address"] == "redis://cache.internal:6380/2"
    # Reads outlast the layer's blocking pop: redis-py 8's 5 s default dropped idle pages.
    assert host["socket_timeout"] > 5


def test_several_processes_with_redis_are_accepted(tmp_path):
    report = _report(tmp_path, SCROLL_PROCESSES="4", SCROLL_REDIS_URL="redis://127.0.0.1:1/0")
    assert report["layer"] == "channels_redis.core.RedisChannelLayer"


@pytest.mark.parametrize(
    ("env", "prelude", "message"),
    [
        pytest.param(
            {"SCROLL_DATABASE_URL": "mysql://u@h/db"},
            "",
            "SCROLL_DATABASE_URL must be a postgres:// URL, not 'mysql'",
            id="not-postgres",
        ),
        pytest.param(
            {"SCROLL_DATABASE_URL": "postgres://u@h:notaport/db"},
            "",
            "SCROLL_DATABASE_URL cannot be parsed",
            id="bad-port",
        ),
        pytest.param(
            {"SCROLL_DATABASE_URL": "postgres://u@h:5432"},
            "",
            "SCROLL_DATABASE_URL names no database",
            id="no-database",
        ),
        pytest.param(
            {"SCROLL_REDIS_URL": "http://cache:6379"},
            "",
            "SCROLL_REDIS_URL must be a redis:// URL, not 'http'",
            id="not-redis",
        ),
        pytest.param(
            {"SCROLL_PROCESSES": "3"},
            "",
            "SCROLL_PROCESSES=3 says several processes serve or run this console",
            id="several-processes-in-memory",
        ),
        pytest.param(
            {"SCROLL_PROCESSES": "0"},
            "",
            "SCROLL_PROCESSES must be at least 1",
            id="zero-processes",
        ),
        pytest.param(
            {"SCROLL_DATABASE_URL": "postgres://u@h/db"},
            # An import of a module set to None in sys.modules fails, as if not installed.
            "sys.modules['psycopg'] = None",
            "install the extra: pip install 'scroll[postgres]'",
            id="postgres-extra-missing",
        ),
        pytest.param(
            {"SCROLL_REDIS_URL": "redis://h:6379/0"},
            "sys.modules['channels_redis'] = None",
            "install the extra: pip install 'scroll[redis]'",
            id="redis-extra-missing",
        ),
    ],
)
def test_it_refuses_settings_that_cannot_work_and_says_why(tmp_path, env, prelude, message):
    done = _settings(tmp_path, prelude=prelude, **env)
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr
    assert message in done.stderr


@pytest.mark.django_db
def test_the_suite_runs_on_the_backends_the_environment_names():
    """CI's second pass must really be on PostgreSQL and Redis, not quietly on the default."""
    from channels.layers import get_channel_layer
    from django.db import connection

    layer = type(get_channel_layer()).__name__
    if os.environ.get("SCROLL_DATABASE_URL"):
        assert connection.vendor == "postgresql"
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = current_database()")
            assert cursor.fetchone() == (1,)
    else:
        assert connection.vendor == "sqlite"
    expected = "RedisChannelLayer" if os.environ.get("SCROLL_REDIS_URL") else "InMemory"
    assert expected in layer, layer
