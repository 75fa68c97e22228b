"""Settings for several processes: the shared channel layer is required, SQLite is set up
for concurrent writers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _settings_in_a_fresh_process(tmp_path, **env):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SCROLL_")}
    environ.update(SCROLL_DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="dashboard.settings")
    environ.update(env)
    code = "import django; django.setup(); from django.conf import settings; print('ok')"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=environ, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize("env", [{"SCROLL_PROCESSES": "2"}, {"SCROLL_WORKERS": "external"}])
def test_settings_refuse_the_in_memory_layer_when_several_processes_serve(tmp_path, env):
    done = _settings_in_a_fresh_process(tmp_path, **env)
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr
    assert "SCROLL_REDIS_URL" in done.stderr


def test_one_process_or_a_redis_url_is_accepted(tmp_path):
    assert _settings_in_a_fresh_process(tmp_path).stdout.strip() == "ok"
    with_redis = _settings_in_a_fresh_process(
        tmp_path, SCROLL_PROCESSES="3", SCROLL_REDIS_URL="redis://127.0.0.1:1/0"
    )
    assert with_redis.stdout.strip() == "ok", with_redis.stderr


def test_an_unknown_worker_mode_is_refused(tmp_path):
    done = _settings_in_a_fresh_process(tmp_path, SCROLL_WORKERS="sometimes")
    assert done.returncode != 0 and "SCROLL_WORKERS" in done.stderr


@pytest.mark.django_db
def test_the_console_sqlite_uses_wal_and_immediate_transactions():
    from django.db import connection, transaction

    if connection.vendor != "sqlite":
        pytest.skip("SQLite-only settings; this run uses " + connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0].lower() == "wal"
    assert connection.transaction_mode == "IMMEDIATE"
    import sqlite3

    with transaction.atomic():
        connection.ensure_connection()
        # Nothing written yet, but BEGIN IMMEDIATE already holds the write lock: another
        # writer has to wait (here: fails at once) instead of deadlocking on an upgrade later.
        other = sqlite3.connect(connection.settings_dict["NAME"], timeout=0)
        try:
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        finally:
            other.close()
