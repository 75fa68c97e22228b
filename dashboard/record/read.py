"""Reading the record back: a call's exact request bytes, its messages, and the difference
from the call before (see ``scroll_core.wire.encoding``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from dashboard.record.models import WireBlob, WireCall
from scroll_core import wire

__all__ = [
    "RecordedCall",
    "has_record",
    "message_digests",
    "recorded_call",
    "session_calls",
]


def has_record(session_id: str) -> bool:
    return WireCall.objects.filter(session_id=session_id).exists()


def session_calls(session_id: str) -> list[WireCall]:
    """The session's calls in order, without their requests' content."""
    return list(WireCall.objects.filter(session_id=session_id).order_by("index"))


def _chain(session_id: str, index: int) -> list[WireCall]:
    """Rows from the last keyframe at or before ``index`` up to it."""
    start = (
        WireCall.objects.filter(session_id=session_id, index__lte=index, keyframe=True)
        .order_by("-index")
        .values_list("index", flat=True)
        .first()
    )
    rows = WireCall.objects.filter(session_id=session_id, index__lte=index)
    if start is not None:
        rows = rows.filter(index__gte=start)
    return list(rows.order_by("index"))


def _digests_along(rows: list[WireCall]) -> list[list[str] | None]:
    out: list[list[str] | None] = []
    previous: list[str] | None = None
    for row in rows:
        digests: list[str] | None = None
        for _name, kind, item in row.request:
            if kind == "m":
                digests = wire.expand_messages(item, previous)
        if row.encoding != "raw":
            previous = digests or []
        out.append(digests)
    return out


def message_digests(session_id: str, index: int) -> list[str]:
    """The message digests of call ``index`` (empty for a body kept whole)."""
    rows = _chain(session_id, index)
    if not rows or rows[-1].index != index:
        raise wire.RecordDecodeError(f"{session_id} has no recorded call {index}")
    return _digests_along(rows)[-1] or []


@dataclass
class RecordedCall:
    """One recorded call read back: its row, the exact body sent, the body parsed, its
    messages, and which of them are new since the call before (by position) and how many
    of the previous call's are gone."""

    row: WireCall
    body: bytes
    request: dict[str, Any] | None
    messages: list[Any] = field(default_factory=list)
    new_positions: list[int] = field(default_factory=list)
    dropped: int = 0

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def recorded_call(session_id: str, index: int) -> RecordedCall:
    """Call ``index`` of the session, decoded; ``RecordDecodeError`` if there is none."""
    rows = _chain(session_id, index)
    if not rows or rows[-1].index != index:
        raise wire.RecordDecodeError(f"{session_id} has no recorded call {index}")
    along = _digests_along(rows)
    row, digests = rows[-1], along[-1] or []
    before = along[-2] if len(along) > 1 else None
    if before is None and index > 0 and rows[0].index == index:
        # A keyframe: the call before is in the previous chain.
        try:
            before = message_digests(session_id, index - 1)
        except wire.RecordDecodeError:
            before = None
    wanted = set(digests) | {item for _n, kind, item in row.request if kind == "b"}
    blobs = dict(WireBlob.objects.filter(digest__in=list(wanted)).values_list("digest", "body"))
    body = wire.decode(row.encoding, row.request, blobs, digests)
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    messages = [json.loads(blobs[d]) for d in digests if d in blobs]
    had = set(before or ())
    new_positions = [i for i, d in enumerate(digests) if d not in had] if before is not None else []
    kept = set(digests)
    dropped = sum(1 for d in (before or ()) if d not in kept)
    return RecordedCall(row, body, parsed if isinstance(parsed, dict) else None, messages,
                        new_positions, dropped)  # fmt: skip
