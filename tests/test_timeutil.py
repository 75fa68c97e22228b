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


def _as_the_general_path(text):
    """``format_ts(text)`` stores what ``parse_ts`` gives, or both refuse ``text``."""
    try:
        expected = _stored(parse_ts(text))
    except ValueError:
        with pytest.raises(ValueError):
            format_ts(text)
    else:
        assert format_ts(text) == expected


@settings(max_examples=500, deadline=None)
@given(_STAMP_TEXT | st.dates().map(str) | st.text(max_size=30))
def test_the_string_fast_path_stores_what_parse_ts_gives(text):
    """``format_ts`` reads most strings straight with ``fromisoformat``; it must store what
    the general path (``parse_ts``) gives, or refuse the same strings."""
    _as_the_general_path(text)


def test_a_stamp_already_in_the_stored_shape_keeps_its_characters():
    """Strings already written the stored way (``Z`` or ``+00:00``, whole seconds or six
    digits of them) are stored as their own characters, and only once ``fromisoformat``
    accepts them: an impossible date is still refused, and other forms still converted."""
    assert format_ts("2026-01-01T00:00:07Z") == "2026-01-01T00:00:07.000000Z"
    assert format_ts("2026-01-01T00:00:07.123456+00:00") == "2026-01-01T00:00:07.123456Z"
    assert format_ts("1000-01-01T00:00:00Z") == "1000-01-01T00:00:00.000000Z"
    assert format_ts("0999-12-31T23:59:59Z") == _stored(parse_ts("0999-12-31T23:59:59Z"))
    assert format_ts("2026-01-01T00:00:07.123Z") == "2026-01-01T00:00:07.123000Z"
    assert format_ts("2026-01-01T00:00:07+01:00") == "2025-12-31T23:00:07.000000Z"
    for edge in ("2026-01-01T24:00:00Z", "2026-12-31T23:59:59.999999+00:00"):
        _as_the_general_path(edge)
    for bad in ("2026-02-30T00:00:07Z", "2026-01-01T24:00:61Z", "2026-13-01T00:00:00Z"):
        with pytest.raises(ValueError):
            format_ts(bad)
