"""The full-text index's pending list stays small on a live PostgreSQL log
(``pg_schema.m006_fts_pending_limit``): every search reads that list whole until it is merged,
and PostgreSQL's default lets it grow to 4 MB of new entries."""

from __future__ import annotations

import random
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from scroll_core.store import pg_schema
from scroll_core.store.pg_log import PgEventLog
from scroll_core.tokens import CharRatioCounter
from tests.conftest import fresh_pg_database

# Pages of 8 kB the list may span at FTS_PENDING_KB, and one batch's worth over it: the merge
# runs at the end of the statement that took the list past the limit.
LIMIT_PAGES = pg_schema.FTS_PENDING_KB // 8
BATCH = 50


def _rows(n: int, offset: int) -> list[dict[str, Any]]:
    rng = random.Random(offset)
    words = [f"word{i}" for i in range(5000)]
    return [
        {
            "session_id": "s",
            "kind": "context_msg",
            "content": " ".join(rng.choices(words, k=rng.randint(20, 60))),
        }
        for _ in range(n)
    ]


def _pending_pages(admin: psycopg.Connection[Any]) -> int:
    row = admin.execute("SELECT pending_pages FROM pgstatginindex('events_fts_tsv')").fetchone()
    assert row is not None
    return int(row[0])


def _limit(admin: psycopg.Connection[Any]) -> list[str]:
    row = admin.execute(
        "SELECT coalesce(reloptions, '{}') FROM pg_class WHERE relname = 'events_fts_tsv'"
    ).fetchone()
    assert row is not None
    return list(row[0])


def test_a_log_from_before_the_limit_gets_it_and_its_list_stays_small(postgres_server):
    with (
        fresh_pg_database(postgres_server.url, "template1") as url,
        psycopg.connect(url, autocommit=True) as admin,
    ):
        admin.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        saved = pg_schema.MIGRATIONS[:]
        try:
            pg_schema.MIGRATIONS[:] = saved[:5]
            with PgEventLog(url, token_counter=CharRatioCounter()) as old:
                # No autovacuum run may merge the list behind the test's back.
                admin.execute("ALTER TABLE events_fts SET (autovacuum_enabled = false)")
                for i in range(0, 1500, BATCH):
                    old.append_many(_rows(BATCH, i))
        finally:
            pg_schema.MIGRATIONS[:] = saved
        assert _limit(admin) == []
        before = _pending_pages(admin)
        assert before > LIMIT_PAGES + 8  # the default let it grow: what m006 stops

        with PgEventLog(url, token_counter=CharRatioCounter()) as log:
            assert _limit(admin) == [f"gin_pending_list_limit={pg_schema.FTS_PENDING_KB}"]
            seen = []
            for i in range(1500, 2650, BATCH):
                log.append_many(_rows(BATCH, i))
                seen.append(_pending_pages(admin))
            assert max(seen) <= LIMIT_PAGES + 8, seen
            assert min(seen) < before
            # After a bulk load the operator's optimize merges what is left.
            log.append_many(_rows(BATCH, 2650))
            assert _pending_pages(admin) > 0
            log.fts_optimize()
            assert _pending_pages(admin) == 0
            # Nothing was lost in the merges: every event is found, old and new.
            assert log.fts_check() == 2700
            found = {hit.seq for hit in log.search("word7", k=3000) if hit.matched}
            matching = "SELECT seq FROM events_fts WHERE tsv @@ to_tsquery('english', 'word7')"
            assert found and found == {row[0] for row in admin.execute(matching)}


def test_optimize_by_a_login_that_does_not_own_the_index_only_refreshes_statistics(
    postgres_server,
):
    role = f"pending_app_{uuid.uuid4().hex[:8]}"
    with (
        fresh_pg_database(postgres_server.url, "template1") as url,
        psycopg.connect(url, autocommit=True) as admin,
    ):
        admin.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        with PgEventLog(url, token_counter=CharRatioCounter()):
            pass  # migrated by its owner
        admin.execute(f"CREATE ROLE {role} LOGIN")
        try:
            admin.execute(f"GRANT scroll_writer TO {role}")
            parts = urlsplit(url)
            app_url = urlunsplit(parts._replace(netloc=f"{role}@{parts.hostname}:{parts.port}"))
            with PgEventLog(app_url, token_counter=CharRatioCounter()) as app:
                app.append_many(_rows(BATCH, 0))
                app.fts_optimize()  # no error
                assert _pending_pages(admin) > 0  # left to autovacuum
                assert app.count() == BATCH
        finally:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")
