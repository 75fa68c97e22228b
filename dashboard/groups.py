"""Channels group names shared by the span sink (sender) and the consumers (receivers).

Group names may only hold ASCII letters, digits, hyphens, underscores and periods and
must stay under 100 characters, while session ids carry ':' and '/' ("locomo:conv-26"),
so a session's group is named by a short hash of its id.

Messages sent to these groups:
    {"type": "spans.finished", "spans": [<SpanRecord dict>, ...],  SPANS and the session group:
     "rows": [<tr>, ...], "frame": <tbody>}                      a batch, oldest first, rendered
                                                                 once (dashboard.span_frames)
    {"type": "span.finished", "span": <SpanRecord dict>}        one span, from older senders
    {"type": "alert.changed", "alert": <Alert dict>}             ALERTS
    {"type": "session.changed", "session_id": ..., "summary": {...}}  SPANS and the session group
    {"type": "kernels.changed"}                                  KERNELS (the gateway's kernels)
"""

from __future__ import annotations

import hashlib

__all__ = ["ALERTS", "KERNELS", "SPANS", "session_group", "session_safe_id"]

SPANS = "scroll.spans"
ALERTS = "scroll.alerts"
KERNELS = "scroll.kernels"
SESSION_PREFIX = "scroll.session."


def session_safe_id(session_id: str) -> str:
    """The first 16 hex digits of sha1(session_id): safe in a group name."""
    return hashlib.sha1(session_id.encode("utf-8")).hexdigest()[:16]


def session_group(session_id: str) -> str:
    """The group carrying the spans of one session: ``scroll.session.<sha1[:16]>``."""
    return SESSION_PREFIX + session_safe_id(session_id)
