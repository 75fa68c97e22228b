"""``undercounting_filter``: a search whose filters (session, kind, speaker, date) returned few
hits where the same query without one of them returns hits that rank as well, which the turn
then never read: the filter, not the evidence, decided what the agent saw.

The search is run again from its logged arguments, over the events that were there when it
ran (before the turn's request, as ``ms.search`` leaves out the active turn). "Few" is fewer
than half of the ``k`` the agent asked for; the hits that count against the filter are the
unfiltered query's hits that matched a term themselves and score at least as well as the
weakest hit the filtered query kept (any matched hit when it kept none), that can be evidence
(not the agent's own calls, replies, recall printouts or the session's requests) and that no
``ms`` call of the turn returned; ``MANY`` of them or more raise the flag."""

from __future__ import annotations

import inspect
from datetime import timedelta
from typing import Any

from ..kernel.ms import MsCapability
from ..store import EventStore
from ..store.search import Hit
from ..timeutil import parse_ts
from .flag import Flag
from .trajectory import MsCall, RecordedTurn, is_evidence

__all__ = ["FILTERS", "MANY", "search_filters", "undercounting_filter"]

MANY = 3
FILTERS = ("session", "kind", "speaker", "date")
ALL = "*"


def _search_signature() -> inspect.Signature:
    """``ms.search``'s own parameters (without ``self``), to read a logged call's arguments
    by name exactly as the kernel bound them."""
    signature = inspect.signature(MsCapability.search)
    return signature.replace(parameters=list(signature.parameters.values())[1:])


_SEARCH = _search_signature()


def search_filters(call: MsCall, session_id: str) -> tuple[str, int, dict[str, Any]] | None:
    """The logged search's query, k and filters by name (None: not readable)."""
    if call.args is None or call.kwargs is None:
        return None
    try:
        bound = _SEARCH.bind(*call.args, **call.kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    a = bound.arguments
    if not isinstance(a["query"], str) or not isinstance(a["k"], int):
        return None
    found: dict[str, Any] = {}
    session = session_id if a["scope"] == "session" else a["session"]
    if session not in (None, ALL):
        found["session"] = {"session_id": session}
    for name in ("kind", "speaker"):
        if a[name]:
            found[name] = {name: a[name]}
    since, until = a["since"], a["until"]
    if a["on"] is not None:
        try:
            day = parse_ts(str(a["on"])).date()
        except ValueError:
            return None
        since, until = day.isoformat(), (day + timedelta(days=1)).isoformat()
    if since is not None or until is not None:
        found["date"] = {"since": since, "until": until}
    agent = a["agent"]
    found["_agent"] = {} if agent == ALL else {"agent_id": agent}
    return a["query"], max(0, min(a["k"], 200)), found


def _search(log: EventStore, query: str, k: int, parts: dict[str, Any], before: int) -> list[Hit]:
    kwargs: dict[str, Any] = {}
    for part in parts.values():
        kwargs.update(part)
    try:
        return log.search(query, k, before_seq=before, **kwargs)
    except (ValueError, TypeError, LookupError):
        return []


def _describe(query: str, parts: dict[str, Any]) -> str:
    shown = [repr(query)]
    for name, part in parts.items():
        if name != "_agent":
            shown += [f"{key}={value!r}" for key, value in part.items() if value is not None]
    return f"ms.search({', '.join(shown)})"


def undercounting_filter(
    session_id: str, turns: list[RecordedTurn], log: EventStore, after_seq: int = 0
) -> list[Flag]:
    """The flags on the turns that end after ``after_seq``."""
    flags = []
    asked = {t.request.seq for t in turns}
    for turn in turns:
        if turn.end_seq <= after_seq:
            continue
        read = {s for cell in turn.cells for call in cell.ms_calls for s in call.seqs}
        for cell in turn.cells:
            for call in cell.ms_calls:
                if call.name != "search":
                    continue
                parsed = search_filters(call, session_id)
                if parsed is None:
                    continue
                query, k, parts = parsed
                if parts["_agent"] == {"agent_id": None}:
                    parts["_agent"] = {"agent_id": turn.request.agent_id}
                if not any(name in parts for name in FILTERS) or len(call.seqs) * 2 >= k:
                    continue
                kept = _search(log, query, k, parts, turn.request.seq)
                floor = min((h.score for h in kept), default=None)
                best: tuple[str, list[int]] | None = None
                for name in FILTERS:
                    if name not in parts:
                        continue
                    wider = {n: p for n, p in parts.items() if n != name}
                    unread = [
                        h.seq
                        for h in _search(log, query, k, wider, turn.request.seq)
                        if h.matched
                        and is_evidence(h.kind, h.role, h.name, h.seq, asked)
                        and (floor is None or h.score >= floor)
                        and h.seq not in read
                        and h.seq not in {x.seq for x in kept}
                    ]
                    if len(unread) >= MANY and (best is None or len(unread) > len(best[1])):
                        best = (name, unread)
                if best is None:
                    continue
                name, unread = best
                seqs = (cell.call_seq, *([cell.result_seq] if cell.result_seq else []), *unread)
                flags.append(
                    Flag(
                        "undercounting_filter", session_id, cell.call_seq, tuple(seqs),
                        f"{_describe(query, parts)} in the cell at seq {cell.call_seq} returned "
                        f"{len(call.seqs)} of the {k} hits asked for; without its {name} "
                        f"filter the same query finds {len(unread)} more that rank as well "
                        f"(seqs {', '.join(map(str, unread))}) and the turn never read them. "
                        "The filter may be undercounting the evidence: widen it, or look at "
                        "what it leaves out before answering.",
                    )
                )  # fmt: skip
    return flags
