"""The stored timestamp form (``timeutil.format_ts``)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scroll_core.timeutil import _FORMAT, _stored, format_ts, parse_ts


def test_stored_timestamps_are_strftimes_fixed_form_in_every_year():
    """``format_ts`` writes ``isoformat``'s text from year 1000 on: the same characters as
    the stored ``strftime`` form, checked across the calendar and below year 1000."""
    rng = random.Random(3)
    start = datetime(1, 1, 1, tzinfo=UTC)
    for _ in range(20_000):
        moment = start + timedelta(
            seconds=rng.randrange(315_537_897_599), microseconds=rng.randrange(10**6)
        )
        assert format_ts(moment) == moment.strftime(_FORMAT)
    assert format_ts("2026-01-01 00:00:05+02:00") == "2025-12-31T22:00:05.000000Z"


_STAMP_TEXT = st.builds(
    lambda dt, sep, spec, zone, pad: pad + dt.isoformat(sep=sep, timespec=spec) + zone + pad,
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
    st.sampled_from(["T", " "]),
    st.sampled_from(["auto", "seconds", "milliseconds", "microseconds", "minutes"]),
    st.sampled_from(["", "Z", "z", "+00:00", "-05:30", "+14:00", "+0200"]),
    st.sampled_from(["", " ", "\t"]),
)


@settings(max_examples=500, deadline=None)
@given(_STAMP_TEXT | st.dates().map(str) | st.text(max_size=30))
def test_the_string_fast_path_stores_what_parse_ts_gives(text):
    """``format_ts`` reads most strings straight with ``fromisoformat``; it must store what
    the general path (``parse_ts``) gives, or refuse the same strings."""
    try:
        expected = _stored(parse_ts(text))
    except ValueError:
        with pytest.raises(ValueError):
            format_ts(text)
    else:
        assert format_ts(text) == expected
