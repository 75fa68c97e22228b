"""A PostgreSQL database for a bench run: in the server at ``--postgres-url`` /
``SCROLL_BENCH_POSTGRES_URL`` (a fresh database created and dropped there), or else in a
throwaway server on loopback (the one the tests use, ``tests/servers.py``, with
``BENCH_SETTINGS``)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from urllib.parse import urlsplit, urlunsplit

import psycopg

URL_ENV = "SCROLL_BENCH_POSTGRES_URL"
# The throwaway server is sized for a 1M-event log (two databases of it in one run) rather
# than left at the 128 MB of buffers a fresh cluster gets; both sides of a bench share it.
BENCH_SETTINGS = {"shared_buffers": "2GB", "max_wal_size": "8GB", "work_mem": "16MB"}


@contextmanager
def postgres_database(server_url: str | None = None) -> Iterator[str]:
    """The URL of a new, empty database (superuser), dropped afterwards."""
    with ExitStack() as stack:
        url = server_url or os.environ.get(URL_ENV)
        if not url:
            from tests import servers

            url = stack.enter_context(servers.postgres(BENCH_SETTINGS)).url
        name = f"scroll_bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(url, autocommit=True) as db:
            db.execute(f"CREATE DATABASE {name}")
        try:
            yield urlunsplit(urlsplit(url)._replace(path=f"/{name}"))
        finally:
            with psycopg.connect(url, autocommit=True) as db:
                db.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
