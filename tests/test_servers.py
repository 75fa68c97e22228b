"""The throwaway PostgreSQL and Redis servers really serve, on loopback only."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.servers import unavailable

REPO = Path(__file__).resolve().parents[1]


def test_postgres_server_answers_a_query(postgres_server):
    parts = urlsplit(postgres_server.url)
    assert parts.hostname in {"127.0.0.1", "localhost", "::1"}
    psql = shutil.which("psql")
    assert psql, "psql not found"
    out = subprocess.run(
        [psql, postgres_server.url, "-tAc", "SELECT current_database(), 6 * 7"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "scroll|42"


def test_redis_server_answers_ping_and_keeps_a_key(redis_server):
    parts = urlsplit(redis_server.url)
    assert parts.hostname in {"127.0.0.1", "localhost", "::1"}
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
        sock.sendall(b"PING\r\nSET scroll:probe 42\r\nGET scroll:probe\r\n")
        received = b""
        while received.count(b"\r\n") < 4:
            chunk = sock.recv(1024)
            assert chunk, "Redis closed the connection"
            received += chunk
    assert received == b"+PONG\r\n+OK\r\n$2\r\n42\r\n"


def test_the_runner_hands_both_urls_to_the_command_and_returns_its_status(tmp_path):
    """`python -m tests.servers CMD` is CI's second pass: CMD sees live servers' URLs."""
    script = (
        "import os, socket, sys\n"
        "from urllib.parse import urlsplit\n"
        "for name in ('SCROLL_DATABASE_URL', 'SCROLL_REDIS_URL'):\n"
        "    url = urlsplit(os.environ[name])\n"
        "    socket.create_connection((url.hostname, url.port), timeout=5).close()\n"
        "    print(name, url.scheme)\n"
        "sys.exit(3)\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "tests.servers", "--", sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    if "PostgreSQL/Redis could not start" in done.stderr or "skipped the" in done.stderr:
        unavailable("PostgreSQL/Redis", done.stderr)
    assert done.returncode == 3, done.stderr
    assert "SCROLL_DATABASE_URL postgres" in done.stdout
    assert "SCROLL_REDIS_URL redis" in done.stdout


def test_the_runner_refuses_to_run_nothing():
    done = subprocess.run(
        [sys.executable, "-m", "tests.servers"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "usage: python -m tests.servers" in done.stderr


@pytest.mark.parametrize(("ci", "status"), [("true", 1), ("", 0)])
def test_a_server_that_cannot_start_fails_the_pass_under_ci_and_warns_elsewhere(ci, status):
    # No redis-server on PATH (and no external one named): Redis cannot start.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCROLL_TEST_")}
    env.update(PATH="/nonexistent", CI=ci)
    done = subprocess.run(
        [sys.executable, "-m", "tests.servers", sys.executable, "-c", "raise SystemExit(9)"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == status, done.stderr
    assert "redis-server not found" in done.stderr
    assert ("CI=true" in done.stderr) == bool(ci)
