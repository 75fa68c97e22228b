"""The throwaway PostgreSQL and Redis servers really serve, on loopback only."""

from __future__ import annotations

import shutil
import socket
import subprocess
from urllib.parse import urlsplit


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
