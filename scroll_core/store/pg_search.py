"""Search on the PostgreSQL Event Log: BM25 in SQL over a tsvector index (``sqlite_search``
is SQLite's).

Search ranks with BM25 computed in SQL, not ``ts_rank``: the append trigger keeps per-lexeme
document frequencies (``fts_terms``), the document count and total length (``fts_totals``)
and each event's length (``events_fts.doclen``); term frequencies come from the tsvector's
positions, weighted by column through their labels. The formula is FTS5's (k1 = 1.2,
b = 0.75, idf = ln((N - n + 0.5) / (n + 0.5)) floored at 1e-6, column weights multiplying
each occurrence), so the neighbour signal and the tuning carry over unchanged. Where the
two backends differ: PostgreSQL stems with snowball English (FTS5 with the original Porter
algorithm), its parser keeps diacritics (FTS5's unicode61 strips them) and indexes a
hyphenated word both whole and in parts, and a tsvector keeps at most 256 positions of a
lexeme (positions above 16383 collapse), which caps tf in very long contents.

``PG_DIALECT`` is the ``SearchDialect`` that ``search.run_search`` is given on PostgreSQL.
"""

from __future__ import annotations

from typing import Any

from .fts_query import SNIPPET_CHARS
from .pg_schema import TS_CONFIG
from .search import HIT_COLUMNS, Hit, SearchDialect, SearchFilters, SearchTuning

__all__ = ["PG_DIALECT"]

# BM25 constants, as FTS5 uses them.
_K1 = 1.2
_B = 0.75


def _bm25_sql(filters: SearchFilters, dialect: SearchDialect) -> str:
    """The best ``limit`` matches by BM25, each as (seq, score).

    The GIN index answers the tsquery of the query's lexemes (``matches``); for each match
    the query lexemes' positions are read from its tsvector, each position counted with its
    column's weight (labels A, C, D), and BM25 is summed over the lexemes, with idf from
    ``fts_terms`` and the average length from ``fts_totals``. The tsvector is cut down to
    the query's lexemes before it is unnested (deleting every other lexeme, in C): unnesting
    all of a match's lexemes into rows only to keep one or two cost 40% more per search.
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
        ), idf AS MATERIALIZED (
            SELECT l.lexeme, greatest(ln(
                ((tot.docs - coalesce(t.docs, 0))::float8 + 0.5)
                / (coalesce(t.docs, 0)::float8 + 0.5)
            ), 1e-6::float8) AS idf
            FROM lex, unnest(lex.lexemes) AS l(lexeme) CROSS JOIN fts_totals AS tot
            LEFT JOIN fts_terms AS t ON t.lexeme = l.lexeme
        ), matches AS MATERIALIZED (
            SELECT f.seq, f.tsv, f.doclen FROM events_fts f{join}
            WHERE f.tsv @@ to_tsquery('{TS_CONFIG}', %(query)s){where}
        )
        SELECT m.seq, sum(
            idf.idf * (tf.tf * {_K1 + 1}::float8) /
            (tf.tf + {_K1}::float8 * ({1 - _B}::float8 + {_B}::float8 * m.doclen / (
                SELECT greatest(tokens::float8 / greatest(docs, 1), 1.0::float8) FROM fts_totals
            )))
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
    """A tsquery text ORing ``lexemes``, each quoted so it is only ever a word."""
    quoted = ("'" + lex.replace("\\", "\\\\").replace("'", "''") + "'" for lex in lexemes)
    return " | ".join(quoted)


def _pg_candidates(
    db: Any, terms: list[str], limit: int, filters: SearchFilters, tuning: SearchTuning
) -> dict[int, float]:
    content, headline, name = (float(w) for w in tuning.rank_weights)
    params: dict[str, Any] = {
        # The terms are letters and digits only (fts_query), each quoted: the tsquery is
        # stemmed by the index's own configuration and cannot hold an operator.
        "text": " ".join(terms),
        "query": _tsquery(terms),
        "wa": headline,
        "wc": name,
        "wd": content,
        "limit": limit,
    }
    sql = _bm25_sql(filters, PG_DIALECT)
    # Filter values are positional in SearchFilters; name them for this statement.
    for i, value in enumerate(filters.params):
        params[f"f{i}"] = value
        sql = sql.replace("%s", f"%(f{i})s", 1)
    return {int(seq): float(score) for seq, score in db.execute(sql, params).fetchall()}


def _pg_list_range(db: Any, k: int, filters: SearchFilters) -> list[Hit]:
    sql = (
        f"SELECT {HIT_COLUMNS}, 0.0::float8, substr(e.content, 1, {SNIPPET_CHARS}), e.headline "
        f"FROM events e WHERE e.searchable = 1{PG_DIALECT.sql(filters.sql)} ORDER BY e.seq LIMIT %s"
    )
    return [Hit(*row) for row in db.execute(sql, (*filters.params, k)).fetchall()]


def _pg_doc_count(db: Any) -> int:
    """Documents in the full-text index (the count BM25's idf uses)."""
    row = db.execute("SELECT docs FROM fts_totals WHERE id = 1").fetchone()
    return int(row[0]) if row else 0


def _pg_doc_freq(db: Any, terms: list[str]) -> list[int]:
    """Documents holding each term: its lexeme under the index's configuration, looked up in
    ``fts_terms`` (0 for a term that stems to no lexeme or that no document holds)."""
    rows = db.execute(
        f"""
        SELECT t.i, coalesce(max(f.docs), 0) FROM unnest(%s::text[]) WITH ORDINALITY AS t(term, i)
        LEFT JOIN LATERAL unnest(to_tsvector('{TS_CONFIG}', t.term)) AS u ON true
        LEFT JOIN fts_terms AS f ON f.lexeme = u.lexeme
        GROUP BY t.i ORDER BY t.i
        """,
        (list(terms),),
    ).fetchall()
    return [int(docs) for _, docs in rows]


PG_DIALECT = SearchDialect(
    "%s",
    _pg_candidates,
    _pg_list_range,
    arrays=True,
    doc_count=_pg_doc_count,
    doc_freq=_pg_doc_freq,
)
