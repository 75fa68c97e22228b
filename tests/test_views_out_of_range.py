"""Ids and cursors beyond what the databases hold are 404s (or a clear 400), never 500s; a
console search that runs past its time limit says so on the page."""

from __future__ import annotations

import pytest

from dashboard.console import live
from dashboard.runs.models import RunRecord, TuningProfile
from dashboard.telemetry.models import Alert, AlertRule
from scroll_core.store import EventLog

NINES = "9" * 30


@pytest.fixture
def client(client, db, django_user_model):
    user = django_user_model.objects.create_user("viewer", password="pw")
    client.force_login(user)
    client.raise_request_exception = False
    return client


@pytest.fixture
def staff_client(admin_client):
    admin_client.raise_request_exception = False
    return admin_client


def _fill(log: EventLog, n: int = 200) -> None:
    log.append_many(
        {"session_id": "alpha", "kind": "context_msg", "content": f"billing deploy {i} went fine"}
        for i in range(n)
    )


@pytest.mark.parametrize("seq", [NINES, str(2**63), str(2**63 - 1), "0"])
def test_an_event_beyond_any_seq_is_404(client, console_log, seq):
    console_log.append(session_id="alpha", kind="context_msg", content="x")
    assert client.get(f"/events/{seq}/").status_code == 404


def test_a_session_cursor_beyond_any_seq_is_404(client, console_log):
    console_log.append(session_id="alpha", kind="context_msg", content="x")
    assert client.get("/sessions/alpha/", {"after": NINES}).status_code == 404
    # The largest seq SQLite can hold is still a cursor: an empty page after it.
    page = client.get("/sessions/alpha/", {"after": str(2**63 - 1)})
    assert page.status_code == 200 and page.context["events"] == []


@pytest.mark.parametrize("cursor", ["-3", "²", "1e9", "0x10"])
def test_a_malformed_session_cursor_is_a_clear_400(client, console_log, cursor):
    console_log.append(session_id="alpha", kind="context_msg", content="x")
    response = client.get("/sessions/alpha/", {"after": cursor})
    assert response.status_code == 400
    assert b"after must be a non-negative integer" in response.content


@pytest.mark.parametrize("profile", ["abc", NINES, "-1", "4242", "²"])
def test_a_run_naming_no_profile_is_404_and_starts_nothing(staff_client, console_log, profile):
    response = staff_client.post("/runs/", {"task": "say hi", "profile": profile})
    assert response.status_code == 404
    assert RunRecord.objects.count() == 0


def test_a_run_naming_no_profile_at_all_still_asks_for_one(staff_client, console_log):
    response = staff_client.post("/runs/", {"task": "say hi", "profile": ""}, follow=True)
    assert response.status_code == 400
    assert "A run needs a task and a profile." in response.content.decode()
    assert TuningProfile.objects.filter(pk=0).count() == 0


@pytest.mark.parametrize("action", ["acknowledge", "resolve"])
def test_an_alert_id_beyond_any_id_is_404_and_changes_nothing(client, action):
    rule = AlertRule.objects.first() or AlertRule.objects.create(
        name="gap", kind="index_gap", enabled=True
    )
    alert = Alert.objects.create(rule=rule, session_id="s", message="m", state=Alert.OPEN)
    assert client.post(f"/alerts/{NINES}/{action}/").status_code == 404
    alert.refresh_from_db()
    assert alert.state == Alert.OPEN


def test_a_span_id_that_names_no_span_is_404(client):
    assert client.get(f"/traces/spans/{NINES}/").status_code == 404


@pytest.mark.parametrize("raw", [NINES, str(2**63), "-1", "²", "", None, "1.5"])
def test_live_cursors_beyond_any_id_or_malformed_are_ignored(raw):
    assert live.int_cursor(raw) is None


def test_live_cursors_in_range_are_kept():
    assert live.int_cursor(" 42 ") == 42
    assert live.int_cursor(str(2**63 - 1)) == 2**63 - 1


def test_the_feed_catch_up_reads_sessions_written_after_the_cursor(console_log):
    console_log.append(session_id="old", kind="context_msg", content="x")
    cursor = console_log.last_seq()
    console_log.append(session_id="b", kind="context_msg", content="x")
    console_log.append(session_id="a", kind="context_msg", content="x")
    # The most recently written last: each row moves to the top of the table in turn.
    assert live.sessions_changed_since(cursor, None) == ["b", "a"]
    assert live.sessions_changed_since(2**63 - 1, None) == []


def test_a_search_past_the_time_limit_says_so_on_the_home_page(client, console_log, settings):
    _fill(console_log)
    settings.SCROLL_CONSOLE_SEARCH_TIMEOUT_S = 0
    response = client.get("/", {"q": "billing deploy"})
    assert response.status_code == 200
    html = response.content.decode()
    assert "The search took longer than 0 s and was stopped. Narrow it" in html
    assert response.context["hits"] == []
    assert "No events match." not in html


def test_a_search_past_the_time_limit_says_so_on_the_session_page(client, console_log, settings):
    _fill(console_log)
    settings.SCROLL_CONSOLE_SEARCH_TIMEOUT_S = 0
    response = client.get("/sessions/alpha/", {"q": "billing deploy"})
    assert response.status_code == 200
    assert "The search took longer than 0 s and was stopped." in response.content.decode()
    # The rest of the page is there: the session's events still render.
    assert len(response.context["events"]) > 0


def test_a_search_within_the_time_limit_shows_its_hits(client, console_log, settings):
    _fill(console_log)
    settings.SCROLL_CONSOLE_SEARCH_TIMEOUT_S = 60
    response = client.get("/", {"q": "billing deploy"})
    assert response.context["search_error"] is None
    assert len(response.context["hits"]) == 50
