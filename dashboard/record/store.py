"""Writing captured calls (``scroll_core.wire.WireCall``) into the record.

Calls are numbered per session in the order they are stored. Each request is encoded against
the previous call of its session (its message digests are cached here per session, and read
back from the record after a restart), every ``KEYFRAME_EVERY``-th call whole; blobs already
stored are not written again.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections import OrderedDict
from collections.abc import Iterable

from django.db import transaction
from django.db.models import Max

from dashboard.bulk_insert import insert_rows
from dashboard.record.models import WireBlob, WireCall
from dashboard.record.read import message_digests
from scroll_core import wire

__all__ = ["forget", "store_calls"]

# Sessions whose last call's message digests are kept in memory (a miss reads the record).
_CACHED_SESSIONS = 256
_last: OrderedDict[str, tuple[int, list[str]]] = OrderedDict()
_lock = threading.Lock()


def forget() -> None:
    """Drop the in-memory digests (tests that reset the database call it)."""
    with _lock:
        _last.clear()


def _previous(session_ids: list[str]) -> dict[str, tuple[int, list[str]]]:
    """Each session's last stored index (-1: none) and that call's message digests, the
    indexes read in one query."""
    with _lock:
        hits = {sid: _last.get(sid) for sid in session_ids}
    last = dict(
        WireCall.objects.filter(session_id__in=session_ids)
        .values("session_id")
        .annotate(n=Max("index"))
        .values_list("session_id", "n")
    )
    out: dict[str, tuple[int, list[str]]] = {}
    for session_id in session_ids:
        index = last.get(session_id)
        hit = hits[session_id]
        if index is None:
            out[session_id] = (-1, [])
        elif hit is not None and hit[0] == index:
            out[session_id] = hit
        else:
            out[session_id] = (index, message_digests(session_id, index))
    return out


def _remember(session_id: str, index: int, digests: list[str]) -> None:
    with _lock:
        _last[session_id] = (index, digests)
        _last.move_to_end(session_id)
        while len(_last) > _CACHED_SESSIONS:
            _last.popitem(last=False)


def store_calls(calls: Iterable[wire.WireCall]) -> list[WireCall]:
    """Store ``calls`` (in order; several sessions may be mixed) in one transaction: the
    sessions' last indexes in one query, the blobs in one, the rows in one insert, however
    many sessions the batch holds."""
    by_session: dict[str, list[wire.WireCall]] = {}
    for call in calls:
        by_session.setdefault(call.session_id, []).append(call)
    if not by_session:
        return []
    rows: list[WireCall] = []
    encoded: list[wire.Encoded] = []
    blobs: dict[str, str] = {}
    with transaction.atomic():
        previous = _previous(list(by_session))
        last: dict[str, tuple[int, list[str]]] = {}
        for session_id, group in by_session.items():
            index, digests = previous[session_id]
            for call in group:
                index += 1
                keyframe = index % wire.KEYFRAME_EVERY == 0
                enc = wire.encode(call.body, digests, keyframe=keyframe)
                if enc.encoding != "raw":
                    digests = enc.message_digests
                for digest, text in enc.blobs.items():
                    blobs.setdefault(digest, text)
                encoded.append(enc)
                rows.append(_row(session_id, index, call, enc, keyframe))
            last[session_id] = (index, digests)
        known = set(
            WireBlob.objects.filter(digest__in=list(blobs)).values_list("digest", flat=True)
        )
        WireBlob.objects.bulk_create(
            [WireBlob(digest=d, body=text) for d, text in blobs.items() if d not in known],
            ignore_conflicts=True,
        )
        # What each call added: its own fields, and the blobs it was the first to bring.
        for row, enc in zip(rows, encoded, strict=True):
            row.stored_bytes = wire.stored_size(enc, known)
        insert_rows(rows)
    for session_id, (index, digests) in last.items():
        _remember(session_id, index, digests)
    return rows


def _row(
    session_id: str, index: int, call: wire.WireCall, enc: wire.Encoded, keyframe: bool
) -> WireCall:
    return WireCall(
        session_id=session_id,
        index=index,
        source=call.source,
        model=call.model[:200],
        url=call.url[:500],
        turn=call.turn,
        step=call.step,
        attempt=call.attempt,
        sends=min(call.sends, 32767),
        started_at=dt.datetime.fromtimestamp(call.started_at, tz=dt.UTC),
        duration_ms=call.duration_ms,
        status=call.status,
        error=call.error,
        encoding=enc.encoding,
        keyframe=keyframe or enc.encoding == "raw",
        request=enc.fields,
        body_bytes=len(call.body),
        reply=call.reply,
        usage=call.usage,
        view=call.view,
        trace_id=call.trace_id,
        span_id=call.span_id,
    )
