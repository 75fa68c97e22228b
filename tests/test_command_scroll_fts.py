from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from scroll_core import EventLog
from tests.conftest import REPO


def _fts(*args: str) -> str:
    out = StringIO()
    call_command("scroll_fts", *args, stdout=out)
    return out.getvalue()


def _fill(log: EventLog) -> None:
    log.append_many(
        {"session_id": "s", "kind": "context_msg", "content": f"note {i} about billing"}
        for i in range(30)
    )


def _events(log: EventLog) -> list[tuple]:
    db = sqlite3.connect(log.path)
    try:
        return db.execute("SELECT * FROM events ORDER BY seq").fetchall()
    finally:
        db.close()


def test_check_reports_a_sound_index(console_log):
    _fill(console_log)
    assert "FTS index OK: 30 events indexed" in _fts("check")


def test_check_fails_on_a_damaged_index_and_rebuild_mends_it(console_log):
    _fill(console_log)
    events = _events(console_log)
    db = sqlite3.connect(console_log.path, isolation_level=None)
    db.execute("DELETE FROM events_fts_docsize WHERE id > 20")
    db.close()

    with pytest.raises(CommandError, match=r"10 searchable event.* missing.*scroll_fts rebuild"):
        _fts("check")
    assert "FTS index rebuilt: 30 events indexed" in _fts("rebuild")
    assert "FTS index OK: 30 events indexed" in _fts("check")
    assert _events(console_log) == events


def test_optimize_leaves_search_and_events_as_they_were(console_log):
    _fill(console_log)
    events = _events(console_log)
    hits = console_log.search("billing", k=5)
    assert "FTS index optimized" in _fts("optimize")
    assert console_log.search("billing", k=5) == hits
    assert _events(console_log) == events


def test_an_unknown_action_is_refused(console_log):
    with pytest.raises(CommandError, match="invalid choice"):
        _fts("vacuum")


def test_a_failed_check_exits_non_zero_with_a_clear_message(tmp_path):
    data = tmp_path / "data"
    with EventLog(data / "eventlog.sqlite3") as log:
        _fill(log)
    db = sqlite3.connect(data / "eventlog.sqlite3", isolation_level=None)
    db.execute("UPDATE events_fts_data SET block = zeroblob(length(block)) WHERE id > 10")
    db.close()
    env = {**os.environ, "SCROLL_DATA_DIR": str(data)}

    result = subprocess.run(
        [sys.executable, "manage.py", "scroll_fts", "check"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode != 0
    assert "the full-text index failed its integrity check" in result.stderr
    assert "scroll_fts rebuild" in result.stderr
