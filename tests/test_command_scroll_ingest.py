from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from scroll_core import open_event_store
from tests.conftest import REPO

CHAT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2 + 2?"},
    {"role": "assistant", "content": "4"},
]


def _ingest(*args):
    out = StringIO()
    call_command("scroll_ingest", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def chat_file(tmp_path):
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(CHAT), encoding="utf-8")
    return path


def test_it_ingests_a_file_and_prints_the_report(console_store, chat_file):
    output = _ingest("--format", "openai", str(chat_file))

    assert console_store.count() == 3
    [summary] = console_store.sessions()
    assert "3 events read, 3 appended, 0 already present" in output
    assert f"session {summary.session_id}" in output


def test_session_option_files_events_under_that_id(console_store, chat_file):
    _ingest("--format", "openai", "--session", "demo:run/1", str(chat_file))

    assert console_store.count("demo:run/1") == 3


def test_ingesting_the_same_file_again_appends_nothing(console_store, chat_file):
    _ingest("--format", "openai", str(chat_file))
    output = _ingest("--format", "openai", str(chat_file))

    assert console_store.count() == 3
    assert "0 appended, 3 already present" in output


def test_a_malformed_file_is_a_command_error_and_ingests_nothing(console_store, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([*CHAT, {"role": "user"}, "not a message"]), encoding="utf-8")

    with pytest.raises(CommandError) as caught:
        _ingest("--format", "openai", str(path))

    assert str(path) in str(caught.value)
    assert console_store.count() == 0


def test_a_missing_file_is_a_command_error(console_store, tmp_path):
    with pytest.raises(CommandError, match=r"nothere\.json"):
        _ingest("--format", "openai", str(tmp_path / "nothere.json"))

    assert console_store.count() == 0


def test_an_unknown_format_is_refused(console_store, chat_file):
    with pytest.raises(CommandError, match="invalid choice"):
        _ingest("--format", "word-doc", str(chat_file))


def test_a_failed_import_exits_non_zero_with_its_reason(request, backend, tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"role": "user", "content": "hi"}\n{not json\n', encoding="utf-8")
    env = {**os.environ, "SCROLL_DATA_DIR": str(tmp_path / "data")}
    env.pop("SCROLL_EVENTLOG_URL", None)
    if backend == "postgres":
        env["SCROLL_EVENTLOG_URL"] = request.getfixturevalue("pg_url")

    result = subprocess.run(
        [sys.executable, "manage.py", "scroll_ingest", "--format", "openai", str(path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode != 0
    assert f"CommandError: {path}:line 2: invalid JSON" in result.stderr
    target = env.get("SCROLL_EVENTLOG_URL") or tmp_path / "data" / "eventlog.sqlite3"
    with open_event_store(target) as log:
        assert log.count() == 0


def test_it_ingests_a_claude_code_transcript_from_shared_data(console_store, shared_data):
    _ingest("--format", "claude-code", str(shared_data / "claude-code" / "session_b.jsonl"))

    assert console_store.count() > 0


def test_a_malformed_claude_code_transcript_names_the_line(console_store, shared_data):
    with pytest.raises(CommandError, match=r"edge_cases\.jsonl:line \d+"):
        _ingest("--format", "claude-code", str(shared_data / "claude-code" / "edge_cases.jsonl"))

    assert console_store.count() == 0
