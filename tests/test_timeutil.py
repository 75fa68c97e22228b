"""The stored timestamp form (``timeutil.format_ts``)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from scroll_core.timeutil import _FORMAT, format_ts


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
