"""Search on the PostgreSQL Event Log: BM25 in SQL over a tsvector index (``sqlite_search``
is SQLite's).

Search ranks with BM25 computed in SQL, not ``ts_rank``: the append trigger keeps, per agent,
per-lexeme document frequencies (``fts_agent_terms``) and the document count and total length
(``fts_agent_totals``), and each event's length (``events_fts.doclen``); term frequencies
come from the tsvector's positions, weighted by column through their labels. The statistics
are summed over the agents a search names (over every agent when it names none), so an
agent's scores never move with another agent's events. The formula is FTS5's (k1 = 1.2,
b = 0.75, idf = ln((N - n + 0.5) / (n + 0.5)) floored at 1e-6, column weights multiplying
each occurrence), so the neighbour signal and the tuning carry over unchanged. Where the
two backends differ: PostgreSQL stems with snowball English (FTS5 with the original Porter
algorithm), its parser keeps diacritics (FTS5's unicode61 strips them) and indexes a
hyphenated word both whole and in parts, and a tsvector keeps at most 256 positions of a
lexeme (positions above 16383 collapse), which caps tf in very long contents.

The top is found by ``pg_topk`` (MaxScore: the rarest lexemes' matches first, stopping once
no document holding only commoner ones can reach the top), with the same result as scoring
every match; ``_bm25_sql`` is that single statement scoring every match, kept as the
reference the bench and the tests measure against.

``PG_DIALECT`` is the ``SearchDialect`` that ``search.run_search`` is given on PostgreSQL.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .fts_query import SNIPPET_CHARS
from .pg_schema import TS_CONFIG
from .pg_topk import K1, B, top_k
from .search import HIT_COLUMNS, Hit, SearchDialect, SearchFilters, SearchTuning

__all__ = ["PG_DIALECT"]

# BM25 constants, as FTS5 uses them (``pg_topk`` holds them).
_K1, _B = K1, B
# The agents whose statistics a search sums: those named (``%(agents)s``), or every agent.
_NAMED = "%(agents)s::text[]"
_EVERY = "ARRAY(SELECT agent_id FROM fts_agent_totals)"


def _scope(agents: Any) -> tuple[str, dict[str, Any]]:
    """The SQL array of the agents searched, and its parameter."""
    if agents is None:
        return _EVERY, {}
    names = [agents] if isinstance(agents, str) else list(agents)
    return _NAMED, {"agents": names}


def _bm25_sql(filters: SearchFilters, dialect: SearchDialect, scope: str = _EVERY) -> str:
    """The best ``limit`` matches by BM25, each as (seq, score), every match scored (the
    reference for ``pg_topk``, which search uses).

    The GIN index answers the tsquery of the query's lexemes (``matches``); for each match
    the query lexemes' positions are read from its tsvector, each position counted with its
    column's weight (labels A, C, D), and BM25 is summed over the lexemes (in lexeme order,
    so the sum is the same whatever plan the server picks), with idf and the average length
    from the searched agents' ``fts_agent_terms`` and ``fts_agent_totals`` (``scope``). The
    tsvector is cut down to the query's lexemes before it is unnested (deleting every other
    lexeme, in C): unnesting all of a match's lexemes into rows only to keep one or two cost
    40% more per search.
    """
    join = " JOIN events e ON e.seq = f.seq" if filters.sql else ""
    where = dialect.sql(filters.sql)
    tf = (
        "(%(wa)s::float8 * cardinality(array_positions(u.weights, 'A'))"
        " + %(wc)s::float8 * cardinality(array_positions(u.weights, 'C'))"
        " + %(wd)s::float8 * cardinality(array_positions(u.weights, 'D')))"
    )
    return f"""
        WITH lex AS MATERIALIZED (
            SELECT coalesce(array_agg(DISTINCT u.lexeme), '{{}}') AS lexemes
            FROM unnest(to_tsvector('{TS_CONFIG}', %(text)s)) AS u
        ), scope AS MATERIALIZED (
            SELECT {scope} AS agents
        ), tot AS MATERIALIZED (
            SELECT coalesce(sum(a.docs), 0) AS docs, coalesce(sum(a.tokens), 0) AS tokens
            FROM fts_agent_totals AS a, scope WHERE a.agent_id = ANY(scope.agents)
        ), idf AS MATERIALIZED (
            SELECT l.lexeme, greatest(ln(
                ((tot.docs - coalesce(t.docs, 0))::float8 + 0.5)
                / (coalesce(t.docs, 0)::float8 + 0.5)
            ), 1e-6::float8) AS idf
            FROM lex, unnest(lex.lexemes) AS l(lexeme) CROSS JOIN tot CROSS JOIN scope
            LEFT JOIN LATERAL (
                SELECT sum(f.docs) AS docs FROM fts_agent_terms AS f
                WHERE f.agent_id = ANY(scope.agents) AND f.lexeme = l.lexeme
            ) AS t ON true
        ), matches AS MATERIALIZED (
            SELECT f.seq, f.tsv, f.doclen FROM events_fts f{join}
            WHERE f.tsv @@ to_tsquery('{TS_CONFIG}', %(query)s){where}
        )
        SELECT m.seq, sum(
            idf.idf * (tf.tf * {_K1 + 1}::float8) /
            (tf.tf + {_K1}::float8 * ({1 - _B}::float8 + {_B}::float8 * m.doclen / (
                SELECT greatest(tokens::float8 / greatest(docs, 1), 1.0::float8) FROM tot
            )))
            ORDER BY tf.lexeme
        ) AS score
        FROM matches m, lex,
        LATERAL (
            SELECT u.lexeme, {tf}::float8 AS tf
            FROM unnest(ts_delete(m.tsv, tsvector_to_array(ts_delete(m.tsv, lex.lexemes)))) AS u
        ) AS tf
        JOIN idf ON idf.lexeme = tf.lexeme
        GROUP BY m.seq ORDER BY score DESC, m.seq LIMIT %(limit)s
    """


def _tsquery(lexemes: list[str]) -> str:
    """A tsquery text ORing ``lexemes``, each quoted so it is only ever a word (``_bm25_sql``'s
    ``query``)."""
    quoted = ("'" + lex.replace("\\", "\\\\").replace("'", "''") + "'" for lex in lexemes)
    return " | ".join(quoted)


def _pg_candidates(
    db: Any,
    terms: list[str],
    limit: int,
    filters: SearchFilters,
    tuning: SearchTuning,
) -> dict[int, float]:
    content, headline, name = (float(w) for w in tuning.rank_weights)
    params: dict[str, Any] = {
        # The terms are letters and digits only (fts_query), each quoted: the tsquery is
        # stemmed by the index's own configuration and cannot hold an operator.
        "text": " ".join(terms),
        "wa": headline,
        "wc": name,
        "wd": content,
        "limit": limit,
    }
    scope, scope_params = _scope(filters.agent_id)
    params.update(scope_params)
    if filters.agent_id is not None and not replace(filters, agent_id=None).sql:
        # Only the agents: each match's own agent, looked up by its seq.
        return top_k(db, limit, scope, params, _OWN_AGENT, scoped=True)
    where, named = named_filters(filters)
    params.update(named)
    # With agents named, the filter keeps only their events (``SearchFilters.sql``).
    return top_k(db, limit, scope, params, where, scoped=filters.agent_id is not None)


def named_filters(filters: SearchFilters) -> tuple[str, dict[str, Any]]:
    """``filters``' SQL for ``pg_topk``'s statements, its positional values named ``f0``,
    ``f1``... (those statements take named parameters), and those values by name."""
    where = PG_DIALECT.sql(filters.sql)
    named: dict[str, Any] = {}
    for i, value in enumerate(filters.params):
        named[f"f{i}"] = value
        where = where.replace("%s", f"%(f{i})s", 1)
    return where, named


# A search that names its agents and nothing else (every ``ms.search``) keeps a match when
# the event of its seq is one of theirs: a lookup by primary key per match, after the cheaper
# conditions. As a join (``SearchFilters.sql``'s ``e.agent_id``) the planner read every
# event for a hash join, whatever the matches: at 20,000 events 4-6 ms for a word in 300
# events (``bench/eventlog.py``'s ``search_agent_*``: mean 5.13 -> 4.21 ms, p99 17.1 -> 10.5;
# at 200,000 mean 17.1 -> 14.5, p99 112 -> 60; the same hits; docs/figures-performance.md).
# Its alias is ``a``, not ``e``: ``pg_topk.score_sql`` joins ``events e`` for a filter that
# names ``e.`` columns.
_OWN_AGENT = " AND (SELECT a.agent_id FROM events a WHERE a.seq = f.seq) = ANY(%(agents)s::text[])"


def _pg_list_range(db: Any, k: int, filters: SearchFilters) -> list[Hit]:
    sql = (
        f"SELECT {HIT_COLUMNS}, 0.0::float8, substr(e.content, 1, {SNIPPET_CHARS}), e.headline "
        f"FROM events e WHERE e.searchable = 1{PG_DIALECT.sql(filters.sql)} ORDER BY e.seq LIMIT %s"
    )
    return [Hit(*row) for row in db.execute(sql, (*filters.params, k)).fetchall()]


def _pg_doc_count(db: Any, agents: Any) -> int:
    """Documents of ``agents`` (of every agent for None) in the full-text index (the count
    BM25's idf uses)."""
    scope, params = _scope(agents)
    row = db.execute(
        f"SELECT coalesce(sum(docs), 0) FROM fts_agent_totals WHERE agent_id = ANY({scope})",
        params,
    ).fetchone()
    return int(row[0]) if row else 0


def _pg_doc_freq(db: Any, terms: list[str], agents: Any) -> list[int]:
    """Documents of ``agents`` (of every agent for None) holding each term: its lexeme under
    the index's configuration, looked up in ``fts_agent_terms`` (0 for a term that stems to
    no lexeme or that no such document holds)."""
    scope, params = _scope(agents)
    rows = db.execute(
        f"""
        SELECT t.i, coalesce(max(f.docs), 0)
        FROM unnest(%(terms)s::text[]) WITH ORDINALITY AS t(term, i)
        LEFT JOIN LATERAL unnest(to_tsvector('{TS_CONFIG}', t.term)) AS u ON true
        LEFT JOIN LATERAL (
            SELECT sum(a.docs) AS docs FROM fts_agent_terms AS a
            WHERE a.agent_id = ANY({scope}) AND a.lexeme = u.lexeme
        ) AS f ON true
        GROUP BY t.i ORDER BY t.i
        """,
        {"terms": list(terms), **params},
    ).fetchall()
    return [int(docs) for _, docs in rows]


PG_DIALECT = SearchDialect(
    "%s",
    _pg_candidates,
    _pg_list_range,
    arrays=True,
    lean_pool=False,
    doc_count=_pg_doc_count,
    doc_freq=_pg_doc_freq,
)
