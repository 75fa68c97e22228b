"""The turns a PostgreSQL search reads beside its candidates (``search._read_pool``): each
candidate's range of seqs is read as one range of the primary key, from the array of the
candidates (``SearchDialect.near_from`` with ``arrays``), with every column a hit shows
(``lean_pool`` False). The rows must be exactly those the listing of every seq reads, with
ranges that overlap, cross a session's edge or fall outside the filters; the plan must
read events by those ranges under every filter; and the hits must be those of the listed,
lean read."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from scroll_core import SearchTuning
from scroll_core.store import fts_query, search
from scroll_core.store.pg_log import PgEventLog
from scroll_core.store.pg_search import PG_DIALECT
from scroll_core.store.search import SearchFilters, _read_pool
from tests.test_search_linear_rank import FILTERS, queries, seeded

# The reference: every seq of every range listed (``IN (...)``), the ranking's columns only.
LISTED = replace(PG_DIALECT, arrays=False, lean_pool=True)


@pytest.fixture
def seeded_pg(pg_url):
    with PgEventLog(pg_url) as log:
        seeded(log)
        log._reader().execute("ANALYZE events")
        yield log


@pytest.mark.parametrize("reach", [0, 1, 2, 3])
def test_the_range_read_is_the_listed_read(seeded_pg, reach):
    tuning = SearchTuning(neighbour_weights=(0.4, 0.5, 0.2)[:reach])
    db = seeded_pg._reader()
    overlapping = 0
    for options in FILTERS:
        filters = SearchFilters(**options)
        for query in queries():
            terms = fts_query.query_terms(query)
            rows, base = _read_pool(db, terms, 10, filters, tuning, PG_DIALECT)
            listed, listed_base = _read_pool(db, terms, 10, filters, tuning, LISTED)
            assert base == listed_base
            assert rows == listed, (query, options)
            ranges = sorted(base)
            overlapping += any(b - a <= 2 * reach for a, b in itertools.pairwise(ranges))
    if reach:
        assert overlapping > 20  # shared ranges were read, and each row kept once


def test_the_range_read_keeps_within_the_filters_and_the_log(seeded_pg):
    db = seeded_pg._reader()
    tuning = SearchTuning()
    rows, base = _read_pool(
        db, ["glacier", "lake", "cabin"], 30, SearchFilters(session_id="s3"), tuning, PG_DIALECT
    )
    assert base and set(base) <= set(rows)
    assert {row[1] for row in rows.values()} == {"s3"}
    first, last = db.execute("SELECT min(seq), max(seq) FROM events").fetchone()
    whole, _ = _read_pool(db, ["glacier"], 300, SearchFilters(), tuning, PG_DIALECT)
    assert min(whole) >= first and max(whole) <= last


@pytest.mark.parametrize("options", FILTERS, ids=lambda o: ",".join(o) or "none")
def test_the_pool_is_read_by_range_under_every_filter(seeded_pg, monkeypatch, options):
    # The candidates must stay the outer loop, each reading its range by the primary key:
    # a plan that walked an agent's or a session's events instead would read the same rows
    # at the cost of a scan per search. (A plain join did, on this small table.)
    db = seeded_pg._reader()
    pooled: list[tuple[str, tuple]] = []
    execute = type(db).execute

    def watched(self, sql, params=None, **kwargs):
        if "AS j(seq) CROSS JOIN LATERAL" in str(sql):
            pooled.append((str(sql), params))
        return execute(self, sql, params, **kwargs)

    monkeypatch.setattr(type(db), "execute", watched)
    assert seeded_pg.search("glacier lake cabin", k=10, **options) is not None
    monkeypatch.undo()
    assert pooled
    for sql, params in pooled:
        plan = "\n".join(row[0] for row in db.execute(f"EXPLAIN {sql}", params))
        assert "Seq Scan on events" not in plan, plan
        assert "Index Scan using events_pkey on events e" in plan, plan
        assert "Index Cond: ((seq >= (j.seq - 2)) AND (seq <= (j.seq + 2)))" in plan, plan
        assert plan.index("Function Scan on unnest j") < plan.index("Index Scan"), plan


def test_the_hits_are_those_of_the_listed_lean_read(seeded_pg):
    # Rows read whole by ranges, and read lean by listing with the winners' columns read
    # after the ranking: the same hits, each carrying its own agent, kind, role and time.
    found = {}
    for options in FILTERS:
        for query in queries():
            found[(query, tuple(options.items()))] = seeded_pg.search(query, k=10, **options)
    assert search._lean(seeded_pg.search_tuning)
    neighbours = 0
    db = seeded_pg._reader()
    for (query, options), hits in found.items():
        filters = SearchFilters(**dict(options))
        tuning, stats = seeded_pg.search_tuning, seeded_pg.term_stats
        listed = search.run_search(db, query, 10, filters, tuning, LISTED, stats)
        assert hits == listed, (query, options)
        for hit in hits:
            neighbours += not hit.matched
            event = seeded_pg.get(hit.seq)
            assert (hit.agent_id, hit.kind, hit.role, hit.created_at) == (
                event.agent_id, event.kind, event.role, event.created_at,
            )  # fmt: skip
    assert neighbours > 20  # turns read only beside a candidate made the top
