"""The column-by-column check of a chunk of plain events (``plain_rows``) gives exactly the
values the per-event path gives, sends back every chunk it cannot take, and leaves the
stored log, the seqs and the errors as they were."""

from __future__ import annotations

import random
import sqlite3
from typing import Any

import pytest

from scroll_core import EventLog, InvalidEvent
from scroll_core.store.plain_rows import plain_values

_THRESHOLD = 200


class _PerEventLog(EventLog):
    """The log with the column check turned off: every event through ``_prepare``."""

    def _plain_rows(self, chunk):  # type: ignore[no-untyped-def]
        return None


def _plain_event(rng: random.Random, i: int) -> dict[str, Any]:
    """An event the column check should take: any mix of the optional fields, plain."""
    event: dict[str, Any] = {
        "session_id": f"s{rng.randint(0, 3)}",
        "kind": rng.choice(["context_msg", "model_turn", "tool_result"]),
        "content": " ".join(rng.choice(["alpha", "beta", "x\x00y", "gamma"]) for _ in range(5)),
    }
    optional: dict[str, Any] = {
        "role": rng.choice([None, "user", "assistant"]),
        "agent_id": rng.choice([None, "", "main", "helper"]),
        "name": rng.choice([None, "", "bash"]),
        "tool_call_id": rng.choice([None, f"call_{i}"]),
        "headline": rng.choice([None, "a headline"]),
        "dedup_key": rng.choice([None, f"k{i}", f"k{i % 7}"]),
        "metadata": rng.choice([None, {}, {"n": i, "tags": ["a", "é"]}]),
        "tool_input": rng.choice([None, {"cmd": "ls"}, [1, 2], "text"]),
        "searchable": rng.choice([True, False, 0, 1]),
        "payload": None,
    }
    for key, value in optional.items():
        if rng.random() < 0.5:
            event[key] = value
    return event


_STAMPS = [
    "2026-03-01T10:20:30Z",
    "2026-03-01T10:20:30+00:00",
    "2026-03-01T10:20:30.123456Z",
    "2026-03-01T10:20:30.123456+00:00",
]


def _chunk(rng: random.Random, n: int = 20) -> list[dict[str, Any]]:
    events = [_plain_event(rng, i) for i in range(n)]
    stamped = rng.random() < 0.7  # a column of timestamps or a column of none
    for event in events:
        if stamped:
            event["created_at"] = rng.choice(_STAMPS)
    return events


def _per_event(log: EventLog, events: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [log._prepare(i, event).values for i, event in enumerate(events)]


def _without_created_at(values: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [v[:13] + v[14:] for v in values]


def test_plain_chunks_give_the_per_event_values(tmp_path):
    rng = random.Random(36)
    taken = 0
    with EventLog(tmp_path / "log.sqlite3", payload_threshold=_THRESHOLD) as log:
        for _ in range(300):
            events = _chunk(rng)
            values = plain_values(events, _THRESHOLD, text_holds_nul=True)
            assert values is not None  # every event here is plain
            expected = _per_event(log, events)
            if "created_at" in events[0]:
                assert values == expected
            else:  # now, per event: the same apart from the clock
                assert _without_created_at(values) == _without_created_at(expected)
                assert all(v[13].endswith("Z") and len(v[13]) == 27 for v in values)
            taken += 1
            # PostgreSQL's text cannot hold NUL: there content with one is not plain.
            nul = any("\x00" in e["content"] for e in events)
            assert (plain_values(events, _THRESHOLD, text_holds_nul=False) is None) == nul
    assert taken == 300


@pytest.mark.parametrize(
    "change",
    [
        {"session_id": "ünï"},
        {"session_id": " "},
        {"session_id": ""},
        {"session_id": None},
        {"kind": 3},
        {"role": "a\x00b"},
        {"name": b"bash"},
        {"agent_id": 7},
        {"content": "ünïcode"},
        {"content": b"bytes"},
        {"content": None},
        {"content": "x" * (_THRESHOLD + 1)},
        {"payload": "the whole output"},
        {"created_at": None},  # beside events that have one
        {"created_at": ""},
        {"created_at": "2026-02-30T00:00:00Z"},
        {"created_at": "2026-03-01 10:20:30"},
        {"created_at": "2026-03-01T10:20:30+02:00"},
        {"created_at": "2026-03-01T10:20:30Z\n2026-03-01T10:20:30Z"},
        {"metadata": ["not", "a", "mapping"]},
        {"metadata": {"x": float("nan")}},
        {"tool_input": {1, 2}},
        {"unknown": 1},
    ],
)
def test_a_chunk_with_one_event_not_plain_goes_event_by_event(tmp_path, change):
    events = [
        {"session_id": "s", "kind": "k", "content": "c", "created_at": _STAMPS[0]} for _ in range(5)
    ]
    events[3] = {**events[3], **change}
    assert plain_values(events, _THRESHOLD, text_holds_nul=True) is None
    with EventLog(tmp_path / "log.sqlite3", payload_threshold=_THRESHOLD) as log:
        try:  # the per-event path still decides: stored as it says, or refused
            seqs = log.append_many(events)
        except InvalidEvent as exc:
            assert str(exc).startswith("event 3: ")
            assert log.count() == 0
        else:
            assert len(seqs) == 5
            assert log.get(seqs[3]).content == log._prepare(3, events[3]).values[5]


def _stored(path) -> tuple[list[tuple[Any, ...]], ...]:
    db = sqlite3.connect(path)
    try:
        return tuple(
            db.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
            for table in ("events", "session_stats", "events_fts_agent_totals")
        )
    finally:
        db.close()


def test_the_stored_log_is_the_per_event_paths(tmp_path):
    rng = random.Random(20261203)
    batches = []
    for _ in range(6):
        events = [e for _ in range(8) for e in _chunk(rng, 25)]
        for event in events:
            event.setdefault("created_at", _STAMPS[2])
        batches.append(events)
    batches[2][100]["content"] = "ünïcode: this chunk goes event by event"
    plain = [
        plain_values(b[i : i + 50], _THRESHOLD, True) is not None
        for b in batches
        for i in range(0, 200, 50)
    ]
    assert plain.count(False) == 1  # the columns log takes every other chunk by column
    results = {}
    for name, cls in (("columns", EventLog), ("per_event", _PerEventLog)):
        path = tmp_path / f"{name}.sqlite3"
        with cls(path, payload_threshold=_THRESHOLD) as log:
            seqs = [(list(s), s.inserted) for s in map(log.append_many, batches)]
            seqs.append((list(log.append_many(batches[1])), 0))  # a re-import: all repeats
        results[name] = (seqs, _stored(path))
    assert results["columns"] == results["per_event"]
    events = results["columns"][1][0]
    assert len(events) > 500 and {row[17] for row in events} == {0, 1}  # searchable or not


def test_an_invalid_event_is_refused_with_its_index_and_nothing_stored(tmp_path):
    events = [{"session_id": "s", "kind": "k", "content": f"c {i}"} for i in range(120)]
    events[77]["created_at"] = "yesterday"
    with EventLog(tmp_path / "log.sqlite3") as log:
        with pytest.raises(InvalidEvent, match=r"^event 77: invalid created_at"):
            log.append_many(events)
        assert log.count() == 0
