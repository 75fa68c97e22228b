"""TextRelay: a streaming client sees exactly the headline-stripped text, however the upstream
cuts it into pieces, and never a piece of the headline."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from scroll_core.gateway._relay import TextRelay
from scroll_core.headlines import OPEN, parse_headline

HEADLINE = "⟦fox | status: told; next: wait | anchors: fox, dog⟧"

texts = st.one_of(
    st.text(alphabet="ab \n⟦⟧|:;", max_size=40),
    st.builds(
        lambda body, tail: f"{body}\n{HEADLINE}{tail}",
        st.text(alphabet="ab \n", max_size=30),
        st.sampled_from(["", "\n", "  ", "\nafter"]),
    ),
)


def _cut(text: str, cuts: list[int]) -> list[str]:
    points = sorted({min(c, len(text)) for c in cuts})
    bounds = [0, *points, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


@given(texts, st.lists(st.integers(min_value=0, max_value=60), max_size=8))
def test_the_client_gets_exactly_the_stripped_text_however_it_is_cut(text, cuts):
    sent: list[str] = []
    relay = TextRelay(sent.append)
    for piece in _cut(text, cuts):
        relay.feed(piece)
    visible = parse_headline(text).text
    relay.settle(visible)
    assert "".join(sent) == relay.shown == visible


def test_no_piece_of_a_headline_goes_out_before_the_reply_is_complete():
    sent: list[str] = []
    relay = TextRelay(sent.append)
    for piece in ["The fox ", "ran.\n", HEADLINE[:5], HEADLINE[5:]]:
        relay.feed(piece)
    assert "".join(sent) == "The fox ran." and not any(OPEN in s for s in sent)
    relay.settle(parse_headline("The fox ran.\n" + HEADLINE).text)
    assert relay.shown == "The fox ran."


def test_replies_of_successive_steps_are_joined_by_a_blank_line():
    sent: list[str] = []
    relay = TextRelay(sent.append)
    relay.feed("Let me look.")
    relay.settle("Let me look.")
    relay.settle("")  # a step that wrote nothing adds nothing
    relay.feed("Found it.")
    relay.settle("Found it.")
    assert relay.shown == "Let me look.\n\nFound it." == "".join(sent)


@given(texts, st.lists(st.integers(min_value=0, max_value=60), max_size=8), st.booleans())
def test_a_reply_settled_early_still_gives_the_client_the_stripped_text_once(text, cuts, more):
    """Settled as a client's tool call opens (its text complete), then at the reply's end:
    the client has the stripped text once; text arriving after the call waits for the end."""
    sent: list[str] = []
    relay = TextRelay(sent.append)
    for piece in _cut(text, cuts):
        relay.feed(piece)
    relay.settle_early()
    assert "".join(sent) == parse_headline(text).text
    late = " and more" if more else ""
    relay.feed(late)
    assert "".join(sent) == parse_headline(text).text  # held until the end
    visible = parse_headline(text + late).text
    relay.settle(visible)
    assert relay.shown == "".join(sent)
    assert relay.shown == visible or not visible.startswith(parse_headline(text).text)
