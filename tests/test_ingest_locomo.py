"""Importing LoCoMo conversations: one session per conversation, one event per turn."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

from scroll_core.errors import IngestError
from scroll_core.ingest import ingest


@pytest.fixture
def log(store):
    """Every test here that imports into ``log`` runs on SQLite and on PostgreSQL: importers
    write only through the Event Log interface."""
    return store


@pytest.fixture
def locomo_file(shared_data):
    path = shared_data / "locomo" / "locomo10.json"
    if not path.is_file():
        pytest.skip(f"LoCoMo data not found at {path}")
    return path


def _conversation(**sessions):
    conversation = {"speaker_a": "Ann", "speaker_b": "Bo"}
    for number, (date, turns) in sessions.items():
        conversation[f"session_{number[1:]}_date_time"] = date
        conversation[f"session_{number[1:]}"] = turns
    return {"sample_id": "conv-x", "conversation": conversation, "qa": []}


def _turn(speaker, dia_id, text):
    return {"speaker": speaker, "dia_id": dia_id, "text": text}


def test_it_imports_all_ten_conversations_and_every_turn(log, locomo_file):
    report = ingest(log, "locomo", locomo_file, progress=False)

    assert report.format == "locomo"
    assert len(report.sessions) == 10
    assert report.sessions[0] == "locomo:conv-26"
    assert (report.events_read, report.events_appended) == (5882, 5882)
    assert log.count() == 5882
    summaries = {s.session_id: s for s in log.sessions()}
    assert set(summaries) == set(report.sessions)
    assert sum(s.events for s in summaries.values()) == 5882


def test_turns_keep_speaker_dialog_id_session_number_and_date(log, locomo_file):
    ingest(log, "locomo", locomo_file, progress=False)

    events = log.session_events("locomo:conv-26", limit=None)
    first, second = events[0], events[1]
    assert (first.kind, first.role, first.name) == ("chat_turn", "user", "Caroline")
    assert first.content == "Hey Mel! Good to see you! How have you been?"
    assert first.metadata["dia_id"] == "D1:1"
    assert first.metadata["locomo_session"] == 1
    assert first.metadata["session_date"] == "1:56 pm on 8 May, 2023"
    assert first.created_at == "2023-05-08T13:56:00.000000Z"
    assert second.name == "Melanie"
    assert second.created_at == "2023-05-08T13:56:01.000000Z"
    shared_photo = next(e for e in events if e.metadata["dia_id"] == "D1:5")
    assert shared_photo.metadata["img_url"] == ["https://i.redd.it/l7hozpetnhlb1.jpg"]
    assert shared_photo.metadata["blip_caption"].startswith("a photo of a dog")


def test_turn_order_and_session_dates_survive_in_created_at(log, locomo_file):
    ingest(log, "locomo", locomo_file, progress=False)

    by_session: dict[tuple[str, int], list[str]] = defaultdict(list)
    for sid in [s.session_id for s in log.sessions()]:
        for event in log.session_events(sid, limit=None):
            by_session[(sid, event.metadata["locomo_session"])].append(event.created_at)
    assert len(by_session) == 272
    for stamps in by_session.values():
        assert stamps == sorted(stamps)
        assert len(set(stamps)) == len(stamps)


def test_dialog_ids_are_unique_per_conversation_and_searchable_back(log, locomo_file):
    ingest(log, "locomo", locomo_file, progress=False)

    data = json.loads(locomo_file.read_text())
    evidence = data[0]["qa"][0]["evidence"][0]
    events = log.session_events("locomo:conv-26", limit=None)
    ids = Counter(e.metadata["dia_id"] for e in events)
    assert max(ids.values()) == 1
    assert evidence in ids


def test_reimporting_appends_nothing(log, locomo_file):
    ingest(log, "locomo", locomo_file, progress=False)
    again = ingest(log, "locomo", locomo_file, progress=False)

    assert (again.events_read, again.events_appended, again.events_already_present) == (
        5882,
        0,
        5882,
    )
    assert log.count() == 5882


def test_a_session_override_puts_every_conversation_in_one_session(log, tmp_path):
    path = tmp_path / "two.json"
    one = _conversation(s1=("1:56 pm on 8 May, 2023", [_turn("Ann", "D1:1", "hi")]))
    two = {**one, "sample_id": "conv-y"}
    path.write_text(json.dumps([one, two]))

    report = ingest(log, "locomo", path, session_id="bench", progress=False)

    assert report.sessions == ("bench",)
    assert report.events_appended == 2  # same dialog id in two samples: both kept


def test_a_turn_without_text_names_its_json_path_and_ingests_nothing(log, tmp_path):
    turns = [_turn("Ann", "D1:1", "hello"), {"speaker": "Bo", "dia_id": "D1:2"}]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps([_conversation(s1=("1:56 pm on 8 May, 2023", turns))]))

    with pytest.raises(IngestError) as caught:
        ingest(log, "locomo", path, progress=False)

    assert caught.value.location == "$[0].conversation.session_1[1]"
    assert "'text' is missing" in caught.value.reason
    assert str(path) in str(caught.value)
    assert log.count() == 0


def test_an_unreadable_session_date_is_refused(log, tmp_path):
    turns = [_turn("Ann", "D1:1", "hello")]
    path = tmp_path / "date.json"
    path.write_text(json.dumps([_conversation(s1=("yesterday-ish", turns))]))

    with pytest.raises(IngestError, match="yesterday-ish") as caught:
        ingest(log, "locomo", path, progress=False)

    assert caught.value.location == "$[0].conversation.session_1_date_time"
    assert log.count() == 0


def test_a_json_syntax_error_names_line_and_column(log, tmp_path):
    path = tmp_path / "syntax.json"
    path.write_text('[\n  {"sample_id": "conv-x",\n   "conversation": }\n]\n')

    with pytest.raises(IngestError) as caught:
        ingest(log, "locomo", path, progress=False)

    assert caught.value.location == "line 3 column 20"
    assert log.count() == 0


def test_a_duplicate_dialog_id_is_refused(log, tmp_path):
    turns = [_turn("Ann", "D1:1", "hello"), _turn("Bo", "D1:1", "again")]
    path = tmp_path / "dup.json"
    path.write_text(json.dumps([_conversation(s1=("1:56 pm on 8 May, 2023", turns))]))

    with pytest.raises(IngestError, match="duplicate dialog id 'D1:1'"):
        ingest(log, "locomo", path, progress=False)
    assert log.count() == 0
