"""The turns a search reads beside its candidates (``search._read_pool``): on SQLite each
candidate's range of seqs is read as one primary-key range (``SearchDialect.near_from``);
the rows must be exactly those the listing of every seq (PostgreSQL's form) reads, with
ranges that overlap, cross a session's edge or fall outside the filters. A lean read (the
ranking's columns alone, ``search._lean``) must give the very hits a full read gives."""

from __future__ import annotations

import itertools
import re
from dataclasses import replace

import pytest

from scroll_core import EventLog, SearchTuning
from scroll_core.store import fts_query, search
from scroll_core.store.search import POOL_HIT_COLUMNS, SearchFilters, _read_pool
from scroll_core.store.sqlite_search import SQLITE
from tests.test_search_linear_rank import FILTERS, queries, seeded

LISTED = replace(SQLITE, json_lists=False)


@pytest.fixture
def seeded_log(tmp_path):
    with EventLog(tmp_path / "eventlog.sqlite3") as log:
        seeded(log)
        yield log


@pytest.mark.parametrize("reach", [0, 1, 2, 3])
def test_the_range_read_is_the_listed_read(seeded_log, reach):
    tuning = SearchTuning(neighbour_weights=(0.4, 0.5, 0.2)[:reach])
    db = seeded_log._reader()
    overlapping = 0
    for options in FILTERS:
        filters = SearchFilters(**options)
        for query in queries():
            terms = fts_query.query_terms(query)
            rows, base = _read_pool(db, terms, 10, filters, tuning, SQLITE)
            listed, listed_base = _read_pool(db, terms, 10, filters, tuning, LISTED)
            assert base == listed_base
            assert rows == listed, (query, options)
            assert sorted(rows) == list(rows)  # ascending seq, each row once
            ranges = sorted(base)
            overlapping += any(b - a <= 2 * reach for a, b in itertools.pairwise(ranges))
    if reach:
        assert overlapping > 20  # shared ranges were read, and each row kept once


def test_the_range_read_keeps_within_the_filters_and_the_log(seeded_log):
    # The ranges around the first and last seqs reach past the log's ends, and a
    # session filter cuts every range at the session's edges.
    db = seeded_log._reader()
    tuning = SearchTuning()
    filters = SearchFilters(session_id="s3")
    rows, base = _read_pool(db, ["glacier", "lake", "cabin"], 30, filters, tuning, SQLITE)
    assert base and set(base) <= set(rows)
    assert {row[1] for row in rows.values()} == {"s3"}
    first, last = db.execute("SELECT min(seq), max(seq) FROM events").fetchone()
    whole, _ = _read_pool(db, ["glacier"], 300, SearchFilters(), tuning, SQLITE)
    assert min(whole) >= first and max(whole) <= last


@pytest.mark.parametrize("options", FILTERS, ids=lambda o: ",".join(o) or "none")
def test_the_pool_is_read_by_range_under_every_filter(seeded_log, options):
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
        for hit in hits:
            neighbours += not hit.matched
            event = seeded_log.get(hit.seq)
            assert (hit.agent_id, hit.kind, hit.role, hit.created_at) == (
                event.agent_id, event.kind, event.role, event.created_at,
            )  # fmt: skip
    assert neighbours > 20  # turns read only beside a candidate made the top
