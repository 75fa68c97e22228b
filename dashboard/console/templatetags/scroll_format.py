"""One timestamp format on every page: ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (UTC, milliseconds).

Event Log rows carry ISO strings ending in ``Z``, Django models aware datetimes that
``|date:"c"`` would print with ``+00:00``, spans nanoseconds; ``|ts`` prints them alike.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from typing import Any

from django import template
from django.core.serializers.json import DjangoJSONEncoder

from scroll_core.timeutil import parse_ts

register = template.Library()


def format_moment(value: str | datetime | date | int | float | None) -> str:
    """``value`` (an ISO string, a datetime, or nanoseconds since the epoch) in the console's
    one format; "" for nothing, the text itself when it is not a timestamp."""
    if value is None or value == "":
        return ""
    try:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            moment = datetime.fromtimestamp(value / 1e9, tz=UTC)
        else:
            moment = parse_ts(value)  # type: ignore[arg-type]
    except (ValueError, OverflowError, OSError):
        return str(value)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@register.filter(name="ts")
def ts(value: str | datetime | date | int | float | None) -> str:
    return format_moment(value)


@register.filter(name="figure_json")
def figure_json(value: Any) -> str:
    """A chart figure as JSON for a ``data-json`` attribute (autoescaped there): live frames
    can carry it, where htmx strips the ``<script>`` a ``json_script`` would use."""
    return json.dumps(value, cls=DjangoJSONEncoder, separators=(",", ":"))


@register.filter(name="first_line")
def first_line(value: Any) -> str:
    """The first non-blank line of ``value`` (a run's error: its summary; the rest is in a
    ``<details>``)."""
    return next((line.strip() for line in str(value or "").splitlines() if line.strip()), "")
