"""The lint rules, each a function of a session's recorded cells returning its flags.

- ``window_refill``: a cell the print cap cut, then the same code run again (in the same
  turn) rather than filtering the variables the first run left: the window fills twice with
  the same head.
- ``re_reading``: the same span expanded three or more times in a session: reading instead
  of binding the span to a variable once and computing over it (the prefix cache works
  against it too).
- ``head_and_tail``: a cell that read the first and the last turns of a long session and
  nothing between: mid-session evidence is never seen (search the session instead).

The rules over a session's turns are in ``filters`` (``undercounting_filter``) and
``answers`` (``no_disconfirming_query``, ``archive_answered``); ``lint_session`` runs all six.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from ..store import Event, EventStore
from .answers import archive_answered, no_disconfirming_query
from .filters import undercounting_filter
from .flag import Flag
from .trajectory import RecordedCell, recorded_cells, recorded_turns

__all__ = [
    "LOG_RULES",
    "REREAD_LIMIT",
    "RULES",
    "RULE_NAMES",
    "TURN_RULES",
    "Flag",
    "head_and_tail",
    "lint_session",
    "re_reading",
    "window_refill",
]

REREAD_LIMIT = 3  # the console's span_reread alert counts from the same number
HEAD_TAIL = 5  # events at each end of a session that count as its head and its tail
LONG_SESSION = 4 * HEAD_TAIL  # shorter sessions are all head and tail


def _normal(code: str) -> str:
    return "\n".join(line.rstrip() for line in code.strip().splitlines() if line.strip())


def window_refill(session_id: str, cells: list[RecordedCell]) -> list[Flag]:
    flags = []
    for i, cut in enumerate(cells):
        if not cut.truncated:
            continue
        for later in cells[i + 1 :]:
            if later.turn != cut.turn:
                break
            if _normal(later.code) == _normal(cut.code):
                seqs = [cut.call_seq, later.call_seq]
                seqs += [s for s in (cut.result_seq, later.result_seq) if s is not None]
                flags.append(
                    Flag(
                        "window_refill", session_id, later.call_seq, tuple(sorted(seqs)),
                        f"The output of the cell at seq {cut.call_seq} was cut by the print "
                        f"cap; the cell at seq {later.call_seq} ran the same code again. Its "
                        "variables persist: filter or aggregate them in the kernel and print "
                        "less instead of re-running the query.",
                    )
                )  # fmt: skip
                break
    return flags


def re_reading(session_id: str, cells: list[RecordedCell]) -> list[Flag]:
    reads: dict[tuple[int, int], list[int]] = defaultdict(list)
    for cell in cells:
        for call in cell.ms_calls:
            if call.name == "expand" and call.seqs:
                reads[(min(call.seqs), max(call.seqs))].append(cell.call_seq)
    flags = []
    for (lo, hi), at in sorted(reads.items()):
        if len(at) >= REREAD_LIMIT:
            span = f"seq {lo}" if lo == hi else f"seqs {lo}-{hi}"
            flags.append(
                Flag(
                    "re_reading", session_id, at[REREAD_LIMIT - 1], tuple(at),
                    f"{span} expanded {len(at)} times (cells at seqs "
                    f"{', '.join(map(str, at))}): bind it to a variable once and compute over "
                    "it in the kernel instead of reading it again.",
                )
            )  # fmt: skip
    return flags


def head_and_tail(session_id: str, cells: list[RecordedCell], log: EventStore) -> list[Flag]:
    flags = []
    positions: dict[str, dict[int, int]] = {}  # session -> seq -> its place in the session
    for cell in cells:
        read = sorted({s for call in cell.ms_calls if call.name == "expand" for s in call.seqs})
        by_session: dict[str, list[int]] = defaultdict(list)
        for seq in read:
            found = log.get(seq) if seq > 0 else None
            if found is not None:
                by_session[found.session_id].append(seq)
        for read_session, seqs in sorted(by_session.items()):
            if read_session not in positions:
                events = log.session_events(read_session, limit=None)
                positions[read_session] = {e.seq: i for i, e in enumerate(events)}
            place = positions[read_session]
            size = len(place)
            if size < LONG_SESSION:
                continue
            at = [place[s] for s in seqs if s in place]
            head = [p for p in at if p < HEAD_TAIL]
            tail = [p for p in at if p >= size - HEAD_TAIL]
            if head and tail and len(head) + len(tail) == len(at):
                flags.append(
                    Flag(
                        "head_and_tail", session_id, cell.call_seq, (cell.call_seq, *seqs),
                        f"The cell at seq {cell.call_seq} read the first {len(head)} and last "
                        f"{len(tail)} of the {size} events of session {read_session!r} and "
                        "nothing between: evidence in the middle was never seen. Search the "
                        "session (ms.search(..., session=...)) and expand around the hits.",
                    )
                )  # fmt: skip
    return flags


Rule = Callable[[str, list[RecordedCell]], list[Flag]]
RULES: dict[str, Rule] = {"window_refill": window_refill, "re_reading": re_reading}
# Rules that read the log beyond the session's own cells.
LOG_RULES: dict[str, Callable[[str, list[RecordedCell], EventStore], list[Flag]]] = {
    "head_and_tail": head_and_tail
}
# Rules over the session's turns (request, cells, reply) and the log (scroll_core/lint/
# filters.py, answers.py).
TURN_RULES = ("undercounting_filter", "no_disconfirming_query", "archive_answered")
RULE_NAMES = (*RULES, *LOG_RULES, *TURN_RULES)


def lint_session(
    log: EventStore,
    session_id: str,
    *,
    after_seq: int = 0,
    events: list[Event] | None = None,
) -> list[Flag]:
    """Every rule's flags for one recorded session, in seq order; ``after_seq`` keeps only
    the flags on cells and replies after it (a live lint of the newest turn), and the rules
    over turns then judge only the turns that end after it. ``events``: the part of the
    session to judge, oldest first, when the caller bounds it (default: all of it)."""
    if events is None:
        events = log.session_events(session_id, limit=None)
    cells = recorded_cells(log, session_id, events)
    turns = recorded_turns(log, session_id, events)
    flags = [flag for rule in RULES.values() for flag in rule(session_id, cells)]
    flags += [flag for rule in LOG_RULES.values() for flag in rule(session_id, cells, log)]
    flags += undercounting_filter(session_id, turns, log, after_seq)
    flags += no_disconfirming_query(session_id, turns, log, after_seq)
    flags += archive_answered(session_id, turns, events, after_seq)
    return sorted((f for f in flags if f.cell_seq > after_seq), key=lambda f: (f.cell_seq, f.rule))
