"""Turning arbitrary user or model text into a safe FTS5 MATCH expression.

Any string is a valid query: text is split the way FTS5's unicode61 tokenizer splits it,
stop words are dropped so a question does not match every row, and every remaining term
is quoted, so operators, quotes, parentheses and column filters in the input are only ever
words. Terms are OR-ed; BM25 does the ranking.
"""

from __future__ import annotations

import functools
import re

__all__ = [
    "MAX_TERMS",
    "STOP_WORDS",
    "WORDS",
    "exact_pattern",
    "exact_pieces",
    "make_snippet",
    "match_expression",
    "query_terms",
    "term_words",
]

# A longer query adds cost without adding ranking signal; keep the first distinct terms.
MAX_TERMS = 48

# Characters of content shown around the first match in a search hit.
SNIPPET_CHARS = 160

# unicode61 keeps letters, numbers and private-use characters; everything else separates.
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
# The same, public: the words of a text as FTS5's unicode61 splits them (not case-folded).
WORDS = _TOKEN

STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are aren't as at be because been
    before being below between both but by can cannot could did didn do does doesn doing
    don down during each few for from further had hadn has hasn have haven having he her
    here hers herself him himself his how i if in into is isn it its itself just ll me
    more most my myself no nor not now of off on once only or other ought our ours
    ourselves out over own re s same shan she should shouldn so some such t than that the
    their theirs them themselves then there these they this those through to too under
    until up ve very was wasn we were weren what when where which while who whom why will
    with won would wouldn you your yours yourself yourselves d m o y ain did does also
    ever many much might must shall may get got tell told say said please
    """.split()
)


def query_terms(query: str) -> list[str]:
    """Distinct lowercase terms of ``query`` without stop words (all of them if only stop
    words remain), at most MAX_TERMS, in order of first appearance."""
    words = [w.casefold() for w in _TOKEN.findall(query)]
    kept = [w for w in words if w not in STOP_WORDS]
    seen: dict[str, None] = {}
    for word in kept or words:
        seen.setdefault(word, None)
        if len(seen) >= MAX_TERMS:
            break
    return list(seen)


def quote_term(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def match_expression(terms: list[str]) -> str:
    """An FTS5 expression matching any of ``terms`` (empty string for no terms)."""
    return " OR ".join(quote_term(t) for t in terms)


def tokens(text: str) -> list[str]:
    """``text`` split and case-folded the way FTS5's unicode61 tokenizer does it."""
    return [w.casefold() for w in _TOKEN.findall(text)]


def stem_prefix(term: str) -> str:
    # A crude stand-in for the porter stemmer, for highlighting and for the term features
    # read from a candidate's text: "hiking" and "hiked" both start with "hik". Which rows
    # match, and their bm25, always come from FTS5's own porter tokenizer.
    return term if len(term) <= 4 else term[: max(4, len(term) - 3)]


# A whitespace-separated piece of a query, less the punctuation that ends a sentence or
# wraps a quote, is exact-looking when it holds a digit, or letters joined by ``._-/:@#``:
# "2023", "3:30", "v1.2.3", "foo_bar.py", "user@host". FTS5 splits those into words; the
# verbatim piece is the stronger evidence.
_PIECE_EDGE = ".,;:!?\"'`()[]{}<>"
_JOINED = re.compile(r"[^\W_][._\-/:@#][^\W_]")


def exact_pieces(query: str) -> list[str]:
    """Distinct case-folded exact-looking pieces of ``query`` (see above), in order."""
    seen: dict[str, None] = {}
    for raw in query.split():
        piece = raw.strip(_PIECE_EDGE).casefold()
        if piece and (any(c.isdigit() for c in piece) or _JOINED.search(piece)):
            seen.setdefault(piece, None)
        if len(seen) >= MAX_TERMS:
            break
    return list(seen)


def exact_pattern(pieces: list[str]) -> re.Pattern[str]:
    """A case-insensitive pattern finding any of ``pieces`` not inside a longer word."""
    alternatives = "|".join(re.escape(p) for p in sorted(pieces, key=len, reverse=True))
    return re.compile(rf"(?<![^\W_])(?:{alternatives})(?![^\W_])", re.IGNORECASE)


def term_words(terms: list[str]) -> re.Pattern[str]:
    """A case-insensitive pattern finding the words that start with a term's stem prefix
    (compiled once per set of terms: the snippet and the ranker's features share it)."""
    return _term_words(tuple(sorted(set(terms), key=lambda t: (-len(t), t))))


@functools.lru_cache(maxsize=256)
def _term_words(terms: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(stem_prefix(t)) for t in terms)
    return re.compile(rf"(?<![^\W_])(?:{alternatives})[^\W_]*", re.IGNORECASE)


def make_snippet(content: str, terms: list[str], width: int = SNIPPET_CHARS) -> str:
    """A window of ``content`` around the first query term, matches in [brackets]."""
    if not terms:
        return content[:width]
    pattern = term_words(terms)
    first = pattern.search(content)
    if first is None:
        return content[:width] + ("…" if len(content) > width else "")
    start = max(0, first.start() - width // 3)
    end = min(len(content), start + width)
    window = pattern.sub(lambda m: f"[{m.group(0)}]", content[start:end])
    return ("…" if start > 0 else "") + window + ("…" if end < len(content) else "")
