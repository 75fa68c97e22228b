"""LongMemEval (``longmemeval_s.json`` / ``_m`` / ``_oracle``): chat histories per question.

The published file is a list of question items ``{question_id, haystack_session_ids,
haystack_dates: ["2023/05/20 (Sat) 02:21", ...], haystack_sessions: [[{role, content,
has_answer?}, ...], ...], question, answer, ...}``. Each item's history becomes one session
(``longmemeval:<question_id>``) because every question has its own haystack; each turn is
one ``chat_turn`` event dated by its haystack session. Questions and answers are evaluation
data and are not imported.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any

from ._common import Bad, Draft, Parsed, Problems, as_dict, as_list, as_str, draft, load_json
from ._common import timestamp as to_timestamp

__all__ = ["KIND_CHAT_TURN", "parse"]

KIND_CHAT_TURN = "chat_turn"

_WEEKDAY = re.compile(r"\s*\([A-Za-z]{3}\)\s*")
_DATE_FORMATS = ("%Y/%m/%d %H:%M", "%Y/%m/%d")
# Turns share their session's minute-resolution date; one second apiece keeps them ordered.
_TURN_STEP_S = 1.0


def parse(path: Path, *, session_id: str | None = None) -> Parsed:
    data = load_json(path)
    problems = Problems(path)
    events: list[Draft] = []
    try:
        items = as_list(data, "$", "the file")
    except Bad as bad:
        raise bad.error(path) from None
    for index, item in enumerate(items):
        try:
            events.extend(_item(item, f"$[{index}]", session_id))
        except Bad as bad:
            problems.add(bad)
    if not items:
        problems.add(Bad("$", "no question items in the file"))
    problems.check()
    return Parsed(events)


def _item(item: Any, where: str, session_override: str | None) -> list[Draft]:
    item = as_dict(item, where, "a question item")
    question_id = as_str(item, "question_id", where)
    assert question_id is not None
    sessions = as_list(item.get("haystack_sessions"), where, "'haystack_sessions'")
    dates = as_list(item.get("haystack_dates"), where, "'haystack_dates'")
    ids = as_list(item.get("haystack_session_ids"), where, "'haystack_session_ids'")
    if not len(sessions) == len(dates) == len(ids):
        raise Bad(
            where,
            f"haystack_sessions ({len(sessions)}), haystack_dates ({len(dates)}) and "
            f"haystack_session_ids ({len(ids)}) differ in length",
        )
    session = session_override or f"longmemeval:{question_id}"
    events: list[Draft] = []
    for number, (turns, date_text, haystack_id) in enumerate(
        zip(sessions, dates, ids, strict=True)
    ):
        hay_where = f"{where}.haystack_sessions[{number}]"
        if not isinstance(haystack_id, str):
            raise Bad(f"{where}.haystack_session_ids[{number}]", "session id must be a string")
        started = _date(date_text, f"{where}.haystack_dates[{number}]")
        for position, turn in enumerate(as_list(turns, hay_where, "a haystack session")):
            turn_where = f"{hay_where}[{position}]"
            turn = as_dict(turn, turn_where, "a turn")
            role = as_str(turn, "role", turn_where)
            content = as_str(turn, "content", turn_where)
            assert role is not None and content is not None
            has_answer = turn.get("has_answer")
            if has_answer is not None and not isinstance(has_answer, bool):
                raise Bad(turn_where, "'has_answer' must be true or false")
            events.append(
                draft(
                    session_id=session,
                    kind=KIND_CHAT_TURN,
                    role=role,
                    content=content,
                    created_at=to_timestamp(started, turn_where, offset_s=position * _TURN_STEP_S),
                    dedup_key=f"{question_id}:{haystack_id}:{position}",
                    metadata={
                        "source": "longmemeval",
                        "question_id": question_id,
                        "haystack_session_id": haystack_id,
                        "haystack_index": number,
                        "turn": position,
                        "session_date": date_text,
                        "has_answer": has_answer,
                    },
                )
            )
    return events


def _date(value: Any, where: str) -> datetime:
    if not isinstance(value, str):
        raise Bad(where, "date must be a string")
    text = _WEEKDAY.sub(" ", value).strip()
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(text, fmt)
        except ValueError:
            continue
    raise Bad(where, f"not a LongMemEval date like '2023/05/20 (Sat) 02:21': {value!r}")
