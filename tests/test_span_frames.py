"""dashboard.span_frames: a row's links are the URLs ``reverse`` gives, and a batch's frame
holds its rows newest first in one body."""

from __future__ import annotations

import pytest
from django.urls import NoReverseMatch, get_script_prefix, reverse, set_script_prefix

from dashboard.span_frames import link, span_frame, spans_message

VALUES = [
    "0123456789abcdef", "ab" * 16, "locomo:conv-26", "bench:s001", "run:1", "a.b~c_d-e",
    ".", "..", "...", "a..", "q&x", "é", "with space", "a/b", "100%", "<b>", "x?y=1#z",
]  # fmt: skip


@pytest.mark.parametrize("name", ["span", "trace", "session"])
@pytest.mark.parametrize("prefix", ["/", "/console/"])
def test_a_link_is_the_url_reverse_gives(name, prefix):
    saved = get_script_prefix()
    set_script_prefix(prefix)
    try:
        for value in VALUES:
            try:
                expected = reverse(name, args=[value])
            except NoReverseMatch:
                with pytest.raises(NoReverseMatch):
                    link(name, value)
                continue
            assert link(name, value) == expected, value
    finally:
        set_script_prefix(saved)


def test_a_frame_holds_its_rows_newest_first_in_one_body():
    rows = ["<tr id=1></tr>", "<tr id=2></tr>", "<tr id=3></tr>"]
    frame = span_frame(rows)
    assert frame == '<tbody hx-swap-oob="afterbegin:#span-rows">' + "".join(rows[::-1]) + "</tbody>"


def test_a_message_needs_a_row_for_each_span():
    with pytest.raises(ValueError, match="1 rows for 2 spans"):
        spans_message([{"span_id": "a"}, {"span_id": "b"}], ["<tr></tr>"])
