"""``pg_topk``'s top against scoring every match on a seeded log shaped like the bench's:
words drawn with Zipf weights (a few in most events, most in few), some in headlines and
names (the weighted columns, scored through the path that keeps labels), and queries of
only common words, of only rare ones and of both. On a real server."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from scroll_core.store import SearchFilters, SearchTuning, pg_topk
from scroll_core.store.pg_log import PgEventLog
from scroll_core.store.pg_search import PG_DIALECT, _bm25_sql, _scope, _tsquery
from scroll_core.store.pg_topk import top_k
from scroll_core.tokens import CharRatioCounter
from tests.conftest import fresh_pg_database

# Letters only, so the English stemmer leaves every word as it is (the queries name lexemes).
VOCAB = [f"w{a}{b}x" for a, b in itertools.product("bcdfghjklm", "bcdfghjklmnpqrstvz")]


def _rows(n: int, seed: int = 11) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    weights = list(itertools.accumulate(1.0 / (i + 1) for i in range(len(VOCAB))))
    rows = []
    for i in range(n):
        row: dict[str, Any] = {
            "session_id": f"s{i % 5}",
            "agent_id": ("main", "helper")[i % 2],
            "kind": ("context_msg", "model_turn", "tool_result")[i % 3],
            "content": " ".join(rng.choices(VOCAB, cum_weights=weights, k=rng.randint(3, 50))),
        }
        if i % 9 == 0:
            row["headline"] = " ".join(rng.choices(VOCAB, cum_weights=weights, k=3))
        if i % 14 == 0:
            row["name"] = rng.choice(VOCAB[:20])
        rows.append(row)
    return rows


@pytest.fixture(scope="module")
def zipf_log(postgres_server, pg_template):
    with (
        fresh_pg_database(postgres_server.url, pg_template) as url,
        PgEventLog(url, token_counter=CharRatioCounter()) as log,
    ):
        log.append_many(_rows(1500))
        yield log


def _queries(db: Any) -> dict[str, list[str]]:
    by_docs = [
        row[0]
        for row in db.execute(
            "SELECT lexeme FROM fts_agent_terms GROUP BY lexeme ORDER BY sum(docs) DESC, lexeme"
        ).fetchall()
    ]
    common, rare = by_docs[:12], by_docs[-40:]
    return {
        "one common": [common[0], common[3], common[8]],
        "all common": [
            f"{common[0]} {common[1]}",
            f"{common[2]} {common[5]} {common[7]}",
            " ".join(common[:6]),
        ],
        "rare and common": [f"{rare[0]} {common[1]}", f"{rare[5]} {rare[9]} {common[0]}"],
        "all rare": [f"{rare[1]} {rare[2]}", rare[3]],
        "middling": [f"{by_docs[30]} {by_docs[45]}", f"{by_docs[25]} {by_docs[60]} {common[4]}"],
    }


@pytest.mark.parametrize("limit", [1, 10, 30, 200])
@pytest.mark.parametrize("agents", [None, "helper"])
@pytest.mark.parametrize("weights", [None, (1.0, 4.0, 0.5), (2.0, 0.0, 7.0)])
def test_every_kind_of_query_gets_the_top_of_scoring_every_match(zipf_log, limit, agents, weights):
    db = zipf_log._reader()
    content, headline, name = weights or SearchTuning().rank_weights
    filters = SearchFilters(agent_id=agents)
    scope, scope_params = _scope(agents)
    # Named as search names them (the bounds kept per agent then hold: ``scoped``).
    where = PG_DIALECT.sql(filters.sql)
    reference = _bm25_sql(filters, PG_DIALECT, scope)
    for i, value in enumerate(filters.params):
        scope_params[f"f{i}"] = value
        where = where.replace("%s", f"%(f{i})s", 1)
        reference = reference.replace("%s", f"%(f{i})s", 1)
    kinds = _queries(db)
    assert len(kinds["one common"]) == 3
    for kind, texts in kinds.items():
        for text in texts:
            params = {"text": text, "wa": headline, "wc": name, "wd": content, **scope_params}
            early = _ordered(top_k(db, limit, scope, params, where, few=0, scoped=True))
            full = _ordered(top_k(db, limit, scope, params, where, early=False))
            assert early == full, (kind, text)
            # The statement that scored every match before, with its own way of counting a
            # match's positions (every other lexeme deleted, labels kept): the same top,
            # the same scores to rounding.
            old = db.execute(
                reference, {**params, "query": _tsquery(text.split()), "limit": limit}
            ).fetchall()
            assert [seq for seq, _ in early] == [seq for seq, _ in old], (kind, text)
            for (_, ours), (_, theirs) in zip(early, old, strict=True):
                assert ours == pytest.approx(theirs, rel=1e-12), (kind, text)
            assert len(early) == min(limit, len(old))


@pytest.mark.parametrize("weights", [None, (1.0, 4.0, 0.5), (0.7, 0.0, 1.3), (1.0, -1.0, 0.5)])
def test_positions_counted_by_ts_rank_give_every_match_the_same_score_to_the_bit(zipf_log, weights):
    """The statement that reads a match's tf off ts_rank (used past ``few`` matches) against
    the one that relabels and unnests the tsvector: every match, the same seqs in the same
    order and the same floats, on matches holding a query word at more positions than
    ts_rank's values are listed for, in a headline or a name, and not at all."""
    db = zipf_log._reader()
    content, headline, name = weights or SearchTuning().rank_weights
    kinds = _queries(db)
    common = kinds["one common"][0]
    # What the comparison must cover: a match past the listed positions, and labelled ones.
    most = db.execute(
        "SELECT max(cardinality(u.positions)) FROM events_fts f, unnest(f.tsv) AS u "
        "WHERE u.lexeme = %s",
        (common,),
    ).fetchone()
    assert most is not None and most[0] > pg_topk._COUNTED_UP_TO
    labelled = db.execute(
        "SELECT count(*) FROM events_fts WHERE tsv @@ %s::tsquery", (f"{common}:AC",)
    ).fetchone()
    assert labelled is not None and labelled[0] > 0
    scope, scope_params = _scope(None)
    for texts in kinds.values():
        for text in texts:
            params = {"text": text, "wa": headline, "wc": name, "wd": content, **scope_params}
            relabelled = top_k(db, 10_000, scope, params, early=False, few=10**9)
            counted = top_k(db, 10_000, scope, params, early=False, few=0)
            assert _ordered(counted) == _ordered(relabelled), text
            assert len(relabelled) > 0


def test_a_server_whose_ts_rank_does_not_tell_positions_apart_is_refused():
    """``_counted`` reads ts_rank's values off the server once per connection; if two of
    them were equal a tf could not be read off them, and it says so rather than rank."""

    class Connection:
        def execute(self, sql: str) -> Connection:
            return self

        def fetchall(self) -> list[tuple[int, float]]:
            return [(n, 0.5) for n in range(1, pg_topk._COUNTED_UP_TO + 1)]

    with pytest.raises(RuntimeError, match="does not tell positions apart"):
        pg_topk._counted(Connection())


def _ordered(scores: dict[int, float]) -> list[tuple[int, float]]:
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def test_a_log_from_before_the_bounds_is_filled_in_and_kept(postgres_server):
    """A log made before ``m005_fts_term_bounds`` migrates: every (agent, lexeme) gets the
    bounds its documents give (``fts_check`` agrees), appends keep them, the early stop
    keeps the top, and a wrong bound is reported."""
    import psycopg

    from scroll_core.store import pg_schema
    from scroll_core.store.pg_log import SearchIndexCorrupt

    rows = _rows(400, seed=5)
    with fresh_pg_database(postgres_server.url, "template1") as url:
        saved = pg_schema.MIGRATIONS[:]
        try:
            pg_schema.MIGRATIONS[:] = saved[:4]
            with PgEventLog(url, token_counter=CharRatioCounter()) as old:
                old.append_many(rows[:300])
        finally:
            pg_schema.MIGRATIONS[:] = saved
        with PgEventLog(url, token_counter=CharRatioCounter()) as log:
            assert log.fts_check() == 300
            log.append_many(rows[300:])
            assert log.fts_check() == 400
            db = log._reader()
            held = db.execute(
                "SELECT max(max_tf), min(min_doclen), bool_or(labelled), bool_and(labelled) "
                "FROM fts_agent_terms"
            ).fetchone()
            assert held[0] > 1 and held[1] >= 3 and held[2] and not held[3]
            scope, params = _scope(None)
            common = " ".join(VOCAB[:3])
            params.update(text=common, wa=2.0, wc=0.5, wd=1.0)
            assert _ordered(top_k(db, 10, scope, params, few=0)) == _ordered(
                top_k(db, 10, scope, params, early=False)
            )
            with psycopg.connect(url, autocommit=True) as admin:
                admin.execute("ALTER TABLE fts_agent_terms DISABLE TRIGGER fts_agent_terms_guard")
                admin.execute(
                    "UPDATE fts_agent_terms SET max_tf = 1 WHERE max_tf > 1 AND lexeme = %s",
                    (VOCAB[0],),
                )
                admin.execute("ALTER TABLE fts_agent_terms ENABLE TRIGGER fts_agent_terms_guard")
            with pytest.raises(SearchIndexCorrupt, match="document frequency or bound"):
                log.fts_check()
