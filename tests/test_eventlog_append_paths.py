"""The append path's shortcuts keep its guarantees: the one-scan check of an event's ids and
names accepts and refuses exactly what the per-field checks do, with the same messages; and
a large batch inserted in as few statements as its token counts allow still resolves
repeated dedup keys, inside the batch and against the log, to the right seqs."""

from __future__ import annotations

import itertools

import pytest

from scroll_core import EventLog, InvalidEvent
from scroll_core.store.log_common import _optional_text, _refuse_nul, _required_text

_SHORT = ("session_id", "kind", "agent_id", "role", "name", "tool_call_id", "headline", "dedup_key")


class _Text(str):
    pass


_VALUES = [
    None,
    "",
    " ",
    "\t",
    "ok",
    "ünï",
    "漢字",
    "a\x00b",
    "\ud800x",
    0,
    3,
    False,
    b"x",
    _Text("sub"),
]


def _per_field(event: dict) -> tuple:
    """The per-field checks as the append path ran them before its one-scan check."""
    where = "event 0"
    session_id = _required_text(event, "session_id", where)
    kind = _required_text(event, "kind", where)
    agent_id = event.get("agent_id") or "main"
    optional = [
        None if event.get(key) is None else _optional_text(event, key, where)
        for key in ("role", "name", "tool_call_id", "headline", "dedup_key")
    ]
    if not isinstance(agent_id, str):
        raise InvalidEvent(f"{where}: agent_id must be a string")
    _refuse_nul(agent_id, "agent_id", where)
    role, name, tool_call_id, headline, dedup_key = optional
    return (session_id, agent_id, kind, role, name, tool_call_id, headline, dedup_key)


def _outcome(run) -> tuple:
    try:
        return ("ok", run())
    except InvalidEvent as exc:
        return ("refused", str(exc))


@pytest.fixture(scope="module")
def sqlite_log(tmp_path_factory):
    with EventLog(tmp_path_factory.mktemp("paths") / "log.sqlite3") as log:
        yield log


@pytest.mark.parametrize("field", _SHORT)
def test_the_one_scan_check_agrees_with_the_per_field_checks(sqlite_log, field):
    base = {"session_id": "s", "kind": "k", "content": "x", "agent_id": "a", "role": "user"}
    for value, other in itertools.product(_VALUES, [None, "ok", "ünï"]):
        event = {**base, field: value}
        if field != "session_id":
            event["session_id"] = other if other is not None else "s"
        want = _outcome(lambda e=event: _per_field(e))
        got = _outcome(
            lambda e=event: tuple(
                sqlite_log._prepare(0, e).values[i] for i in (0, 1, 2, 3, 4, 6, 11, 14)
            )
        )
        assert got == want, (field, value, other)


@pytest.mark.parametrize("token_thread", [True, False])
def test_a_large_batch_resolves_repeated_keys_across_its_chunks(tmp_path, token_thread):
    with EventLog(tmp_path / "log.sqlite3", token_thread=token_thread) as log:
        old = log.append_many(
            [
                {"session_id": "s", "kind": "k", "content": f"old {i}", "dedup_key": f"k{i}"}
                for i in range(0, 300, 7)
            ]
        )
        # Non-ASCII rows go to the token thread, so the batch is inserted in several parts.
        events = [
            {
                "session_id": "s",
                "kind": "k",
                "content": (f"ünï {i}" if i % 5 == 0 else f"plain {i}"),
                "dedup_key": f"k{i % 300}",
            }
            for i in range(420)
        ]
        seqs = log.append_many(events)
        first_new = old[-1] + 1
        expected, fresh = [], {}
        existing = {f"k{i}": seq for i, seq in zip(range(0, 300, 7), old, strict=True)}
        for event in events:
            key = event["dedup_key"]
            if key in existing:
                expected.append(existing[key])
            else:
                if key not in fresh:
                    fresh[key] = first_new + len(fresh)
                expected.append(fresh[key])
        assert seqs == expected
        assert seqs.inserted == 300 - len(old)
        assert log.count() == 300
        assert log.last_seq() == first_new + seqs.inserted - 1
        for key, seq in fresh.items():
            assert log.get(seq).dedup_key == key
        assert log.fts_check() == 300


@pytest.mark.parametrize("holds_nul", [True, False])  # SQLite's text holds NUL, PostgreSQL's not
def test_content_that_skips_the_routing_is_stored_as_the_routing_would(tmp_path, holds_nul):
    with EventLog(tmp_path / "log.sqlite3", payload_threshold=8) as log:
        log._text_holds_nul = holds_nul
        contents = ["", "short", "exactly8", "ninechars", "nul\x00in", "ünï", "\ud800", b"bytes", 7]
        for content, payload in itertools.product(contents, [None, "separate"]):
            event = {"session_id": "s", "kind": "k", "content": content, "payload": payload}

            def routed(e=event):
                content, value = log._split_content(e["content"], e["payload"], "event 0")
                return content, value

            want = _outcome(routed)
            got = _outcome(lambda e=event: log._prepare(0, e))
            if want[0] == "refused":
                assert got == want, (content, payload)
                continue
            row = got[1]
            assert row.values[5] == want[1][0], (content, payload)
            assert (row.payload is None) == (want[1][1] is None), (content, payload)
