"""The rules about a turn's reply, judged against what the turn read and what the log held.

- ``no_disconfirming_query``: the reply rests on the newest event the turn read that matches
  the request best (``MIN_SHARE`` of its terms or more), the log holds newer events that match
  it as well (the value may have changed since), and no search of the turn looked after that
  evidence (a ``since``/``on`` at or after its day): nothing was asked that could have
  disconfirmed it.
- ``archive_answered``: the reply shares no term with the live request, and two or more with
  an earlier request of the session (its headline, as the index shows it, or its text) that
  the live one does not have: it answers what the archive asked, not the live turn. The Event
  Log does not record which blocks each call's index showed, so every earlier request stands
  for the archive; a request with fewer than two terms of its own ("and then?") is not judged.

Evidence is what a request's terms are found in: an event's content and headline. The
agent's own calls and replies, the printouts of its recall tool and the session's requests
are not evidence (they echo it)."""

from __future__ import annotations

from ..store import KIND_MODEL_TURN, Event, EventStore
from ..store.fts_query import tokens
from .filters import search_filters
from .flag import Flag
from .terms import share, stem, terms
from .trajectory import RecordedTurn, is_evidence

__all__ = ["ARCHIVE_SHARED", "MIN_SHARE", "archive_answered", "no_disconfirming_query"]

# The share of a request's terms an event must hold to be its evidence: chosen with
# ``bench/lint.py --tune`` on LoCoMo's dev split only (bench/results/tuning/lint.json): of the
# questions flagged, 0.73 were wrong at 1/2 (48 flagged; 0.74 of all were wrong), 0.92 at 2/3
# (12), 0.5 at 3/4 (2), 1.0 at 1 (1, under the 10 flagged a candidate needs).
MIN_SHARE = 2 / 3
NEWER_K = 50  # hits of the request's own query looked at for newer evidence
NEWER_SHOWN = 5
ARCHIVE_SHARED = 2
MIN_REQUEST_TERMS = 2


def _is_evidence(event: Event, asked: set[int]) -> bool:
    return is_evidence(event.kind, event.role, event.name, event.seq, asked)


def _when(event: Event) -> tuple[str, int]:
    return (event.created_at, event.seq)


def _looked_after(turn: RecordedTurn, session_id: str, day: str) -> bool:
    for cell in turn.cells:
        for call in cell.ms_calls:
            parsed = search_filters(call, session_id) if call.name == "search" else None
            date = parsed[2].get("date") if parsed else None
            if date and date.get("since") is not None and str(date["since"])[:10] >= day:
                return True
    return False


def no_disconfirming_query(
    session_id: str,
    turns: list[RecordedTurn],
    log: EventStore,
    after_seq: int = 0,
    *,
    min_share: float = MIN_SHARE,
) -> list[Flag]:
    """The flags on the turns that end after ``after_seq``; ``min_share`` of the request's
    terms an event must hold to be its evidence."""
    asked = {t.request.seq for t in turns}
    flags = []
    for turn in turns:
        wanted = terms(turn.request.content)
        if turn.end_seq <= after_seq or turn.answer is None or len(wanted) < MIN_REQUEST_TERMS:
            continue
        read = {s for c in turn.cells for call in c.ms_calls for s in call.seqs}
        scored = []
        for seq in sorted(s for s in read if 0 < s < turn.request.seq):
            event = log.get(seq)
            if event is not None and _is_evidence(event, asked):
                text = f"{event.content} {event.headline or ''}"
                scored.append((share(wanted, terms(text)), event))
        best = max((s for s, _ in scored), default=0.0)
        if best < min_share:
            continue
        latest = max((e for s, e in scored if s == best), key=_when)
        if _looked_after(turn, session_id, latest.created_at[:10]):
            continue
        newer = [
            hit.seq
            for hit in log.search(
                turn.request.content, NEWER_K, agent_id=turn.request.agent_id,
                since=latest.created_at, before_seq=turn.request.seq,
            )
            if hit.seq not in read and (hit.created_at, hit.seq) > _when(latest)
        ]  # fmt: skip
        found = []
        for seq in newer:
            event = log.get(seq)
            if event is not None and _is_evidence(event, asked):
                text = f"{event.content} {event.headline or ''}"
                if share(wanted, terms(text)) >= best:
                    found.append(event)
        if not found:
            continue
        found.sort(key=_when)
        shown = found[:NEWER_SHOWN]
        flags.append(
            Flag(
                "no_disconfirming_query", session_id, turn.answer.seq,
                (latest.seq, *(e.seq for e in shown), turn.answer.seq),
                f"The reply at seq {turn.answer.seq} rests on seq {latest.seq} "
                f"({latest.created_at[:10]}), the newest event the turn read that matches the "
                f"request; {len(found)} newer event(s) match it as well (seqs "
                f"{', '.join(str(e.seq) for e in shown)}, from {shown[0].created_at[:10]}) and "
                f"no search of the turn looked after {latest.created_at[:10]}. The value may "
                "have changed since: search after the latest evidence (since=...) before "
                "answering.",
            )
        )  # fmt: skip
    return flags


def archive_answered(
    session_id: str, turns: list[RecordedTurn], events: list[Event], after_seq: int = 0
) -> list[Flag]:
    """The flags on the replies after ``after_seq`` (each judged against every earlier
    request of ``events``)."""
    headlined = [e for e in events if e.role == "user" and e.headline and e.kind != KIND_MODEL_TURN]
    flags = []
    for i, turn in enumerate(turns):
        if turn.answer is None or turn.answer.seq <= after_seq:
            continue
        live = terms(turn.request.content)
        if len(live) < MIN_REQUEST_TERMS:
            continue
        said = terms(turn.answer.content)
        if not said or said & live:
            continue
        earlier = {t.request.seq: t.request for t in turns[:i]}
        earlier.update((e.seq, e) for e in headlined if e.seq < turn.request.seq)
        best: tuple[int, Event, frozenset[str]] | None = None
        for seq in sorted(earlier):
            request = earlier[seq]
            shared = (said & (terms(request.headline) | terms(request.content))) - live
            if len(shared) >= ARCHIVE_SHARED and (best is None or len(shared) > best[0]):
                best = (len(shared), request, shared)
        if best is None:
            continue
        _, request, shared = best
        shown = request.headline or request.content
        words = dict.fromkeys(w for w in tokens(turn.answer.content) if stem(w) in shared)
        flags.append(
            Flag(
                "archive_answered", session_id, turn.answer.seq,
                (request.seq, turn.request.seq, turn.answer.seq),
                f"The reply at seq {turn.answer.seq} shares no term with the live request at "
                f"seq {turn.request.seq} and {len(shared)} ({', '.join(words)}) with "
                f"the earlier request at seq {request.seq} ({shown[:120]!r}): it answers what "
                "the archive asked, not the live turn. The index is only a map; answer the "
                "latest request.",
            )
        )  # fmt: skip
    return flags
