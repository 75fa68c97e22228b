"""Importing LongMemEval question items (fixture in the published shape; no real file here)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from scroll_core.errors import IngestError
from scroll_core.ingest import ingest


@pytest.fixture
def log(store):
    """Every test here that imports into ``log`` runs on SQLite and on PostgreSQL: importers
    write only through the Event Log interface."""
    return store


FIXTURE = Path(__file__).parent / "fixtures" / "longmemeval_sample.json"


def _write_variant(tmp_path, change):
    items = copy.deepcopy(json.loads(FIXTURE.read_text()))
    change(items)
    path = tmp_path / "lme.json"
    path.write_text(json.dumps(items))
    return path


def test_each_question_history_becomes_one_session(log):
    report = ingest(log, "longmemeval", FIXTURE, progress=False)

    assert report.sessions == ("longmemeval:q_001", "longmemeval:q_002")
    assert report.events_read == report.events_appended == 5 + 4
    assert log.count("longmemeval:q_001") == 5


def test_turns_are_dated_by_their_haystack_session_in_order(log):
    ingest(log, "longmemeval", FIXTURE, progress=False)

    events = log.session_events("longmemeval:q_001")
    assert [e.created_at for e in events] == [
        "2023-05-20T02:21:00.000000Z",
        "2023-05-20T02:21:01.000000Z",
        "2023-05-25T10:00:00.000000Z",
        "2023-05-25T10:00:01.000000Z",
        "2023-05-25T10:00:02.000000Z",
    ]
    assert [e.role for e in events] == ["user", "assistant", "user", "assistant", "user"]
    assert {e.kind for e in events} == {"chat_turn"}


def test_has_answer_and_haystack_ids_are_kept_in_metadata(log):
    ingest(log, "longmemeval", FIXTURE, progress=False)

    events = log.session_events("longmemeval:q_001")
    evidence = [e for e in events if e.metadata.get("has_answer")]
    assert len(evidence) == 1
    assert "Business Administration" in evidence[0].content
    assert evidence[0].metadata["haystack_session_id"] == "answer_q001_1"
    assert evidence[0].metadata["session_date"] == "2023/05/25 (Thu) 10:00"
    assert "has_answer" not in events[0].metadata  # absent in the source, absent here
    assert events[3].metadata["has_answer"] is False


def test_questions_and_answers_are_not_imported(log):
    ingest(log, "longmemeval", FIXTURE, progress=False)

    contents = [e.content for e in log.range(1, log.count())]
    assert any("red kettle" in c for c in contents)
    assert not any("How many days" in c or c == "3 days" for c in contents)


def test_reimporting_appends_nothing(log):
    ingest(log, "longmemeval", FIXTURE, progress=False)

    again = ingest(log, "longmemeval", FIXTURE, progress=False)

    assert (again.events_appended, again.events_already_present) == (0, 9)


def test_mismatched_haystack_lists_are_refused(log, tmp_path):
    path = _write_variant(tmp_path, lambda items: items[1]["haystack_dates"].pop())

    with pytest.raises(IngestError, match="differ in length") as caught:
        ingest(log, "longmemeval", path, progress=False)

    assert caught.value.location == "$[1]"
    assert log.count() == 0


def test_an_unreadable_date_names_its_index(log, tmp_path):
    def change(items):
        items[0]["haystack_dates"][1] = "last Thursday"

    path = _write_variant(tmp_path, change)

    with pytest.raises(IngestError, match="last Thursday") as caught:
        ingest(log, "longmemeval", path, progress=False)

    assert caught.value.location == "$[0].haystack_dates[1]"
    assert log.count() == 0


def test_a_turn_without_content_names_its_path(log, tmp_path):
    def change(items):
        del items[1]["haystack_sessions"][1][0]["content"]

    path = _write_variant(tmp_path, change)

    with pytest.raises(IngestError, match="'content' is missing") as caught:
        ingest(log, "longmemeval", path, progress=False)

    assert caught.value.location == "$[1].haystack_sessions[1][0]"
    assert log.count() == 0
