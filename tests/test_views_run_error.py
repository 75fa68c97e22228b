"""A failed run says why on the Runs page and on its session page (issue 30), not only in
admin: the error's first line, escaped, and the whole text in a ``<details>``."""

from __future__ import annotations

import pytest
from django.urls import reverse

from dashboard.runs.models import RunRecord

ERROR = (
    'OperationalError: connection to server at "127.0.0.1" failed: <b>refused</b>\n'
    "Traceback line two\n"
    "the last line"
)


@pytest.fixture
def client(client, db, django_user_model):
    user = django_user_model.objects.create_user("viewer", password="pw")
    client.force_login(user)
    return client


@pytest.fixture
def failed_run(db):
    return RunRecord.objects.create(
        session_id="s-failed", task="t", model_name="policy", status=RunRecord.FAILED, error=ERROR
    )


def _reason_shown(html: str) -> None:
    summary = (
        "<summary>OperationalError: connection to server at &quot;127.0.0.1&quot; failed: "
        "&lt;b&gt;refused&lt;/b&gt;</summary>"
    )
    assert summary in html
    assert "Traceback line two\nthe last line</pre></details>" in html
    assert "<b>refused</b>" not in html  # escaped, never markup


def test_the_runs_page_shows_why_a_run_failed(client, failed_run):
    html = client.get(reverse("runs")).content.decode()
    row = html[html.index(f'id="run-{failed_run.pk}"') :]
    _reason_shown(row[: row.index("</tr>")])


def test_the_session_page_header_shows_why_its_run_failed(client, console_log, failed_run):
    html = client.get(reverse("session", args=["s-failed"])).content.decode()
    header = html[html.index('id="session-summary"') :]
    _reason_shown(header[: header.index("</dl>")])


def test_a_run_without_an_error_shows_no_reason(client, db):
    run = RunRecord.objects.create(session_id="s-ok", task="t", model_name="policy")
    html = client.get(reverse("runs")).content.decode()
    row = html[html.index(f'id="run-{run.pk}"') :]
    assert "run-error" not in row[: row.index("</tr>")]
