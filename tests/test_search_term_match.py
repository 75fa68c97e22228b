"""``term_match.TermMatcher``: the ASCII fast path finds exactly the terms the
case-insensitive prefix pattern finds (the ranker's features must not move)."""

from __future__ import annotations

import random

from scroll_core.store import fts_query
from scroll_core.store.term_match import TermMatcher, mask_terms


def pattern_held(terms: list[str], text: str) -> int:
    """The pattern path, written out: each word the term pattern finds counts for the first
    term whose stem prefix its case-folded form starts with."""
    prefixes = [fts_query.stem_prefix(t) for t in terms]
    mask = 0
    for word in fts_query.term_words(terms).findall(text):
        folded = word.casefold()
        for i, prefix in enumerate(prefixes):
            if folded.startswith(prefix):
                mask |= 1 << i
                break
    return mask


def token_positions(terms: list[str], text: str) -> list[tuple[int, int]]:
    prefixes = [fts_query.stem_prefix(t) for t in terms]
    out = []
    for at, token in enumerate(fts_query.tokens(text)):
        for i, prefix in enumerate(prefixes):
            if token.startswith(prefix):
                out.append((at, i))
                break
    return out


WORDS = ["hiking", "Hiked", "HIKE", "paint", "painter", "un_painted", "x-ray", "42nd", "a1b2"]
UNICODE = ["Straße", "İstanbul", "ſtrasse", "ὀδυσσεύς", "KELVIN", "ﬁne", "naïve"]


def random_texts(rng: random.Random, words: list[str], n: int) -> list[str]:
    seps = [" ", ", ", "\n", "_", "-", "'", "  (", ".", ""]
    return [
        "".join(rng.choice(words) + rng.choice(seps) for _ in range(rng.randint(0, 12)))
        for _ in range(n)
    ]


def test_fast_path_matches_the_pattern_on_ascii_and_unicode_text():
    rng = random.Random(5)
    term_sets = [
        ["hiking"],
        ["paint", "hike"],
        ["painted", "x", "42nd"],
        ["a1b2", "ray", "hiked"],
        ["hik", "hiking"],  # one prefix starts the other: the first term takes the word
        ["strasse", "istanbul"],
        ["ſtrasse", "kelvin"],
    ]
    for terms in term_sets:
        texts = random_texts(rng, WORDS, 40) + random_texts(rng, WORDS + UNICODE, 40)
        matcher = TermMatcher(terms)
        assert matcher.held_all(texts) == [pattern_held(terms, t) for t in texts], terms
        for text in texts:
            assert matcher.positions(text) == token_positions(terms, text), (terms, text)


def test_a_prefix_is_found_only_at_a_word_start_and_per_turn():
    matcher = TermMatcher(["paint", "ray"])
    texts = ["repainted the room", "Painting", "x-ray", "array", "", "spray paint"]
    assert matcher.held_all(texts) == [0, 1, 2, 0, 0, 1]
    assert mask_terms(0b1011) == [0, 1, 3]


def test_the_snippet_is_make_snippets_own():
    rng = random.Random(9)
    for terms in (["hiking"], ["paint", "hike"], ["ray", "42nd", "x"], ["zzz"], ["straße"]):
        matcher = TermMatcher(terms)
        for text in random_texts(rng, WORDS, 60) + random_texts(rng, WORDS + UNICODE, 20):
            long = text * 8  # past the snippet's width, so the window moves
            for content in (text, long):
                assert matcher.snippet(content) == fts_query.make_snippet(content, terms)
