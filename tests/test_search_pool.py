"""The turns a search reads beside its candidates (``search._read_pool``): each candidate's
range of seqs is read as one primary-key range (``SearchDialect.near_from``): on SQLite
through ``json_each`` and a CROSS JOIN, on PostgreSQL from the candidates' array, each
range a LATERAL subquery. The rows must be exactly those the listing of every seq reads,
with ranges that overlap, cross a session's edge or fall outside the filters, and each
plan must read events by those ranges. A lean read (the ranking's columns alone,
``search._lean``; SQLite) must give the very hits a full read gives, and PostgreSQL's whole
read (``lean_pool`` False) the hits of the listed lean one."""

from __future__ import annotations

import itertools
import re
from dataclasses import replace

import pytest

from scroll_core import EventLog, SearchTuning
from scroll_core.store import fts_query, search
from scroll_core.store.pg_search import PG_DIALECT
from scroll_core.store.search import POOL_HIT_COLUMNS, SearchFilters, _read_pool
from scroll_core.store.sqlite_search import SQLITE
from tests.conftest import BACKENDS, open_store
from tests.test_search_linear_rank import FILTERS, queries, seeded

# Each backend's dialect, and the reference: every seq of every range listed (``IN``).
DIALECTS = {
    "sqlite": (SQLITE, replace(SQLITE, json_lists=False)),
    "postgres": (PG_DIALECT, replace(PG_DIALECT, arrays=False, lean_pool=True)),
}
PG_LISTED = DIALECTS["postgres"][1]
PG_LEAN = replace(PG_DIALECT, lean_pool=True)


@pytest.fixture
def seeded_log(tmp_path):
    with EventLog(tmp_path / "eventlog.sqlite3") as log:
        seeded(log)
        yield log


@pytest.fixture
def seeded_pg(request, tmp_path):
    with open_store(request, "postgres", tmp_path) as log:
        seeded(log)
        log._reader().execute("ANALYZE events")
        yield log


@pytest.fixture(params=BACKENDS)
def seeded_on(request):
    """A seeded log on each backend, with its dialect and the listed reference."""
    log = request.getfixturevalue("seeded_log" if request.param == "sqlite" else "seeded_pg")
    return (log, *DIALECTS[request.param])


@pytest.mark.parametrize("reach", [0, 1, 2, 3])
def test_the_range_read_is_the_listed_read(seeded_on, reach):
    log, dialect, listed_dialect = seeded_on
    tuning = SearchTuning(neighbour_weights=(0.4, 0.5, 0.2)[:reach])
    db = log._reader()
    overlapping = 0
    for options in FILTERS:
        filters = SearchFilters(**options)
        for query in queries():
            terms = fts_query.query_terms(query)
            rows, base = _read_pool(db, terms, 10, filters, tuning, dialect)
            listed, listed_base = _read_pool(db, terms, 10, filters, tuning, listed_dialect)
            assert base == listed_base
            assert rows == listed, (query, options)
            assert sorted(rows) == list(rows)  # ascending seq, each row once
            ranges = sorted(base)
            overlapping += any(b - a <= 2 * reach for a, b in itertools.pairwise(ranges))
    if reach:
        assert overlapping > 20  # shared ranges were read, and each row kept once


def test_the_range_read_keeps_within_the_filters_and_the_log(seeded_on):
    # The ranges around the first and last seqs reach past the log's ends, and a
    # session filter cuts every range at the session's edges.
    log, dialect, _ = seeded_on
    db = log._reader()
    tuning = SearchTuning()
    filters = SearchFilters(session_id="s3")
    rows, base = _read_pool(db, ["glacier", "lake", "cabin"], 30, filters, tuning, dialect)
    assert base and set(base) <= set(rows)
    assert {row[1] for row in rows.values()} == {"s3"}
    first, last = db.execute("SELECT min(seq), max(seq) FROM events").fetchone()
    whole, _ = _read_pool(db, ["glacier"], 300, SearchFilters(), tuning, dialect)
    assert min(whole) >= first and max(whole) <= last


@pytest.mark.parametrize("options", FILTERS, ids=lambda o: ",".join(o) or "none")
def test_the_pool_is_read_by_range_under_every_filter_on_sqlite(seeded_log, options):
    # Given an agent or session filter, SQLite's planner once walked that agent's events by
    # index as the outer loop and looked each up in the candidates' list: the same rows, a
    # scan of the agent per search. The statements a search runs must each read events by
    # a range of seqs beside a candidate, never by a scan.
    db = seeded_log._reader()
    statements: list[str] = []
    db.set_trace_callback(statements.append)
    try:
        assert seeded_log.search("glacier lake cabin", k=10, **options) is not None
    finally:
        db.set_trace_callback(None)
    pooled = [sql for sql in statements if "BETWEEN" in sql]
    assert pooled, statements
    for sql in pooled:
        plan = [row[3] for row in db.execute(f"EXPLAIN QUERY PLAN {sql}")]
        reads = [step for step in plan if re.match(r"(SCAN|SEARCH) e( |$)", step)]
        assert reads, plan
        for step in reads:
            assert step.startswith("SEARCH e"), plan
            assert re.search(r"seq>\? AND seq<\?|rowid>\? AND rowid<\?|rowid=\?", step), plan


def test_a_lean_read_gives_the_hits_of_a_full_read(seeded_log, monkeypatch):
    # The shipped ranking reads a turn's session, name and text alone, so the turns beside
    # the candidates come without agent, kind, role and time; a hit among them must still
    # carry its own, read after the ranking.
    db = seeded_log._reader()
    terms = fts_query.query_terms("ben hiking glacier")
    tuning = seeded_log.search_tuning
    lean, _ = _read_pool(db, terms, 10, SearchFilters(), tuning, SQLITE, lean=True)
    full, _ = _read_pool(db, terms, 10, SearchFilters(), tuning, SQLITE)
    width = len(POOL_HIT_COLUMNS.split(","))
    assert lean == {seq: row[:-width] for seq, row in full.items()}
    assert search._lean(tuning)
    assert not search._lean(replace(tuning, diversity_weight=0.5))

    found = {}
    for options in FILTERS:
        for query in queries():
            found[(query, tuple(options.items()))] = seeded_log.search(query, k=10, **options)
    monkeypatch.setattr(search, "_lean", lambda tuning: False)
    neighbours = 0
    for (query, options), hits in found.items():
        assert hits == seeded_log.search(query, k=10, **dict(options)), (query, options)
        neighbours += _carry_their_own(seeded_log, hits)
    assert neighbours > 20  # turns read only beside a candidate made the top


@pytest.mark.parametrize("options", FILTERS, ids=lambda o: ",".join(o) or "none")
def test_the_pool_is_read_by_range_under_every_filter_on_postgres(seeded_pg, monkeypatch, options):
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
    # Rows read whole by ranges, and read lean (listed, or by ranges with the winners'
    # columns read after the ranking by ``seq_in``'s array): the same hits, each carrying
    # its own agent, kind, role and time.
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
        listed = search.run_search(db, query, 10, filters, tuning, PG_LISTED, stats)
        assert hits == listed, (query, options)
        lean = search.run_search(db, query, 10, filters, tuning, PG_LEAN, stats)
        assert hits == lean, (query, options)
        neighbours += _carry_their_own(seeded_pg, hits)
    assert neighbours > 20  # turns read only beside a candidate made the top


def _carry_their_own(log, hits) -> int:
    """How many of ``hits`` were read only beside a candidate; each must carry its own
    event's agent, kind, role and time."""
    for hit in hits:
        event = log.get(hit.seq)
        assert (hit.agent_id, hit.kind, hit.role, hit.created_at) == (
            event.agent_id, event.kind, event.role, event.created_at,
        )  # fmt: skip
    return sum(not hit.matched for hit in hits)
