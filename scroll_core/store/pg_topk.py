"""Top-k BM25 on PostgreSQL that does not score every match: MaxScore over the query's
lexemes (``pg_search`` ranks with it).

Scoring every document that holds any query word costs what the commonest word costs: at a
million events a word in one event of six has 150,000 matches, each read and scored, for a
top 30. MaxScore (Turtle and Flood, 1995) bounds each lexeme's share of a score: BM25 gives
lexeme ``t`` at most ``idf(t) * (k1 + 1)`` whatever its frequency and the document's
length, and at most what ``max_tf`` positions give in a document of ``min_doclen`` (the
most one document holds of it and the shortest holding it, kept per agent by the append
trigger, ``m005_fts_term_bounds``), often half as much. The documents holding the rarest
lexemes are scored first, in full (every query lexeme): as many of the rarest as it takes
for their document frequencies to reach ``limit``, and more while their matches stay few
(``FEW`` in all), since the rarer a lexeme the higher its bound and the likelier its
matches are to be scored anyway. Their ``limit``-th best score is a threshold (at 20,000
events the slowest queries were those whose rarest word was in fewer events than the 30
candidates search asks for: with no threshold, every match of their common words was
scored). A document without those lexemes scores at most the sum of the bounds of the
others it holds, so only one holding a set of them whose bounds reach the threshold can
enter the top: one more statement scores those (a tsquery OR-ing the smallest such sets,
each an AND, and ``& !(first lexemes)``, and only the matches whose bound at their own
length reaches it: ``_cut``, arithmetic on ``doclen`` before a match's tsvector is read for
its tf), and the top lists of the two disjoint parts merge into the top of their union
(when the first lexemes' matches overlap and fall short of ``limit``, the next lexeme's are
scored first, the same way). A common word's idf is small (floored at 1e-6 once it is in
half the documents), so a query with one uncommon word reads that word's matches and stops.
A handful of statements at most, not one per match: each costs about a millisecond of its
own. A query with few matches in all (``FEW``) is scored in one statement.

The result is the same as scoring every match: the same statistics (read once, by the first
statement, and passed to the others as parameters, so every part is scored alike even while
a writer appends), the same expression summed in the tsvector's lexeme order, the same order
(score, then seq), and the stop is strict (a document outside the scored sets is below the
threshold, not equal to it). The statements run in one REPEATABLE READ snapshot when the
connection is not already in a transaction, so a concurrent append is in every part or in
none. A query whose every lexeme is common still scores all its matches: that is the cost
that stays, made smaller where a statement scores many matches by reading each tf off
ts_rank in C instead of cutting and unnesting each tsvector (``score_sql``'s ``counted``;
figures in docs/figures-performance.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import combinations
from typing import Any
from weakref import WeakKeyDictionary

from psycopg import IsolationLevel
from psycopg.pq import TransactionStatus

from .pg_schema import TS_CONFIG

__all__ = ["FEW", "K1", "STATS_SQL", "B", "score_sql", "top_k"]

# BM25 constants, as FTS5 uses them.
K1 = 1.2
B = 0.75
# Matches in all (the sum of the query lexemes' document frequencies) up to which one
# statement scores them all: a statement costs about what scoring a few hundred matches does.
# Also how many matches of the rarest lexemes the first statement of the early stop takes
# beyond the ``limit`` it needs (their bounds are the highest: they would be scored anyway).
# Chosen by ``bench/pg_topk_few.py`` (among 150, 250, 500 and 1,000, by the mean time of
# top_k on the even half of ``bench/eventlog.py``'s queries at 20,000 events; 500 in each of
# five runs): on the odd half 500 against 1,000 gave a mean 2.63 against 2.80
# ms and p99 9.9 against 10.9 ms (load 4.7; docs/figures-performance.md).
FEW = 500
# Each lexeme's bound is raised by this share so that rounding in a sum never makes a bound
# smaller than a score it bounds.
_SLACK = 1e-9

# The query's lexemes with their document frequencies and idf over the searched agents
# (``{scope}``), and the average document length: one statement, one snapshot.
STATS_SQL = f"""
    WITH lex AS MATERIALIZED (
        SELECT DISTINCT u.lexeme FROM unnest(to_tsvector('{TS_CONFIG}', %(text)s)) AS u
    ), scope AS MATERIALIZED (
        SELECT {{scope}} AS agents
    ), tot AS MATERIALIZED (
        SELECT coalesce(sum(a.docs), 0) AS docs, coalesce(sum(a.tokens), 0) AS tokens
        FROM fts_agent_totals AS a, scope WHERE a.agent_id = ANY(scope.agents)
    )
    SELECT l.lexeme, coalesce(t.docs, 0), greatest(ln(
            ((tot.docs - coalesce(t.docs, 0))::float8 + 0.5) / (coalesce(t.docs, 0)::float8 + 0.5)
        ), 1e-6::float8),
        greatest(tot.tokens::float8 / greatest(tot.docs, 1), 1.0::float8),
        coalesce(t.max_tf, 0), coalesce(t.min_doclen, 0), coalesce(t.labelled, true)
    FROM lex AS l CROSS JOIN tot CROSS JOIN scope
    LEFT JOIN LATERAL (
        SELECT sum(f.docs) AS docs, max(f.max_tf) AS max_tf, min(f.min_doclen) AS min_doclen,
               bool_or(f.labelled) AS labelled
        FROM fts_agent_terms AS f
        WHERE f.agent_id = ANY(scope.agents) AND f.lexeme = l.lexeme
    ) AS t ON true
    ORDER BY l.lexeme
"""


# A filter naming the columns of ``events e`` (``SearchFilters.sql``), which needs the join.
_NAMES_EVENTS = re.compile(r"\be\.")


def score_sql(where: str, lexemes: int = 2, cut: str = "", counted: bool = False) -> str:
    """The best ``limit`` documents matching the tsquery ``%(query)s`` (and the filter SQL
    ``where``, `` AND ...`` with named parameters, or empty; joined to ``events e`` when it
    names that table's columns, ``e.``),
    each as (seq, BM25 over every query lexeme), with the statistics given as parameters:
    ``lexemes`` and their ``idfs`` (in lexeme order), ``avgdl``, the column weights, and
    ``labelled``, the tsquery of the lexemes in a headline or a name (``_labelled``).
    ``cut``: a condition on ``events_fts f`` alone (`` AND ...``) a match must meet to be
    scored at all.

    For each match the tsvector is cut down to the query's lexemes, in C, and unnested; the
    positions are counted with their column's weight (labels A, C, D) and BM25 is summed
    over the lexemes in the tsvector's own order (so the sum is the same whatever plan the
    server picks). The cut: most matches hold the query's lexemes only in their content
    (label D), and for those the lexemes are relabelled B (a label the index never writes)
    and every other lexeme filtered out (``ts_filter(setweight(...))``), so each position
    counts with the content weight; a match whose query lexemes sit in a headline or a name
    (``labelled``, one more test in C) instead deletes every other lexeme
    (``ts_delete(tsv, tsvector_to_array(ts_delete(...)))``), keeping the labels. The first
    is the cheaper by about 2 us a match (the second builds a text array of every lexeme the
    match holds), which was half of what scoring a match cost; both give the same tf (a
    label counted with its weight, ``0 + 0 + wd * n`` being ``wd * n``).

    The score is a scalar subquery per match, not a grouped ``sum(... ORDER BY lexeme)``
    over all matches' lexemes: that sorted each match's rows on their own and cost a third
    of the statement. A query of one lexeme (``lexemes`` 1) has one row per match and no
    sum: the subquery's aggregate was half of what scoring a match cost, and one value
    summed is that value.

    ``counted``: the statement for many matches (``_counted_sql``). A match holding the
    query's lexemes only in its content has each lexeme's tf read off ts_rank, which finds
    a lexeme in the tsvector by binary search in C and copies nothing (the cut above copies
    the whole tsvector twice and unnests it), and its BM25 summed term by term in the same
    order, so every score is the same float (``tests/test_pg_topk_ranking.py``). It costs
    more to plan (a column per lexeme), so ``top_k`` sends it only where a statement may
    score more than ``few`` matches.
    """
    join = " JOIN events e ON e.seq = f.seq" if _NAMES_EVENTS.search(where) else ""
    tf = (
        "(CASE WHEN u.weights[1] = 'B' THEN %(wd)s::float8 * cardinality(u.weights)"
        " ELSE %(wa)s::float8 * cardinality(array_positions(u.weights, 'A'))"
        " + %(wc)s::float8 * cardinality(array_positions(u.weights, 'C'))"
        " + %(wd)s::float8 * cardinality(array_positions(u.weights, 'D')) END)"
    )
    norm = f"({K1}::float8 * ({1 - B}::float8 + {B}::float8 * f.doclen / %(avgdl)s::float8))"
    if counted:
        return _counted_sql(join, where, cut, lexemes, tf, norm)
    held = (
        f"unnest(CASE WHEN f.tsv @@ %(labelled)s::tsquery THEN {_DELETED} ELSE {_RELABELLED} END)"
    )
    if lexemes == 1:
        return f"""
        SELECT f.seq, (%(idfs)s::float8[])[1] * (t.tf * {K1 + 1}::float8) / (t.tf + {norm})
            AS score
        FROM events_fts f{join}, LATERAL (SELECT {tf}::float8 AS tf FROM {held} AS u) AS t
        WHERE f.tsv @@ %(query)s::tsquery{where}{cut}
        ORDER BY score DESC, f.seq LIMIT %(limit)s
    """
    return f"""
        SELECT f.seq, {_bm25_sum(held, tf, norm)} AS score
        FROM events_fts f{join}
        WHERE f.tsv @@ %(query)s::tsquery{where}{cut}
        ORDER BY score DESC, f.seq LIMIT %(limit)s
    """


def _counted_sql(join: str, where: str, cut: str, lexemes: int, tf: str, norm: str) -> str:
    """``score_sql`` with each lexeme's tf read off ts_rank where it can be."""
    norm_s = norm.replace("f.doclen", "s.doclen")
    # A match whose query lexemes are all in its content (most) has each lexeme's tf read
    # off ts_rank in C (``_counted``: up to ``_COUNTED_UP_TO`` positions; the subquery counts
    # any more), and BM25 summed term by term in the tsvector's order (``ordered``: the
    # lexemes by their bytes), an absent lexeme adding exactly 0.0. A match holding one in a
    # headline or a name is scored as a whole by the subquery that keeps the labels. OFFSET 0
    # keeps the server from inlining each tf into the score twice.
    columns = []
    terms = []
    counted = " ".join(
        f"WHEN %(r{n})s::real THEN %(wd)s::float8 * {n}" for n in range(1, _COUNTED_UP_TO + 1)
    )
    for j in range(lexemes):
        alone = _relabelled(f"(%(ordered)s::text[])[{j + 1}:{j + 1}]")
        recount = f"(SELECT {tf} FROM unnest({alone}) AS u)"
        columns.append(
            f"CASE WHEN NOT m.labelled THEN CASE ts_rank('{_ONES}', f.tsv, %(lq{j})s::tsquery)"
            f" WHEN 0 THEN 0::float8 {counted} ELSE {recount} END END::float8 AS tf{j}"
        )
        terms.append(
            f"(%(ordered_idfs)s::float8[])[{j + 1}] * (s.tf{j} * {K1 + 1}::float8)"
            f" / (s.tf{j} + {norm_s})"
        )
    labelled_sum = _bm25_sum(f"unnest({_DELETED})", tf, norm)
    return f"""
        SELECT s.seq, CASE WHEN s.labelled THEN s.whole ELSE {" + ".join(terms)} END AS score
        FROM (
            SELECT f.seq, f.doclen, m.labelled,
                   CASE WHEN m.labelled THEN {labelled_sum} END AS whole,
                   {", ".join(columns)}
            FROM events_fts f{join}, LATERAL (
                SELECT f.tsv @@ %(labelled)s::tsquery AS labelled
            ) AS m
            WHERE f.tsv @@ %(query)s::tsquery{where}{cut} OFFSET 0
        ) AS s
        ORDER BY score DESC, s.seq LIMIT %(limit)s
    """


def _bm25_sum(held: str, tf: str, norm: str) -> str:
    """A match's BM25: each row of ``held`` (its tsvector cut down to the query's lexemes,
    unnested in the tsvector's order) scored with its lexeme's idf and summed."""
    return f"""(
            SELECT sum((%(idfs)s::float8[])[array_position(%(lexemes)s::text[], t.lexeme)]
                       * (t.tf * {K1 + 1}::float8) / (t.tf + {norm}))
            FROM (SELECT u.lexeme, {tf}::float8 AS tf FROM {held} AS u) AS t
        )"""


# A match's tsvector cut down to the query's lexemes: every other lexeme deleted, labels
# kept (for a match holding one in a headline or a name), or the query's lexemes relabelled
# B (a label the index never writes) and the rest filtered out (every other match).
_DELETED = "ts_delete(f.tsv, tsvector_to_array(ts_delete(f.tsv, %(lexemes)s::text[])))"


def _relabelled(lexemes: str) -> str:
    """A match's tsvector with only ``lexemes`` (SQL for a text array), relabelled B."""
    return f"ts_filter(setweight(f.tsv, 'B', {lexemes}), '{{b}}')"


_RELABELLED = _relabelled("%(lexemes)s::text[]")


# ts_rank with every label weighing 1 gives a one-lexeme query the same value for every
# match holding the lexeme at the same number of positions, a different one for each number
# (sum(1/j^2) over j = 1..n, scaled), so in C and without copying the tsvector it tells how
# many positions a match holds. The values are the server's own (``_counted``: ts_rank of a
# tsvector holding a word at 1, 2, ... positions, read once per connection), passed as
# parameters ``r1``...; up to ``_COUNTED_UP_TO`` positions (most matches hold a word a few
# times), the subquery counts any more.
_ONES = "{1,1,1,1}"
_COUNTED_UP_TO = 8
_COUNTED_SQL = f"""
    SELECT n, ts_rank('{_ONES}', ('x:' || (
        SELECT string_agg(i::text, ',') FROM generate_series(1, n) AS i))::tsvector, 'x')
    FROM generate_series(1, {_COUNTED_UP_TO}) AS n ORDER BY n
"""
_COUNTED: WeakKeyDictionary[Any, dict[str, float]] = WeakKeyDictionary()


def _counted(db: Any) -> dict[str, float]:
    """``r1``... for ``score_sql``: ts_rank's value for a word at 1, 2, ... positions, as
    the server ``db`` is connected to works it out (kept per connection)."""
    ranks = _COUNTED.get(db)
    if ranks is None:
        ranks = {f"r{n}": float(rank) for n, rank in db.execute(_COUNTED_SQL).fetchall()}
        if len(set(ranks.values())) != _COUNTED_UP_TO or 0.0 in ranks.values():
            raise RuntimeError(f"ts_rank does not tell positions apart on this server: {ranks}")
        _COUNTED[db] = ranks
    return ranks


def _ordered_params(lexemes: list[str], idfs: list[float]) -> dict[str, Any]:
    """``score_sql``'s parameters naming the lexemes in a tsvector's order (by their bytes):
    ``ordered`` and ``ordered_idfs``, and ``lq0``... each lexeme as a tsquery of its own."""
    pairs = sorted(zip(lexemes, idfs, strict=True), key=lambda pair: pair[0].encode())
    named: dict[str, Any] = {f"lq{j}": _quoted(lex) for j, (lex, _) in enumerate(pairs)}
    named["ordered"] = [lex for lex, _ in pairs]
    named["ordered_idfs"] = [idf for _, idf in pairs]
    return named


def _labelled(lexemes: list[str]) -> str:
    """A tsquery matching a document that holds any of ``lexemes`` in a headline (label A)
    or a name (label C)."""
    return " | ".join(_quoted(lex) + ":AC" for lex in lexemes)


def _quoted(lexeme: str) -> str:
    """A tsquery operand that is only ever this lexeme (no operator, no stemming)."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


def _any_of(lexemes: list[str]) -> str:
    return " | ".join(_quoted(lex) for lex in lexemes)


@contextmanager
def _snapshot(db: Any) -> Iterator[None]:
    """One REPEATABLE READ snapshot for the statements inside, unless ``db`` is already in a
    transaction (a time-limited search's), which is then used as it is. The level goes with
    the BEGIN (one round trip, not a BEGIN and a SET TRANSACTION)."""
    if db.info.transaction_status != TransactionStatus.IDLE:
        yield
        return
    prior = db.isolation_level
    db.isolation_level = IsolationLevel.REPEATABLE_READ
    try:
        with db.transaction():
            yield
    finally:
        db.isolation_level = prior


def top_k(
    db: Any,
    limit: int,
    scope: str,
    params: dict[str, Any],
    where: str = "",
    early: bool = True,
    few: int | None = None,
    scoped: bool = False,
) -> dict[int, float]:
    """The best ``limit`` documents by BM25 for the lexemes of ``params["text"]``
    ({seq: score}).

    ``scope`` is the SQL array of the searched agents, ``params`` also holds its parameters,
    the column weights (``wa``, ``wc``, ``wd``) and those of the filter SQL ``where``
    (``f0``...; see ``score_sql``). ``early`` False scores
    every match in one statement (the reference the early stop is measured and tested
    against). ``few`` (``FEW`` unless given): at most this many matches in all (by the
    lexemes' document frequencies) are scored in one statement. ``scoped``: ``where`` keeps
    only the events of the agents ``scope`` names, so the bounds kept per agent
    (``max_tf``...) hold for every match; they hold anyway when ``scope`` is every agent
    (``params`` has no ``agents``). Otherwise each lexeme is bounded by the most BM25 can
    give, ``idf * (k1 + 1)``.
    """
    few = FEW if few is None else few
    tight = scoped or "agents" not in params
    with _snapshot(db):
        stats = db.execute(STATS_SQL.replace("{scope}", scope), params)
        rows = stats.fetchall()
        if not rows:
            return {}
        lexemes = [row[0] for row in rows]
        idfs = [float(row[2]) for row in rows]
        base = {
            **params,
            "lexemes": lexemes,
            "idfs": idfs,
            "avgdl": float(rows[0][3]),
            "limit": limit,
            "labelled": _labelled(lexemes),
            **_ordered_params(lexemes, idfs),
            **_counted(db),
        }
        frequency = {lex: docs for lex, docs, *_ in rows}

        def scoring(matching: list[str], cut: str = "") -> str:
            # ts_rank's statement costs more to plan (0.3-1 ms more) and less per match
            # (about 1 us): it pays where the statement may score more than ``few``.
            many = sum(frequency[lex] for lex in matching) > few
            return score_sql(where, len(lexemes), cut, counted=many)

        weights = (float(params["wa"]), float(params["wc"]), float(params["wd"]))
        # Rarest first (ties by lexeme, so the plan is the same from run to run); a lexeme no
        # document holds is skipped: it can match nothing.
        order = sorted((docs, lex) for lex, docs, *_ in rows if docs > 0)
        if not order:
            return {}
        avgdl = base["avgdl"]
        shares = {row[0]: _share(float(row[2]), int(row[4]), bool(row[6]), weights) for row in rows}
        bound = {
            row[0]: _at_length(shares[row[0]], int(row[5]), avgdl)
            if tight
            else float(row[2]) * (K1 + 1) * (1 + _SLACK)
            for row in rows
        }
        # Scored in one statement: on request, with a negative weight (no upper bound to stop
        # on), or when the matches are so few that a second statement would cost more than
        # scoring them all.
        if not early or min(weights) < 0 or sum(docs for docs, _ in order) <= few:
            every = [lex for _, lex in order]
            return _scored(db, scoring(every), {**base, "query": _any_of(every)})
        # The rarest lexemes' matches first, as many lexemes as it takes for their matches
        # to reach ``limit`` (so the threshold is a real one, not 0) and more while they are
        # few; then, once more, the documents without them that hold enough of the other
        # lexemes to reach it.
        taken: list[str] = []
        reach = 0
        for docs, lex in order:
            if reach >= limit and reach + docs > few:
                break
            taken.append(lex)
            reach += docs
        best = _scored(db, scoring(taken), {**base, "query": _any_of(taken)})
        rest = [lex for _, lex in order[len(taken) :]]
        while rest:
            threshold = min(best.values()) if len(best) >= limit else 0.0
            without = f"!({_any_of(taken)})"
            if threshold <= 0:
                # Their matches overlap: fewer than ``limit`` documents; the next lexeme's.
                lex = rest.pop(0)
                query = f"{_quoted(lex)} & {without}"
                taken.append(lex)
                sql = scoring([lex])
            else:
                enough = _enough(rest, bound, threshold)
                if not enough:
                    break
                query = f"({enough}) & {without}"
                if tight:
                    # Each match's own bound, at its own length: most are longer than the
                    # shortest document holding its lexemes, and below the threshold.
                    cut, named = _cut(rest, shares, threshold, avgdl)
                    last = scoring(rest, cut)
                    best.update(_scored(db, last, {**base, **named, "query": query}))
                    best = dict(sorted(best.items(), key=lambda item: (-item[1], item[0]))[:limit])
                    break
                sql = scoring(rest)
                rest = []
            best.update(_scored(db, sql, {**base, "query": query}))
            best = dict(sorted(best.items(), key=lambda item: (-item[1], item[0]))[:limit])
        return best


def _share(
    idf: float, max_tf: int, labelled: bool, weights: tuple[float, float, float]
) -> tuple[float, float]:
    """What bounds a lexeme's share of a document's score, as (numerator, tf): the share is
    at most ``numerator / (tf + norm)`` for the document's length norm. ``tf`` is
    ``max_tf`` positions (the most one document holds of the lexeme), each at the content
    weight unless the lexeme is ever ``labelled`` (in a headline or a name: then at the
    largest weight); BM25's share grows with tf. Weights are not negative here (a negative
    one is scored in one statement)."""
    wa, wc, wd = weights
    tf = (max(wa, wc, wd) if labelled else wd) * max_tf
    return idf * (tf * (K1 + 1)) * (1 + _SLACK), tf


def _at_length(share: tuple[float, float], doclen: float, avgdl: float) -> float:
    """The bound of ``share`` in a document of ``doclen`` (the shortest holding the lexeme
    bounds every document holding it: the share shrinks with length)."""
    numerator, tf = share
    if tf <= 0:
        return 0.0
    return numerator / (tf + K1 * ((1 - B) + B * doclen / avgdl))


def _cut(
    lexemes: list[str],
    shares: dict[str, tuple[float, float]],
    threshold: float,
    avgdl: float,
) -> tuple[str, dict[str, Any]]:
    """The condition (and its parameters) that a match's bound, summed over the
    ``lexemes`` it holds at its own length (``f.doclen``), reaches ``threshold``; a match
    below it cannot enter the top."""
    norm = f"({K1}::float8 * ({1 - B}::float8 + {B}::float8 * f.doclen / %(avgdl)s::float8))"
    parts, named = [], {}
    for i, lex in enumerate(lexemes):
        numerator, tf = shares[lex]
        if tf <= 0:
            continue
        named.update({f"cq{i}": _quoted(lex), f"cn{i}": numerator, f"ct{i}": tf})
        parts.append(
            f"CASE WHEN f.tsv @@ %(cq{i})s::tsquery"
            f" THEN %(cn{i})s::float8 / (%(ct{i})s::float8 + {norm}) ELSE 0 END"
        )
    named["cut"] = threshold
    return f" AND ({' + '.join(parts) or '0'}) >= %(cut)s::float8", named


# Past this many lexemes besides the rarest, the sets of them that could reach the threshold
# are not listed (2**n of them): any one of them is then enough to be scored.
_MOST_LISTED = 10


def _enough(lexemes: list[str], bound: dict[str, float], threshold: float) -> str:
    """A tsquery matching every document whose ``lexemes`` could reach ``threshold``: one
    holding a set of them whose bounds sum to at least it. The smallest such sets, each an
    AND, OR-ed (every lexeme on its own when the threshold is 0 or there are too many);
    empty when no set of them can reach it."""
    if not lexemes:
        return ""
    if threshold <= 0 or len(lexemes) > _MOST_LISTED:
        return _any_of(lexemes)
    sets: list[tuple[str, ...]] = []
    for size in range(1, len(lexemes) + 1):
        for chosen in combinations(lexemes, size):
            held = set(chosen)
            if any(held.issuperset(s) for s in sets):
                continue  # a smaller set already brings every such document in
            if sum(bound[lex] for lex in chosen) >= threshold:
                sets.append(chosen)
    return " | ".join("(" + " & ".join(_quoted(lex) for lex in s) + ")" for s in sets)


def _scored(db: Any, sql: str, params: dict[str, Any]) -> dict[int, float]:
    # Never prepared: a generic plan cannot see how many documents the tsquery matches and
    # may scan the whole table for a rare word; planned with the tsquery in hand, the GIN
    # index answers it (half a millisecond of planning against hundreds on a bad plan).
    rows = db.execute(sql, params, prepare=False).fetchall()
    return {int(seq): float(score) for seq, score in rows}
