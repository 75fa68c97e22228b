"""Top-k BM25 on PostgreSQL that stops before scoring every match (``pg_topk``): the same
top as scoring every match, fewer matches read, and the same through a concurrent writer
and a server restart. On real servers (``pg_url``; ``stoppable_pg`` for the restart)."""

from __future__ import annotations

import random
import threading
import uuid
from typing import Any

import psycopg
import pytest

from scroll_core.store import SearchFilters, SearchTuning
from scroll_core.store.pg_log import PgEventLog
from scroll_core.store.pg_search import PG_DIALECT, _bm25_sql, _scope, _tsquery, named_filters
from scroll_core.store.pg_topk import score_sql, top_k
from scroll_core.tokens import CharRatioCounter
from tests.fault_fixtures import stoppable_pg  # noqa: F401  (a fixture)

# Words the English stemmer leaves as they are (the tsqueries below name lexemes).
COMMON, MIDDLING, RARE = "plum", "kiwi", "zebra"


def _rows(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """Every event holds the common word (1 to 4 times), one in five the middling one, one
    in forty the rare one; lengths vary, and some words sit in headlines and names (the
    weighted columns)."""
    rng = random.Random(seed)
    filler = [f"w{i}" for i in range(300)]
    rows = []
    for i in range(n):
        words = rng.choices(filler, k=rng.randint(3, 40)) + [COMMON] * rng.randint(1, 4)
        if i % 5 == 0:
            words += [MIDDLING] * rng.randint(1, 3)
        if i % 40 == 0:
            words += [RARE] * rng.randint(1, 2)
        rng.shuffle(words)
        row: dict[str, Any] = {
            "session_id": f"s{i % 7}",
            "agent_id": ("main", "helper")[i % 2],
            "kind": ("context_msg", "model_turn", "tool_result")[i % 3],
            "content": " ".join(words),
        }
        if i % 11 == 0:
            row["headline"] = f"{MIDDLING} news"
        if i % 13 == 0:
            row["name"] = RARE
        rows.append(row)
    return rows


@pytest.fixture
def filled(pg_url):
    with PgEventLog(pg_url, token_counter=CharRatioCounter()) as log:
        log.append_many(_rows(1200))
        yield log


def _params(text: str, agents: Any = None, weights=None) -> tuple[str, dict[str, Any]]:
    content, headline, name = weights or SearchTuning().rank_weights
    scope, params = _scope(agents)
    return scope, {"text": text, "wa": headline, "wc": name, "wd": content, **params}


class Recording:
    """A real connection that keeps the tsquery of each scoring statement it runs."""

    def __init__(self, db: psycopg.Connection[Any]) -> None:
        self.db, self.queries, self.levels, self.statements = db, [], [], []

    @property
    def info(self) -> Any:
        return self.db.info

    @property
    def isolation_level(self) -> Any:
        return self.db.isolation_level

    @isolation_level.setter
    def isolation_level(self, level: Any) -> None:
        self.db.isolation_level = level

    def transaction(self) -> Any:
        return self.db.transaction()

    def execute(self, sql: str, params: Any = None, **options: Any) -> Any:
        if isinstance(params, dict) and "query" in params:
            self.queries.append(params["query"])
            self.statements.append(sql)
            self.levels.append(self.db.execute("SHOW transaction_isolation").fetchone()[0])
        return self.db.execute(sql, params, **options)


def _ordered(scores: dict[int, float]) -> list[tuple[int, float]]:
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


QUERIES = [
    f"{COMMON} {RARE}",
    f"{RARE} {COMMON} {MIDDLING}",
    f"{COMMON} {MIDDLING}",
    COMMON,
    RARE,
    f"{MIDDLING} w1 w2",
    f"{COMMON} nosuchword",
    "nosuchword",
]


@pytest.mark.parametrize("limit", [1, 10, 30])
@pytest.mark.parametrize("agents", [None, "main", ["main", "helper"]])
def test_the_early_stop_returns_the_top_of_scoring_every_match(filled, limit, agents):
    db = filled._reader()
    for text in QUERIES:
        scope, params = _params(text, agents)
        early = _ordered(top_k(db, limit, scope, params, few=0))
        full = _ordered(top_k(db, limit, scope, params, early=False))
        assert early == full, text
        # ...and the single statement that scored every match before (summed in another
        # order, so equal to rounding).
        old = db.execute(
            _bm25_sql(SearchFilters(), PG_DIALECT, scope),
            {**params, "query": _tsquery(text.split()), "limit": limit},
        ).fetchall()
        assert [seq for seq, _ in early] == [seq for seq, _ in old], text
        for (_, ours), (_, theirs) in zip(early, old, strict=True):
            assert ours == pytest.approx(theirs, rel=1e-12)


def test_a_query_with_one_uncommon_word_scores_only_that_words_matches(filled):
    db = Recording(filled._reader())
    scope, params = _params(f"{COMMON} {RARE}")
    top = top_k(db, 10, scope, params, few=0)
    assert db.queries == [f"'{RARE}'"]  # the common word's 1,200 matches were never read
    assert len(top) == 10
    # Every event holds the common word: the full scoring reads them all for the same top.
    assert _ordered(top) == _ordered(top_k(filled._reader(), 10, scope, params, early=False))


def test_the_rarer_words_join_the_first_statement_until_their_matches_reach_the_top(filled):
    db = Recording(filled._reader())
    scope, params = _params(f"{COMMON} {RARE} {MIDDLING}")
    # About 120 events hold the rare word (in content or as a name): fewer than the 200
    # asked, so the middling word's matches are scored with them; their 200th best is then
    # out of the common word's reach (it is in every event: its idf is the floor).
    top = top_k(db, 200, scope, params, few=0)
    assert db.queries == [f"'{RARE}' | '{MIDDLING}'"]
    assert _ordered(top) == _ordered(top_k(filled._reader(), 200, scope, params, early=False))
    # One snapshot, and the connection left as it was found.
    assert db.levels == ["repeatable read"]
    assert db.db.isolation_level is None
    assert db.db.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_when_the_first_words_matches_overlap_the_next_word_is_added(filled):
    db = Recording(filled._reader())
    # The rare word (about 120 events) always comes with the middling one where it is in
    # the content (i % 40 == 0 is i % 5 == 0): their document frequencies add up to more than
    # the events holding either. Asked for a top between that union and that sum, their
    # matches fall short, and the common word's matches without them are scored next (in
    # the same snapshot, for the same top).
    scope, params = _params(f"{RARE} {MIDDLING} {COMMON}")
    union = (
        filled._reader()
        .execute(
            "SELECT count(*) FROM events_fts WHERE tsv @@ %s::tsquery", (f"{RARE} | {MIDDLING}",)
        )
        .fetchone()[0]
    )
    stats = dict(
        filled._reader()
        .execute(
            "SELECT lexeme, sum(docs) FROM fts_agent_terms WHERE lexeme = ANY(%s) GROUP BY 1",
            ([RARE, MIDDLING],),
        )
        .fetchall()
    )
    assert union < stats[RARE] + stats[MIDDLING]
    first = f"'{RARE}' | '{MIDDLING}'"
    for limit in (100, union - 1, union + 1, stats[RARE] + stats[MIDDLING] + 1, 1199):
        db.queries.clear()
        early = top_k(db, limit, scope, params, few=0)
        assert _ordered(early) == _ordered(
            top_k(filled._reader(), limit, scope, params, early=False)
        ), limit
        if limit == union + 1:
            assert db.queries == [first, f"'{COMMON}' & !({first})"]
            assert len(early) == limit


def test_few_matches_are_scored_in_one_statement(filled):
    db = Recording(filled._reader())
    scope, params = _params(f"{RARE} {MIDDLING}")  # about 120 + 350 matches
    few = top_k(db, 10, scope, params, few=1000)
    assert db.queries == [f"'{RARE}' | '{MIDDLING}'"]  # rarest first
    assert _ordered(few) == _ordered(top_k(db, 10, scope, params, few=0))
    assert len(db.queries) > 1  # the early stop, for the same top


def test_filters_and_weights_give_the_same_top_as_scoring_every_match(filled):
    db = filled._reader()
    filtered = {
        "session": SearchFilters(session_id="s3"),
        "kind": SearchFilters(kind=["model_turn", "tool_result"]),
        "agent": SearchFilters(agent_id="helper"),
    }
    for weights in [(1.0, 5.0, 2.0), (1.0, 0.0, 0.0), (2.0, 1.0, 9.0)]:
        for filters in filtered.values():
            where, named = named_filters(filters)
            for text in QUERIES[:4]:
                scope, params = _params(text, filters.agent_id, weights)
                params.update(named)
                early = top_k(db, 10, scope, params, where, few=0)
                full = top_k(db, 10, scope, params, where, early=False)
                assert _ordered(early) == _ordered(full), (weights, filters, text)


def test_a_search_naming_only_its_agents_looks_each_match_up_and_finds_the_same(filled):
    """Every ``ms.search`` names its agent and nothing else: its matches are kept by their
    own event's agent, looked up by seq, not by a join the planner answered by reading every
    event. The same top as the joined filter, for each agent of this two-agent log."""
    from scroll_core.store.pg_search import _OWN_AGENT, _pg_candidates

    db = filled._reader()
    tuning = SearchTuning()
    for agents in ("main", "helper", ["main", "helper"], ["nobody"]):
        joined = SearchFilters(agent_id=agents)
        where, named = named_filters(joined)
        for text in QUERIES:
            recorded = Recording(db)
            found = _pg_candidates(recorded, text.split(), 30, joined, tuning)
            assert all(_OWN_AGENT in sql and " JOIN " not in sql for sql in recorded.statements)
            scope, params = _params(text, agents)
            reference = top_k(db, 30, scope, {**params, **named}, where, early=False)
            assert _ordered(found) == _ordered(reference), (agents, text)
            if agents == ["nobody"]:
                assert found == {}
    # The statement reads events only by primary key, one match at a time.
    scope, params = _params(COMMON, "helper")
    plan = db.execute(
        "EXPLAIN " + score_sql(_OWN_AGENT, 1),
        {
            **params,
            "query": f"'{COMMON}'",
            "lexemes": [COMMON],
            "idfs": [1.0],
            "avgdl": 20.0,
            "limit": 10,
            "labelled": f"'{COMMON}':AC",
        },
    ).fetchall()
    steps = " ".join(row[0] for row in plan)
    assert "Index Scan using events_pkey on events a" in steps, steps
    assert "Seq Scan on events" not in steps and "Hash Join" not in steps, steps
    # A filter on anything else keeps the join (the planner may drive from that filter).
    assert " JOIN events e " in score_sql(PG_DIALECT.sql(SearchFilters(session_id="s").sql))
    assert " JOIN events e " not in score_sql(_OWN_AGENT)


def test_search_through_the_log_is_unchanged_by_the_early_stop(filled, monkeypatch):
    from scroll_core.store import pg_topk

    early = [[h.seq for h in filled.search(q, k=10, agent_id="main")] for q in QUERIES]
    real = pg_topk.top_k
    monkeypatch.setattr(
        "scroll_core.store.pg_search.top_k", lambda *a, **kw: real(*a, **kw, early=False)
    )
    full = [[h.seq for h in filled.search(q, k=10, agent_id="main")] for q in QUERIES]
    assert early == full
    assert any(early)


def test_searches_beside_a_concurrent_writer_agree_with_scoring_every_match(filled):
    """A writer appends events holding the rare word while searches run: each search sees
    one snapshot (its statistics and every part of its matches), never fails, and once the
    writer is done the early stop and the full scoring agree."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            with PgEventLog(filled.url, token_counter=CharRatioCounter()) as writer:
                i = 0
                while not stop.is_set():
                    writer.append_many(
                        [
                            {"session_id": "w", "kind": "context_msg", "content": text}
                            for text in (f"{RARE} {COMMON} w{i}", f"{COMMON} w{i} w{i + 1}")
                        ]
                    )
                    i += 1
        except BaseException as exc:  # reported by the test below
            errors.append(exc)

    thread = threading.Thread(target=write)
    thread.start()
    try:
        db = filled._reader()
        before = filled.last_seq()
        for _ in range(40):
            scope, params = _params(f"{COMMON} {RARE}")
            with db.transaction():
                db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                early = top_k(db, 10, scope, params, few=0)
                full = top_k(db, 10, scope, params, early=False)
            assert _ordered(early) == _ordered(full)
            assert len(filled.search(f"{COMMON} {RARE}", k=10)) == 10
        assert filled.last_seq() > before, "the writer appended nothing meanwhile"
    finally:
        stop.set()
        thread.join()
    assert not errors
    scope, params = _params(f"{COMMON} {RARE}")
    db = filled._reader()
    assert _ordered(top_k(db, 30, scope, params, few=0)) == _ordered(
        top_k(db, 30, scope, params, early=False)
    )


def test_search_works_through_a_database_restart(stoppable_pg):  # noqa: F811
    name = f"topk_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(stoppable_pg.url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = stoppable_pg.url.rsplit("/", 1)[0] + f"/{name}"
    try:
        with PgEventLog(url, token_counter=CharRatioCounter()) as log:
            log.append_many(_rows(300))
            before = [h.seq for h in log.search(f"{COMMON} {RARE}", k=5)]
            stoppable_pg.control.stop()
            stoppable_pg.control.start()
            assert [h.seq for h in log.search(f"{COMMON} {RARE}", k=5)] == before
    finally:
        stoppable_pg.control.start()
        with psycopg.connect(stoppable_pg.url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
