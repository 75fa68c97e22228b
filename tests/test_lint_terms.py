"""The lint's content terms (scroll_core.lint.terms): stemmed, stop words dropped, and the
same answer from the memo as from a fresh count, for as many texts as the memo holds."""

from __future__ import annotations

from scroll_core.lint import terms as terms_module
from scroll_core.lint.terms import terms


def test_terms_are_stemmed_content_words():
    assert terms("Painting the paints, moved and moving") == {"paint", "mov"}
    assert terms("") == frozenset() and terms(None) == frozenset()


def test_a_remembered_text_gives_the_same_terms_and_the_memo_stays_bounded(monkeypatch):
    monkeypatch.setattr(terms_module, "CACHED_TEXTS", 3)
    terms_module._cache.clear()
    texts = [f"unique{i} kitchen renovation quotes" for i in range(5)]
    first = [terms(t) for t in texts]
    assert len(terms_module._cache) == 3  # the oldest two forgotten
    assert [terms(t) for t in texts] == first  # remembered or counted again: the same
    expected = {"unique1", "kitchen", "renovation", "quot"}
    assert terms("unique1 kitchen renovation quotes") == expected
    # Two texts that differ only past what a short key would read are told apart.
    long_a, long_b = "x " * 5000 + "alpha", "x " * 5000 + "bravo"
    assert terms(long_a) == {"alpha"} and terms(long_b) == {"bravo"}
