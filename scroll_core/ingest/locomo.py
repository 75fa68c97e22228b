"""LoCoMo (``locomo10.json``): each conversation one session, each dialog turn one event.

The file is a list of samples ``{sample_id, conversation: {speaker_a, speaker_b,
session_<n>: [turns], session_<n>_date_time: "1:56 pm on 8 May, 2023"}, qa, ...}``.
Only the conversation is imported; QA items and summaries are evaluation data.
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

_SESSION_KEY = re.compile(r"session_(\d+)")
_DATE_FORMAT = "%I:%M %p on %d %B, %Y"
# Turns share their session's minute-resolution date; one second apiece keeps them ordered.
_TURN_STEP_S = 1.0
_TURN_FIELDS = ("blip_caption", "img_url", "query", "re-download")


def parse(path: Path, *, session_id: str | None = None) -> Parsed:
    data = load_json(path)
    problems = Problems(path)
    events: list[Draft] = []
    try:
        samples = as_list(data, "$", "the file")
    except Bad as bad:
        problems.add(bad)
        samples = []
    for index, sample in enumerate(samples):
        try:
            events.extend(_sample(sample, f"$[{index}]", session_id))
        except Bad as bad:
            problems.add(bad)
    if not samples and not problems.found:
        problems.add(Bad("$", "no conversations in the file"))
    problems.check()
    return Parsed(events)


def _sample(sample: Any, where: str, session_override: str | None) -> list[Draft]:
    sample = as_dict(sample, where, "a sample")
    sample_id = as_str(sample, "sample_id", where)
    assert sample_id is not None
    conv_where = f"{where}.conversation"
    conversation = as_dict(sample.get("conversation"), conv_where, "'conversation'")
    session = session_override or f"locomo:{sample_id}"
    numbers = sorted(int(m.group(1)) for key in conversation if (m := _SESSION_KEY.fullmatch(key)))
    events: list[Draft] = []
    seen: set[str] = set()
    for number in numbers:
        key = f"session_{number}"
        turns = as_list(conversation[key], f"{conv_where}.{key}", f"'{key}'")
        date_key = f"{key}_date_time"
        date_where = f"{conv_where}.{date_key}"
        date_text = as_str(conversation, date_key, conv_where)
        assert date_text is not None
        try:
            started = datetime.strptime(date_text, _DATE_FORMAT)
        except ValueError:
            raise Bad(date_where, f"not a LoCoMo date ({_DATE_FORMAT!r}): {date_text!r}") from None
        for position, turn in enumerate(turns):
            turn_where = f"{conv_where}.{key}[{position}]"
            turn = as_dict(turn, turn_where, "a turn")
            speaker = as_str(turn, "speaker", turn_where)
            dia_id = as_str(turn, "dia_id", turn_where)
            text = as_str(turn, "text", turn_where)
            assert speaker is not None and dia_id is not None and text is not None
            if dia_id in seen:
                raise Bad(turn_where, f"duplicate dialog id {dia_id!r}")
            seen.add(dia_id)
            extra = {k.replace("-", "_"): turn[k] for k in _TURN_FIELDS if k in turn}
            events.append(
                draft(
                    session_id=session,
                    kind=KIND_CHAT_TURN,
                    role="user",
                    name=speaker,
                    content=text,
                    created_at=to_timestamp(started, turn_where, offset_s=position * _TURN_STEP_S),
                    dedup_key=f"{sample_id}:{dia_id}",
                    metadata={
                        "source": "locomo",
                        "sample_id": sample_id,
                        "dia_id": dia_id,
                        "locomo_session": number,
                        "session_date": date_text,
                        **extra,
                    },
                )
            )
    return events
