"""BM25 search over the Event Log, with neighbouring turns as a ranking signal.

Two steps, so the cost follows the number of hits and not the number of matches:

1. The backend's full-text index ranks the matches by BM25 and hands back the best
   ``candidates`` seqs (``SearchDialect``: FTS5 in ``sqlite_search``, BM25 in SQL over a
   tsvector index in ``pg_search``).
2. The candidates and the turns next to them are read once; each turn's score becomes its
   own bm25 plus a share of the bm25 of the turns beside it in the same session. A reply
   rarely repeats the words of the question it answers, so evidence often sits one turn
   away from the best lexical match.

As shipped, step 2 is a learned linear ranker: a weighted sum of a few features of each
turn read (its bm25, its neighbours', how much of the query it and its window of turns
hold, whether the query names its speaker), the weights fitted on LoCoMo's dev split
(``SearchTuning.ranker_weights``); the hand formula above is what it starts from.
"""

from __future__ import annotations

import itertools
import math
import re
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from typing import Any

from ..errors import ConfigError, InvalidEvent
from ..timeutil import format_ts
from . import fts_query, linear_rank, search_bounds
from .query_dates import named_dates
from .rank_trees import SHIPPED_TREES, TreeRanker, load_trees
from .schema_common import sqlite_int
from .term_match import TermMatcher, mask_terms

__all__ = [
    "RANK_FEATURES",
    "TREE_FEATURES",
    "TREE_RANK_FEATURES",
    "Hit",
    "SearchDialect",
    "SearchFilters",
    "SearchTuning",
    "TermStats",
    "neighbour_seqs",
    "run_search",
    "scope_key",
    "search_features",
]


@dataclass(frozen=True)
class Hit:
    """One search result; ``score`` is higher for better matches."""

    seq: int
    session_id: str
    agent_id: str
    kind: str
    role: str | None
    name: str | None
    created_at: str
    score: float
    snippet: str
    headline: str | None
    # False for a turn that matched no term itself and ranks by the turns beside it.
    matched: bool = True
    # Seqs of the searchable turns just before and after this one in its session, ascending
    # (filled by ``neighbour_seqs``; empty when not asked for).
    neighbours: tuple[int, ...] = ()


@dataclass(frozen=True)
class SearchTuning:
    """The ranking knobs, measured on LoCoMo by ``bench/retrieval.py`` (see the README).

    ``rank_weights`` are bm25 column weights for (content, headline, name). A headline is
    the model's own summary of a turn, written to be found again, so it counts double. The
    name column (speaker or tool) matters less as a match than as a statistic: indexed,
    a speaker's name is common, so a question naming a person stops ranking the turns that
    merely greet that person above the ones that person wrote.

    ``neighbour_weights[d]`` is the share of the bm25 of the turns ``d`` places before and
    after (same session) added to a turn's score; an empty tuple switches that off. In a
    two-person chat the turn two away is the same speaker's, often on the same topic, so
    it earns as much as the reply next to it.
    """

    # Name weight, neighbour weights and candidates chosen on the dev split by
    # `bench/retrieval.py --tune` (LoCoMo dev recall@5 0.607); the headline weight has no
    # LoCoMo data to choose it and stays as set.
    rank_weights: tuple[float, float, float] = (1.0, 2.0, 0.5)
    neighbour_weights: tuple[float, ...] = (0.4, 0.5)
    candidates: int = 30
    # Term features on the candidates' own text, each off at 0 (see ``_term_features``):
    # coverage scales a candidate's bm25 by 1 + w * (share of the query's distinct terms it
    # holds beyond the first), the coordination factor of classic Lucene; proximity by
    # 1 + w / (smallest token gap between two different query terms). Each at the one
    # weight 1.0, not tuned; on because the bench's ablation shows each gaining on the dev
    # split alone and more together (dev recall@5 0.607 -> 0.636).
    coverage_weight: float = 1.0
    proximity_weight: float = 1.0
    # The techniques below were each measured by the bench's ablation at its best dev
    # setting (`bench/retrieval.py --tune-techniques`); one is on only if it gains on
    # LoCoMo's dev split and holds on the held-out transcripts (`bench/_heldout.py`); see
    # the README.
    # Exact pieces of the query (numbers, dates, versions, identifiers: a piece holding a
    # digit or an inner ``._-/:@#``) found verbatim add ``w * share found`` to that factor.
    # Loses on dev (LoCoMo questions hardly hold any).
    exact_weight: float = 0.0
    # A candidate whose speaker (or tool) the query names counts ``1 + w`` times. Best on
    # dev at 0.5. On the hand formula it lost one held-out item at @5 and stayed off; over
    # the learned ranker it gains on dev (recall@10 0.766 -> 0.769) and loses nothing held
    # out, so it is on (the ranker's weights were fitted with it off).
    speaker_weight: float = 0.5
    # RM3-style pseudo-relevance feedback over the turns already read (see ``_feedback``);
    # off while any is 0. Best on dev (3, 10, 0.1) gains one dev item, none held out, and
    # costs about a seventh more time per query.
    feedback_docs: int = 0
    feedback_terms: int = 0
    feedback_weight: float = 0.0
    # MMR-style diversity across session-days (see ``_diversify``); off at 0. Loses on dev at
    # every weight tried: LoCoMo's evidence, multi-hop included, clusters within a day.
    diversity_weight: float = 0.0
    # Window coverage (see ``_rank_features``): a turn's score is scaled by
    # ``1 + w * (share of the query's distinct terms found in the turn and the turns within
    # the neighbour reach beside it, same session)``, a passage-level view of the turn for
    # evidence that spans a question and its answer; off at 0.
    window_weight: float = 0.0
    # A learned linear ranker: when set, a turn's score is the dot product of these weights
    # with its ``RANK_FEATURES`` and replaces the hand formula above. Fitted on LoCoMo's dev
    # split alone (`python bench/retrieval.py --fit-ranker`, coordinate ascent from the hand
    # formula, ``bench/_ranker_fit.py``); on because it gains on dev (recall@10 0.730 ->
    # 0.766) and loses nothing on the held-out transcripts (recall@10 0.830 -> 0.840). The
    # rarity-weighted shares carry the most weight, window coverage above the turn's own:
    # evidence whose question sits a turn or two away. The test split and the held-out set
    # were only read after the weights were fixed (the neighbour weights
    # then only set how far its features reach: none when empty, at most two turns for the
    # ``near`` sums, the whole reach for window coverage). Empty: off.
    # The date features ("on_day", "in_month") and the dialogue pair ("asks", "answers")
    # were refitted on dev from these weights and weigh 0 here: the dialogue pair lowers
    # held-out MRR, and the date pair, which gains on dev and changes nothing held out (no
    # held-out question names a date), turns a query naming the wrong day into a filter for
    # that day (``bench/heldout_dates.py``; see the README).
    ranker_weights: tuple[float, ...] = (1.0, 0.6, 0.4, 0.0, 0.1, 0.4, 1.0, 1.5)
    # Where the rarity that weighs the query's terms in the ``rare_*`` shares comes from:
    # ``"read"``, among the turns the search read (``log((n+1)/(holding+0.5))``), or
    # ``"log"``, each term's document frequency over the whole log (BM25's idf,
    # ``log((N - df + 0.5)/(df + 0.5))``; ``SearchDialect.doc_freq``, cached per log with
    # bounded staleness, see ``TermStats``).
    term_rarity: str = "read"
    # A gradient-boosted tree ranker (LambdaMART) over ``TREE_FEATURES``: when set, a turn's
    # score is the model's and replaces both the linear ranker and the hand formula. ``""``
    # is off; ``"shipped"`` is ``scroll_core/store/ranker_trees.json`` (fitted on LoCoMo's dev
    # split alone, ``python bench/retrieval.py --fit-ranker --fit trees``); anything else is
    # the path of such a file. The model is loaded and checked here, so a bad file is a
    # ``ConfigError`` when the tuning is built, never a search that quietly ranks otherwise.
    # Off: it gains on dev under leave-one-conversation-out cross-validation (recall@10
    # 0.778 against the linear ranker's 0.756) but loses recall@5 and MRR on both held-out
    # sets (see the README).
    ranker_trees: str = ""
    # Two bounds that keep the ranker close to plain BM25 (issue 34: the ranker, fitted on
    # LoCoMo's short two-person chat, lost to plain BM25 at the top rank on long assistant
    # conversations). ``ranker_share`` interpolates: a turn scores
    # ``s * ranker / best ranker + (1 - s) * bm25 / best bm25`` (1.0: the ranker alone; 0.0:
    # BM25's order). ``bm25_margin`` bounds displacement: a candidate BM25 ranks r-th
    # (from 0) is never shown below place ``r + margin``, so the top ``k`` always holds
    # BM25's top ``k - margin``; -1 is off. The shape switch ``long_turn_words``: when above
    # 0, both bounds apply only to a search whose BM25 candidates are long turns (their
    # median length in words at least this), the shape of an assistant's history; a search
    # over short chat turns, the shape the ranker was fitted on, keeps the ranker's order
    # (0: every search is bounded). All three chosen together by
    # ``python bench/retrieval.py --tune-safe`` (``bench/_safe_tune.py``): the setting whose
    # worst recall@1/5/10 difference from plain BM25 over the dev sets (LoCoMo dev, the
    # generated assistant conversations' dev part) is highest. Median candidate length is
    # 20 words on LoCoMo dev (95th percentile 29) and 86 on the assistant set (5th
    # percentile 33); bounding only above 30 keeps LoCoMo's gains, and a share of 0.5 beats
    # a margin of 1 to 3 there by one item at recall@5 (see docs/figures-retrieval.md).
    ranker_share: float = 0.5
    bm25_margin: int = -1
    long_turn_words: int = 30
    trees: TreeRanker | None = field(init=False, default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.ranker_trees:
            path = SHIPPED_TREES if self.ranker_trees == "shipped" else self.ranker_trees
            object.__setattr__(self, "trees", load_trees(path, TREE_FEATURES))
        if self.term_rarity not in TERM_RARITY:
            raise ConfigError(
                f"term_rarity must be one of {', '.join(TERM_RARITY)}, got {self.term_rarity!r}"
            )
        if not 0.0 <= self.ranker_share <= 1.0:
            raise ConfigError(f"ranker_share must be in [0, 1], got {self.ranker_share!r}")
        if self.bm25_margin < -1:
            raise ConfigError(f"bm25_margin must be -1 (off) or >= 0, got {self.bm25_margin!r}")
        if len(self.ranker_weights) > len(RANK_FEATURES):
            raise ConfigError(
                f"ranker_weights has {len(self.ranker_weights)} weights; the ranker has "
                f"{len(RANK_FEATURES)} features ({', '.join(RANK_FEATURES)})"
            )


@dataclass(frozen=True)
class SearchFilters:
    session_id: str | None = None
    agent_id: str | Sequence[str] | None = None
    kind: str | Sequence[str] | None = None
    since: str | datetime | date | None = None
    until: str | datetime | date | None = None
    before_seq: int | None = None
    # The ``name`` column: who spoke a message (or which tool a tool event names).
    speaker: str | Sequence[str] | None = None
    sql: str = field(init=False, default="")
    params: tuple[Any, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        clauses: list[str] = []
        params: list[Any] = []
        if self.session_id is not None:
            clauses.append("e.session_id = ?")
            params.append(self.session_id)
        if self.agent_id is not None:
            agents = [self.agent_id] if isinstance(self.agent_id, str) else list(self.agent_id)
            clauses.append(f"e.agent_id IN ({', '.join('?' * len(agents))})" if agents else "0")
            params.extend(agents)
        if self.kind is not None:
            kinds = [self.kind] if isinstance(self.kind, str) else list(self.kind)
            clauses.append(f"e.kind IN ({', '.join('?' * len(kinds))})" if kinds else "0")
            params.extend(kinds)
        if self.speaker is not None:
            names = [self.speaker] if isinstance(self.speaker, str) else list(self.speaker)
            clauses.append(f"e.name IN ({', '.join('?' * len(names))})" if names else "0")
            params.extend(names)
        if self.before_seq is not None:
            clauses.append("e.seq < ?")
            params.append(sqlite_int(self.before_seq))
        for bound, op in ((self.since, ">="), (self.until, "<")):
            if bound is None:
                continue
            try:
                stamp = format_ts(bound)
            except ValueError as exc:
                raise InvalidEvent(f"invalid date bound: {exc}") from None
            clauses.append(f"e.created_at {op} ?")
            params.append(stamp)
        object.__setattr__(self, "sql", "".join(f" AND {c}" for c in clauses))
        object.__setattr__(self, "params", tuple(params))

    @property
    def has_dates(self) -> bool:
        return self.since is not None or self.until is not None


# A filter with nothing to match (``kind=[]``) is the clause ``0``; PostgreSQL wants a boolean.
_FALSE_CLAUSE = re.compile(r" AND 0(?= AND |$)")
HIT_COLUMNS = "e.seq, e.session_id, e.agent_id, e.kind, e.role, e.name, e.created_at"
# A turn a search reads (``_read_pool``): what ranking it reads (its seq, session, name,
# content and headline), then, unless the read is lean, the rest of a hit's columns (agent,
# kind, role, time). Most turns read are read for the ranking alone, and those four columns
# cost a third of the read in the ``sqlite3`` module's strings (the 150 turns of a search
# at 20,000 events: 0.39 against 0.52-0.59 ms); the winners' are read after the ranking.
POOL_COLUMNS = "e.seq, e.session_id, e.name, e.content, e.headline"
POOL_HIT_COLUMNS = "e.agent_id, e.kind, e.role, e.created_at"
_POOL_WIDTH = 5


@dataclass(frozen=True)
class SearchDialect:
    """What differs between backends: how a parameter is marked, how the BM25 candidates are
    ranked (``candidates(db, terms, limit, filters, tuning) -> {seq: score}``, with
    the statistics of the agents ``filters`` names, or the whole log's when it names none)
    and how a date range is listed. The neighbour signal and the hits are shared."""

    mark: str
    candidates: Callable[[Any, list[str], int, SearchFilters, SearchTuning], dict[int, float]]
    list_range: Callable[[Any, int, SearchFilters], list[Hit]]
    # Whether one array parameter can stand for a list of seqs (``= ANY(%s::bigint[])``):
    # the statement's text then stays the same from search to search, so the server plans
    # it once and keeps it prepared instead of parsing a new ``IN (...)`` every time; and
    # the turns beside the candidates are read one range of seqs per candidate, from the
    # array of the candidates (``near_from``). The array goes as its text (``{1,2,3}``):
    # psycopg's list dumper inspects every element in Python, about 0.25 ms for a
    # search's 150 seqs.
    arrays: bool = False
    # Whether the pool read may leave out the hit's columns when the ranking does not read
    # them (``_lean``), reading them for the winners after the ranking. SQLite: yes (its
    # strings cost a third of the read). PostgreSQL: no, one more statement costs more than
    # the four columns of the 150 turns do (0.50 against 0.40 ms for the pool read and the
    # winners' at 20,000 events, alternating in one process).
    lean_pool: bool = True
    # Whether lists of seqs can go as JSON texts (SQLite's ``json_each``): the turns beside
    # the candidates are then read by the statement itself, one range of seqs per
    # candidate, in a statement whose text stays the same from search to search.
    json_lists: bool = False
    # ``candidates`` given the log's ``TermStats`` too, to keep exact statistics between
    # searches (in ``TermStats.backend``; SQLite's ``sqlite_bm25.ScopedStats``); used instead
    # of ``candidates`` when the search has the log's ``TermStats``.
    cached_candidates: (
        Callable[[Any, list[str], int, SearchFilters, SearchTuning, TermStats], dict[int, float]]
        | None
    ) = None
    # Term statistics for ``SearchTuning.term_rarity == "log"``, over a set of agents' events
    # (``scope_key``; the whole log's for None): how many documents the full-text index
    # holds (``doc_count(db, agents)``), and how many hold each term
    # (``doc_freq(db, terms, agents)``, matched as a search matches it, stemmed by the
    # index's own rules).
    doc_count: Callable[[Any, tuple[str, ...] | None], int] | None = None
    doc_freq: Callable[[Any, list[str], tuple[str, ...] | None], list[int]] | None = None

    def sql(self, text: str) -> str:
        """Filter SQL written for SQLite (``?`` marks, ``0`` for false) in this dialect."""
        if self.mark == "?":
            return text
        return _FALSE_CLAUSE.sub(" AND 1 = 0", text).replace("?", self.mark)

    def seq_in(self, column: str, seqs: Sequence[int]) -> tuple[str, list[Any]]:
        """``column`` is one of ``seqs``, as SQL and its parameters."""
        if self.arrays:
            return f"{column} = ANY({self.mark}::bigint[])", [_array_ints(seqs)]
        return f"{column} IN ({', '.join([self.mark] * len(seqs))})", list(seqs)

    def near_from(self, seqs: Sequence[int], reach: int) -> tuple[str, str, list[Any]]:
        """The events ``e`` at most ``reach`` from one of ``seqs``: a FROM clause, the start
        of a WHERE clause (empty, or ending in ``AND``) and their parameters. A row two
        candidates' ranges share may come twice (the same row both times).

        With ``json_lists`` (SQLite) each candidate's range is read as one range of the
        primary key (``BETWEEN``), a seek and a few steps; listing every seq of every range
        for an ``IN`` (the form a dialect with neither option gets) makes SQLite build, sort
        and probe a list of them first (the pool read 0.246 against 0.272 ms at 20k events,
        alternating). The join is a CROSS JOIN, which SQLite never reorders: given an agent
        or session filter, its planner would otherwise walk that agent's or session's events
        by index as the outer loop and look each up in the list, a scan of the whole agent
        per search. (Ported from the sqlsearch branch's pass at issue 36, which found the
        planner trap.)

        With ``arrays`` (PostgreSQL) the same ranges, from the array of the candidates: 30
        index range scans instead of 150 probes of a listed ``= ANY`` (the pool read 0.43
        against 0.47 ms at 20,000 events with the array sent as text for both, 0.70 as a
        list; alternating in one process). Each range is a LATERAL subquery behind ``OFFSET
        0``, which the planner neither flattens nor reorders: the candidates are the outer
        loop under every filter and at any table size, as the CROSS JOIN makes them on
        SQLite (a plain join was 0.07 ms faster but left the order to the statistics: on a
        small table it scanned a session's events; ``tests/test_search_pool.py`` reads the
        plans on both)."""
        reach = max(0, int(reach))
        if self.arrays:
            ranges = (
                f"unnest({self.mark}::bigint[]) AS j(seq) CROSS JOIN LATERAL (SELECT * FROM "
                f"events e WHERE e.seq BETWEEN j.seq - {reach} AND j.seq + {reach} OFFSET 0) e"
            )
            return ranges, "", [_array_ints(sorted(seqs))]
        if self.json_lists:
            ranges = (
                f"json_each({self.mark}) j CROSS JOIN events e "
                f"ON e.seq BETWEEN j.value - {reach} AND j.value + {reach}"
            )
            return ranges, "", [_json_ints(sorted(seqs))]
        pool = set(seqs)
        for seq in seqs:
            pool.update(range(seq - reach, seq + reach + 1))
        where, params = self.seq_in("e.seq", sorted(pool))
        return "events e", f"{where} AND ", params


def _array_ints(values: Sequence[int]) -> str:
    """A list of ints as PostgreSQL's text for an array (``{1,2,3}``)."""
    return "{" + ",".join(map(str, values)) + "}"


def _json_ints(values: Sequence[int]) -> str:
    """``json.dumps`` of a list of ints (what it writes for each is ``str``), without the
    encoder's machinery: a search lists its candidates this way."""
    return "[" + ",".join(map(str, values)) + "]"


# What the learned ranker (``SearchTuning.ranker_weights``) weighs, per turn read: its own
# bm25 after the term features and the same summed over the turns one and two places away
# in its session (each over the best candidate's, so weights mean the same from query to
# query), the share of the query's distinct terms it holds, the share held by it and the
# turns within the neighbour reach together, whether the query names its speaker, and the
# two shares again with each term weighted by its rarity among the turns read
# (``log((n + 1) / (holding + 0.5))`` of the ``n`` turns read, ``holding`` of them holding
# it: a term every candidate holds tells them apart no better than none).
#
# ``day`` is the passage-with-document score of hierarchical retrieval: the bm25 mass (after
# the term features) of the candidates in the turn's session and day, over the largest such
# mass among the candidates. Evidence that a question gathers from one day of a long
# conversation lifts every turn of that day, the turns that hold no query term included.
#
# Two features read the turn as a move in a dialogue. ``asks`` is 1 for a turn that ends in a
# question mark: a question restates its topic in the words a later question about it will
# use, but the fact asked about is in the reply. ``answers`` is the bm25 share (as ``own``)
# of the turn just before it in its session when that turn asks: the reply to a question
# that matches the query.
#
# Two read the dates the query names (``query_dates.named_dates``: days and months written
# out in full, "13 October 2023", "2023-10"): ``on_day`` is 1 for a turn logged on a day the
# query names, ``in_month`` for one logged in a month it names (a named day names its month).
# A query that names no date gives every turn 0, so both only reorder questions about a time.
# A weights tuple shorter than ``RANK_FEATURES`` leaves the features past its end out, and
# a feature whose weight is 0 is not computed.
RANK_FEATURES = (
    "own", "near_1", "near_2", "coverage", "window_coverage", "speaker",
    "rare_coverage", "rare_window_coverage", "day", "asks", "answers", "on_day", "in_month",
)  # fmt: skip

# What the tree ranker (``SearchTuning.ranker_trees``) reads: the first nine
# ``RANK_FEATURES`` (those it was fitted with) and four cheap ones the search already has,
# each comparable from query to query: the turn's place in the BM25 order over the number
# of candidates (1 for a turn read only as a neighbour), its length (log of 1 + its words),
# how many distinct terms the query has, and how many of them the turn holds. Trees can then
# weigh a signal differently by context (neighbour mass where the turn's own match is weak,
# a short turn against a long one).
TREE_RANK_FEATURES = RANK_FEATURES[:9]
TREE_FEATURES = (*TREE_RANK_FEATURES, "bm25_rank", "length", "query_terms", "terms_held")
_TREE_RANK = len(TREE_RANK_FEATURES)

# The tree ranker needs only the rank features it reads computed.
_TREE_WEIGHED = (1.0,) * _TREE_RANK

TERM_RARITY = ("read", "log")
_DAY, _ASKS, _ANSWERS, _ON_DAY, _IN_MONTH = (
    RANK_FEATURES.index(name) for name in ("day", "asks", "answers", "on_day", "in_month")
)
# A turn asks when its text ends in "?" (closing quotes, brackets or spaces after it).
_ASKING = re.compile(r"\?[\s\"'\)\]\u00bb\u201d\u2019]*\Z")


class TermStats:
    """Term statistics cached for one Event Log, per set of agents searched.

    A search that names its agents (every ``ms.search`` does) weighs terms by those agents'
    events alone, and one that names none by the whole log's: nothing cached for one set of
    agents is read for another, so no agent's scores move with another agent's events.

    Counting a common term's documents reads its whole posting list, so each count is kept
    and reused. Staleness is bounded: a set's counts are emptied whenever its events in the
    index are more than ``slack`` (a share) more than when they were last emptied, so a count
    is never older than that much growth. Only terms are kept (at most ``max_terms`` over
    every set, all emptied when full), never text."""

    def __init__(self, slack: float = 1 / 32, max_terms: int = 65_536) -> None:
        if not slack >= 0 or max_terms < 1:
            raise ConfigError("TermStats needs slack >= 0 and max_terms >= 1")
        self.slack = slack
        self.max_terms = max_terms
        self._scopes: dict[tuple[str, ...] | None, tuple[int, dict[str, int]]] = {}
        self.lock = threading.Lock()
        # Exact statistics the backend keeps between this log's searches, with its own keys
        # and invalidation (a dialect that ``keeps_stats`` sets it on first use).
        self.backend: Any = None

    @property
    def held(self) -> int:
        """How many term counts are cached, over every set of agents."""
        with self.lock:
            return sum(len(found) for _, found in self._scopes.values())

    def lookup(
        self,
        db: Any,
        terms: list[str],
        dialect: SearchDialect,
        agents: Sequence[str] | None = None,
    ) -> tuple[int, list[int]]:
        """(documents in the index, documents holding each of ``terms``), both over
        ``agents``' events (the whole log's when None)."""
        if dialect.doc_count is None or dialect.doc_freq is None:
            raise ConfigError("this backend keeps no term statistics")
        scope = scope_key(agents)
        docs = dialect.doc_count(db, scope)
        with self.lock:
            base, known = self._scopes.get(scope, (-1, {}))
            if docs < base or docs > base * (1 + self.slack):
                base, known = docs, {}
                self._scopes[scope] = (base, known)
            missing = [t for t in terms if t not in known]
        counted: dict[str, int] = {}
        if missing:
            counted = dict(zip(missing, dialect.doc_freq(db, missing, scope), strict=True))
            with self.lock:
                held = sum(len(found) for _, found in self._scopes.values())
                if held + len(counted) > self.max_terms:
                    for key, (at, _) in list(self._scopes.items()):
                        self._scopes[key] = (at, {})
                    known = self._scopes.setdefault(scope, (base, {}))[1]
                known.update(counted)
        with self.lock:
            return docs, [known.get(t, counted.get(t, 0)) for t in terms]


def scope_key(agents: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """The agents a search's statistics are counted over, sorted and each once (None: the
    whole log)."""
    if agents is None:
        return None
    return tuple(sorted({agents} if isinstance(agents, str) else set(agents)))


def run_search(
    db: Any,
    query: str,
    k: int,
    filters: SearchFilters,
    tuning: SearchTuning,
    dialect: SearchDialect,
    stats: TermStats | None = None,
) -> list[Hit]:
    """The top ``k`` hits for ``query`` on a connection of ``dialect``'s backend
    (``sqlite_search.SQLITE``, ``pg_search.PG_DIALECT``); ``stats`` caches whole-log term
    statistics when ``tuning.term_rarity`` asks for them (a fresh count each search without
    it)."""
    k = max(0, sqlite_int(k))
    if k == 0:
        return []
    text = query if isinstance(query, str) else str(query)
    terms = fts_query.query_terms(text)
    if not terms:
        return dialect.list_range(db, k, filters) if filters.has_dates else []
    lean = dialect.lean_pool and _lean(tuning)
    rows, base = _read_pool(db, terms, k, filters, tuning, dialect, stats, lean)
    if not base:
        return []
    matched = set(base)
    matcher = TermMatcher(terms)
    if tuning.trees is not None:
        walk = tuning.trees.score
        rarity = _term_rarity(db, terms, filters, tuning, dialect, stats)
        features = _rank_features(rows, base, text, terms, tuning, rarity, _TREE_WEIGHED)
        scores = {
            seq: walk(values) for seq, values in _tree_features(rows, base, terms, features).items()
        }
    elif tuning.ranker_weights:
        weights = tuning.ranker_weights
        rarity = _term_rarity(db, terms, filters, tuning, dialect, stats)
        if linear_rank.supports(tuning, weights):
            scores = linear_rank.linear_scores(rows, base, terms, tuning, rarity, weights, matcher)
        else:
            scores = _linear_scores(rows, base, text, terms, tuning, rarity, weights)
    else:
        scores = _hand_scores(rows, base, text, terms, tuning)
    bound = search_bounds.applies(
        rows, base, tuning.ranker_share, tuning.bm25_margin, tuning.long_turn_words
    )
    if bound and tuning.ranker_share < 1.0:
        scores = search_bounds.mixed(scores, base, tuning.ranker_share)
    if tuning.diversity_weight:
        ranked = _diversify(scores, rows, k, tuning.diversity_weight)
    else:
        # Best first, ties to the older turn; ``bounded`` may read past the first k.
        ranked = search_bounds.best(scores, len(scores) if bound and tuning.bm25_margin >= 0 else k)
    if bound and tuning.bm25_margin >= 0:
        ranked = search_bounds.bounded(ranked, base, k, tuning.bm25_margin)
    ranked = [(seq, score) for seq, score in ranked[:k] if seq in rows]
    _read_hit_columns(db, rows, [seq for seq, _ in ranked], dialect)
    hits = []
    for seq, score in ranked:
        r = rows[seq]
        snippet = matcher.snippet(r[3])
        hits.append(
            Hit(r[0], r[1], r[5], r[6], r[7], r[2], r[8], score, snippet, r[4], seq in matched)
        )
    return hits


def _linear_scores(
    rows: dict[int, tuple[Any, ...]],
    base: dict[int, float],
    text: str,
    terms: list[str],
    tuning: SearchTuning,
    rarity: list[float] | None,
    weights: Sequence[float],
) -> dict[int, float]:
    """The learned linear ranker's score of each turn read, above 0, from its full
    ``RANK_FEATURES`` (the reference ``linear_rank.linear_scores`` must equal, and the path
    for what that does not cover)."""
    scores = {}
    features = _rank_features(rows, base, text, terms, tuning, rarity, weights)
    # The weighted sum in feature order, leaving out the features weighted 0 (adding
    # 0 * x changes no sum); the same sums as ``sum(w * x ...)``.
    weighed = [(i, w) for i, w in enumerate(weights) if w]
    for seq, values in features.items():
        total = 0.0
        for i, w in weighed:
            total += w * values[i]
        if total > 0:
            scores[seq] = total
    return scores


def search_features(
    db: Any,
    query: str,
    k: int,
    filters: SearchFilters,
    tuning: SearchTuning,
    dialect: SearchDialect,
    stats: TermStats | None = None,
    trees: bool = False,
) -> dict[int, tuple[float, ...]]:
    """``RANK_FEATURES`` (``TREE_FEATURES`` when ``trees``) of every turn a search for
    ``query`` reads (what a ranker is fitted on; ``bench/_ranker_fit.py``,
    ``bench/_tree_fit.py``); empty when nothing matches."""
    terms = fts_query.query_terms(query)
    if not terms or k <= 0:
        return {}
    rows, base = _read_pool(db, terms, k, filters, tuning, dialect, stats)
    if not base:
        return {}
    rarity = _term_rarity(db, terms, filters, tuning, dialect, stats)
    features = _rank_features(rows, base, query, terms, tuning, rarity)
    return _tree_features(rows, base, terms, features) if trees else features


def _tree_features(
    rows: dict[int, tuple[Any, ...]],
    base: dict[int, float],
    terms: list[str],
    features: dict[int, tuple[float, ...]],
) -> dict[int, tuple[float, ...]]:
    """``TREE_FEATURES``: each turn's first ``RANK_FEATURES`` and the four that follow them."""
    order = sorted(base, key=lambda seq: (-base[seq], seq))
    place = {seq: i / len(order) for i, seq in enumerate(order)}
    n = len(terms)
    out = {}
    for seq, values in features.items():
        row = rows[seq]
        words = len(row[3].split()) if row[3] else 0
        out[seq] = (
            *values[:_TREE_RANK],
            place.get(seq, 1.0),
            math.log1p(words),
            float(n),
            float(round(values[3] * n)),
        )
    return out


def _term_rarity(
    db: Any,
    terms: list[str],
    filters: SearchFilters,
    tuning: SearchTuning,
    dialect: SearchDialect,
    stats: TermStats | None,
) -> list[float] | None:
    """BM25's idf of each term over the searched agents' events (the whole log's for a
    search that names none) when ``term_rarity`` is ``"log"``; None (rarity among the turns
    read) otherwise."""
    if tuning.term_rarity != "log":
        return None
    docs, freqs = (stats or TermStats()).lookup(db, terms, dialect, filters.agent_id)
    return [max(math.log((docs - df + 0.5) / (df + 0.5)), 1e-6) for df in freqs]


def _read_pool(
    db: Any,
    terms: list[str],
    k: int,
    filters: SearchFilters,
    tuning: SearchTuning,
    dialect: SearchDialect,
    stats: TermStats | None = None,
    lean: bool = False,
) -> tuple[dict[int, tuple[Any, ...]], dict[int, float]]:
    """The BM25 candidates (``{seq: score}``) and, read once, the rows of the candidates and
    the turns beside them: the session each belongs to scores the neighbour signal, the
    text feeds the term features and the winners' hits. Each row is ``POOL_COLUMNS`` and,
    unless ``lean``, ``POOL_HIT_COLUMNS``."""
    limit = max(k, tuning.candidates)
    if dialect.cached_candidates is not None and stats is not None:
        base = dialect.cached_candidates(db, terms, limit, filters, tuning, stats)
    else:
        base = dialect.candidates(db, terms, limit, filters, tuning)
    if not base:
        return {}, {}
    pool, near, pool_params = dialect.near_from(list(base), _reach(tuning))
    columns = POOL_COLUMNS if lean else f"{POOL_COLUMNS}, {POOL_HIT_COLUMNS}"
    rows = {
        row[0]: row
        for row in db.execute(
            f"SELECT {columns} FROM {pool} WHERE {near}e.searchable = 1{dialect.sql(filters.sql)}",
            (*pool_params, *filters.params),
        ).fetchall()
    }
    return rows, base


def _lean(tuning: SearchTuning) -> bool:
    """Whether the ranking ``tuning`` asks for reads only ``POOL_COLUMNS`` of a turn: not
    the trees, the reference linear ranker or diversity, which read its time (the day
    features, the session-and-day key)."""
    if tuning.trees is not None or tuning.diversity_weight:
        return False
    weights = tuning.ranker_weights
    return not weights or linear_rank.supports(tuning, weights)


def _read_hit_columns(
    db: Any, rows: dict[int, tuple[Any, ...]], seqs: list[int], dialect: SearchDialect
) -> None:
    """The rows of ``seqs`` (a search's hits) in ``rows`` given ``POOL_HIT_COLUMNS`` too,
    where a lean pool read left them out: one statement for the top ``k``."""
    lean = [seq for seq in seqs if len(rows[seq]) == _POOL_WIDTH]
    if not lean:
        return
    where, params = dialect.seq_in("e.seq", lean)
    sql = f"SELECT {POOL_COLUMNS}, {POOL_HIT_COLUMNS} FROM events e WHERE {where}"
    for row in db.execute(sql, params).fetchall():
        rows[row[0]] = row


def _reach(tuning: SearchTuning) -> int:
    # The ranker's neighbour features, too, reach as far as ``neighbour_weights`` is long.
    return len(tuning.neighbour_weights)


def _hand_scores(
    rows: dict[int, tuple[Any, ...]],
    base: dict[int, float],
    text: str,
    terms: list[str],
    tuning: SearchTuning,
) -> dict[int, float]:
    """Each turn's bm25 after the term features, plus shares of its neighbours' (the
    ``SearchTuning`` formula)."""
    matcher = TermMatcher(terms)
    base = _rescored(rows, base, text, terms, tuning, matcher)
    shares = (
        _window_shares(rows, terms, _reach(tuning), None, matcher) if tuning.window_weight else {}
    )
    scores: dict[int, float] = {}
    for seq, row in rows.items():
        session = row[1]
        total = base.get(seq, 0.0)
        for distance, weight in enumerate(tuning.neighbour_weights, start=1):
            for other in (seq - distance, seq + distance):
                if other in base and other in rows and rows[other][1] == session:
                    total += weight * base[other]
        if shares:
            total *= 1.0 + tuning.window_weight * shares[seq][1]
        if total > 0:
            scores[seq] = total
    return scores


def _rescored(
    rows: dict[int, tuple[Any, ...]],
    base: dict[int, float],
    text: str,
    terms: list[str],
    tuning: SearchTuning,
    matcher: TermMatcher | None = None,
) -> dict[int, float]:
    """The candidates' bm25 after the switches that rescore a turn on its own text: term
    features, exact pieces, speaker match, feedback."""
    exact = fts_query.exact_pieces(text) if tuning.exact_weight else []
    if (len(terms) > 1 and (tuning.coverage_weight or tuning.proximity_weight)) or exact:
        base = _term_features(rows, base, terms, exact, tuning, matcher)
    if tuning.speaker_weight:
        base = _speaker_match(rows, base, terms, tuning.speaker_weight)
    if tuning.feedback_terms and tuning.feedback_docs and tuning.feedback_weight:
        base = _feedback(rows, base, terms, tuning)
    return base


def _window_shares(
    rows: dict[int, tuple[Any, ...]],
    terms: list[str],
    reach: int,
    rarity: list[float] | None = None,
    matcher: TermMatcher | None = None,
    beside: dict[int, list[tuple[int, int]]] | None = None,
) -> dict[int, tuple[float, float, float, float]]:
    """Per turn read: the share of the query's distinct terms it holds, and the share held
    by it and the turns up to ``reach`` places away in its session together (the turn seen
    as a passage: a question and its answer rarely repeat each other's words); then both
    again with each term weighted by its rarity: among the turns read (``RANK_FEATURES``),
    or as given (``_term_rarity``). Which terms a turn holds is a bit mask
    (``term_match``); a rarity sum adds its terms in ascending order."""
    matcher = matcher or TermMatcher(terms)
    masks = matcher.held_all([f"{row[3] or ''} {row[4] or ''}" for row in rows.values()])
    held = dict(zip(rows, masks, strict=True))
    n = len(terms)
    if rarity is None:
        holding = [0] * n
        for mask, times in Counter(held.values()).items():
            for which in mask_terms(mask):
                holding[which] += times
        rarity = [math.log((len(rows) + 1) / (h + 0.5)) for h in holding]
    total = sum(rarity) or 1.0
    weighed: dict[int, float] = {}

    def rare(mask: int) -> float:
        value = weighed.get(mask)
        if value is None:
            value = weighed[mask] = sum(rarity[i] for i in mask_terms(mask)) / total
        return value

    beside = _beside(rows, reach) if beside is None else beside
    out: dict[int, tuple[float, float, float, float]] = {}
    for seq, others in beside.items():
        own = window = held[seq]
        for _, other in others:
            window |= held[other]
        out[seq] = (own.bit_count() / n, window.bit_count() / n, rare(own), rare(window))
    return out


def _beside(rows: dict[int, tuple[Any, ...]], reach: int) -> dict[int, list[tuple[int, int]]]:
    """Per turn read, the turns read up to ``reach`` places before and after it in its
    session, as (distance, seq): the one before, then the one after, nearest first."""
    sessions = {seq: row[1] for seq, row in rows.items()}
    get = sessions.get
    return {
        seq: [
            (distance, other)
            for distance in range(1, reach + 1)
            for other in (seq - distance, seq + distance)
            if get(other) == session
        ]
        for seq, session in sessions.items()
    }


def _rank_features(
    rows: dict[int, tuple[Any, ...]],
    base: dict[int, float],
    text: str,
    terms: list[str],
    tuning: SearchTuning,
    rarity: list[float] | None = None,
    weights: Sequence[float] | None = None,
) -> dict[int, tuple[float, ...]]:
    """``RANK_FEATURES`` for every turn read; ``own``, the ``near`` sums, ``day`` and
    ``answers`` after the same rescoring switches as the hand formula. With ``weights``, a
    feature they weigh 0 (or do not reach) is left 0 rather than computed."""
    matcher = TermMatcher(terms)
    base = _rescored(rows, base, text, terms, tuning, matcher)
    top = max(base.values(), default=0.0) or 1.0
    reach = _reach(tuning)
    beside = _beside(rows, reach)
    shares = _window_shares(rows, terms, reach, rarity, matcher, beside)

    def wanted(index: int) -> bool:
        return weights is None or (index < len(weights) and weights[index] != 0)

    day_mass: dict[tuple[str, str], float] = {}
    for seq, score in base.items() if wanted(_DAY) else ():
        row = rows.get(seq)
        if row is not None:
            key = (row[1], row[8][:10])
            day_mass[key] = day_mass.get(key, 0.0) + score
    busiest = max(day_mass.values(), default=0.0) or 1.0
    asking = {
        seq: 1.0 if _ASKING.search(row[3] or "") else 0.0
        for seq, row in rows.items()
        if wanted(_ASKS) or (wanted(_ANSWERS) and seq in base)
    }
    dates = named_dates(text) if wanted(_ON_DAY) or wanted(_IN_MONTH) else None
    wanted_terms = set(terms)
    speakers: dict[str | None, float] = {}
    out: dict[int, tuple[float, ...]] = {}
    for seq, row in rows.items():
        session = row[1]
        near = [0.0, 0.0]
        for distance, other in beside[seq]:
            if distance <= 2 and other in base:
                near[distance - 1] += base[other] / top
        before = seq - 1
        answers = (
            base[before] / top * asking[before]
            if before in base and before in asking and rows[before][1] == session
            else 0.0
        )
        name = row[2]
        if name not in speakers:
            speakers[name] = (
                1.0 if name and wanted_terms.intersection(fts_query.tokens(name)) else 0.0
            )
        speaker = speakers[name]
        own, window, rare_own, rare_window = shares[seq]
        logged = row[8][:10]
        on_day = 1.0 if dates and logged in dates.days else 0.0
        in_month = 1.0 if dates and logged[:7] in dates.months else 0.0
        out[seq] = (
            base.get(seq, 0.0) / top, near[0], near[1], own, window, speaker,
            rare_own, rare_window, day_mass.get((session, logged), 0.0) / busiest,
            asking.get(seq, 0.0), answers, on_day, in_month,
        )  # fmt: skip
    return out


def _feedback(
    rows: dict[int, tuple[Any, ...]],
    base: dict[int, float],
    terms: list[str],
    tuning: SearchTuning,
) -> dict[int, float]:
    """RM3-style pseudo-relevance feedback, kept to the turns already read: the words the
    best ``feedback_docs`` candidates use most (each one's term frequencies over its
    length, weighted by its share of their scores) form an expansion of
    ``feedback_terms`` words, and every turn read (candidates and the turns beside them)
    scores ``(1 - w) * score + w * top score * (share of the expansion's weight it
    holds)``. A reply often names what the question only circles. Re-ranking what is read
    rather than running the expansion as a second full-text query keeps its cost flat: an
    expansion is made of the commonest words of a few turns, and matching those across a
    large log costs a hundred times a plain search."""
    top = sorted(base.items(), key=lambda item: (-item[1], item[0]))[: tuning.feedback_docs]
    total = sum(score for _, score in top) or 1.0
    prefixes = tuple(fts_query.stem_prefix(t) for t in terms)
    words_of: dict[int, set[str]] = {}
    weights: dict[str, float] = {}
    for seq, score in top:
        if seq not in rows:
            continue
        words = _feedback_words(rows[seq], prefixes)
        words_of[seq] = set(words)
        if not words:
            continue
        share = score / total / len(words)
        for word in words:
            weights[word] = weights.get(word, 0.0) + share
    expansion = sorted(weights, key=lambda w: (-weights[w], w))[: tuning.feedback_terms]
    if not expansion:
        return base
    mass = sum(weights[w] for w in expansion)
    best = top[0][1]
    mix = tuning.feedback_weight
    out: dict[int, float] = {}
    for seq, row in rows.items():
        held = words_of.get(seq)
        if held is None:
            held = set(_feedback_words(row, prefixes))
        share = sum(weights[w] for w in expansion if w in held) / mass
        score = (1.0 - mix) * base.get(seq, 0.0) + mix * best * share
        if score > 0:
            out[seq] = score
    return out


def _feedback_words(row: tuple[Any, ...], prefixes: tuple[str, ...]) -> list[str]:
    return [
        w
        for w in fts_query.tokens(f"{row[3] or ''} {row[4] or ''}")
        if len(w) > 2 and w not in fts_query.STOP_WORDS and not w.startswith(prefixes)
    ]


def _term_features(
    rows: dict[int, tuple[Any, ...]],
    base: dict[int, float],
    terms: list[str],
    exact: list[str],
    tuning: SearchTuning,
    matcher: TermMatcher | None = None,
) -> dict[int, float]:
    """``base`` rescored by how many distinct query terms each candidate holds, how close
    together two of them stand, and how many of the query's exact pieces (numbers, dates,
    versions, identifiers) it holds verbatim. A term is found by its stem prefix (the
    snippet's rule), a stand-in for FTS5's porter stemmer that needs no second index."""
    matcher = matcher or TermMatcher(terms)
    spread = max(1, len(terms) - 1)
    features = len(terms) > 1 and (tuning.coverage_weight or tuning.proximity_weight)
    verbatim = fts_query.exact_pattern(exact) if exact else None
    out = dict(base)
    for seq, score in base.items():
        row = rows.get(seq)
        if row is None:
            continue
        text = f"{row[3] or ''} {row[4] or ''}"
        factor = 1.0
        if features:
            positions = matcher.positions(text)  # (token index, term index)
            held = len({which for _, which in positions})
            if held:
                factor += tuning.coverage_weight * (held - 1) / spread
            if held > 1 and tuning.proximity_weight:
                # The closest two different terms are always next to each other here.
                gap = min(b[0] - a[0] for a, b in itertools.pairwise(positions) if a[1] != b[1])
                factor += tuning.proximity_weight / gap
        if verbatim is not None:
            found = {m.casefold() for m in verbatim.findall(text)}
            factor += tuning.exact_weight * len(found) / len(exact)
        out[seq] = score * factor
    return out


def _speaker_match(
    rows: dict[int, tuple[Any, ...]], base: dict[int, float], terms: list[str], weight: float
) -> dict[int, float]:
    """A candidate spoken (or run) by someone the query names counts ``1 + weight`` times:
    "what did Ana say about X" is about Ana's turns, not the ones that mention her."""
    wanted = set(terms)
    out = dict(base)
    for seq, score in base.items():
        row = rows.get(seq)
        if row is not None and row[2] and wanted.intersection(fts_query.tokens(row[2])):
            out[seq] = score * (1.0 + weight)
    return out


def _diversify(
    scores: dict[int, float], rows: dict[int, tuple[Any, ...]], k: int, weight: float
) -> list[tuple[int, float]]:
    """The top ``k`` picked greedily, MMR-style: a turn's score is divided by
    ``1 + weight * n`` where ``n`` counts the turns already picked from its session and day,
    so evidence scattered over several days is not crowded out by one day's cluster."""
    remaining = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    picked: list[tuple[int, float]] = []
    taken: dict[tuple[str, str], int] = {}
    while remaining and len(picked) < k:
        best = 0
        best_value = -1.0
        for i, (seq, score) in enumerate(remaining):
            if score <= best_value:
                break  # sorted: no later turn can beat the best penalised score
            key = (rows[seq][1], rows[seq][8][:10])
            value = score / (1.0 + weight * taken.get(key, 0))
            if value > best_value:
                best, best_value = i, value
        seq, score = remaining.pop(best)
        key = (rows[seq][1], rows[seq][8][:10])
        taken[key] = taken.get(key, 0) + 1
        picked.append((seq, best_value))
    return picked


def neighbour_seqs(
    db: Any,
    hits: Sequence[Hit],
    dialect: SearchDialect,
    reach: int = 1,
    before_seq: int | None = None,
) -> list[Hit]:
    """``hits`` with ``neighbours`` set: up to ``reach`` searchable turns on each side in
    the same session (older than ``before_seq`` when given), so a caller can read the
    question a hit answers or the reply it got without searching again."""
    reach = max(0, sqlite_int(reach))
    if reach == 0:
        return list(hits)
    mark = dialect.mark
    bound = "" if before_seq is None else f" AND seq < {mark}"
    extra: tuple[Any, ...] = () if before_seq is None else (sqlite_int(before_seq),)
    filled = []
    for hit in hits:
        rows: list[Any] = []
        for op, order in (("<", "DESC"), (">", "ASC")):
            rows += db.execute(
                f"SELECT seq FROM events WHERE session_id = {mark} AND seq {op} {mark}"
                f" AND searchable = 1{bound} ORDER BY seq {order} LIMIT {mark}",
                (hit.session_id, hit.seq, *extra, reach),
            ).fetchall()
        filled.append(replace(hit, neighbours=tuple(sorted(row[0] for row in rows))))
    return filled
