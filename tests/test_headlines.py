"""Headline lines: parsed, stored, stripped; missing and malformed ones recorded as such."""

from __future__ import annotations

import pytest

from scroll_core.headlines import (
    Headline,
    format_headline,
    parse_headline,
    shorten,
    unwrap,
)

GOOD = (
    "⟦find the flight | status: found LH400 on 12 May; next: confirm seat"
    " | anchors: LH400, Frankfurt⟧"
)


def test_it_parses_and_strips_a_well_formed_headline():
    parsed = parse_headline(f"The flight is LH400.\n\n{GOOD}\n")
    assert parsed.quality == "ok"
    assert parsed.text == "The flight is LH400."
    assert parsed.headline == Headline(
        task="find the flight",
        status="found LH400 on 12 May",
        next="confirm seat",
        anchors=("LH400", "Frankfurt"),
    )
    assert parsed.raw == GOOD
    assert parsed.stored == GOOD


def test_a_response_without_a_headline_is_missing_and_unchanged():
    parsed = parse_headline("Just an answer.\nOn two lines.")
    assert (parsed.quality, parsed.headline, parsed.raw) == ("missing", None, None)
    assert parsed.text == "Just an answer.\nOn two lines."
    assert parse_headline("").quality == "missing"


@pytest.mark.parametrize(
    "line",
    [
        "⟦only a task⟧",
        "⟦task | status: done | anchors: x⟧",
        "⟦task | status: done; next: go⟧",
        "⟦ | status: done; next: go | anchors: x⟧",
        "⟦task | status: done; next: go | anchors: x",
        "⟦task | done; go | x⟧",
    ],
)
def test_a_malformed_headline_is_recorded_and_still_stripped(line):
    parsed = parse_headline(f"Answer.\n{line}")
    assert parsed.quality == "malformed"
    assert parsed.headline is None
    assert parsed.stored is None
    assert parsed.text == "Answer."
    assert parsed.raw == line


def test_the_last_headline_line_wins_and_inline_text_is_kept():
    parsed = parse_headline(f"{GOOD}\nmore text ⟦t | status: s; next: n | anchors: a⟧")
    assert parsed.headline is not None and parsed.headline.task == "t"
    assert parsed.text == f"{GOOD}\nmore text"


def test_format_round_trips_and_escapes_separators():
    line = format_headline("a | b", "x; y", "z", ["p, q", "r"])
    parsed = parse_headline(line)
    assert parsed.quality == "ok"
    assert parsed.headline is not None
    assert parsed.headline.format() == line
    assert parsed.headline.anchors == ("p/ q", "r")
    assert parse_headline(GOOD).headline.format() == GOOD  # type: ignore[union-attr]


def test_shorten_and_unwrap():
    assert shorten("abcdef", 10) == "abcdef"
    assert shorten("abcdefghij", 5) == "abcd…"
    assert unwrap(GOOD).startswith("find the flight")
    assert not unwrap(GOOD).endswith("⟧")
