"""Admin shows every time with its zone (issue 29): a list of runs or alerts said "Jan. 2,
2026, 3:04 a.m." and not whether that was UTC or the reader's time."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dashboard.runs.models import RunRecord
from dashboard.telemetry.models import Alert, AlertRule

pytestmark = pytest.mark.django_db

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.fixture
def admin_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("root", "root@example.invalid", "pw-root")
    client.force_login(user)
    return client


def test_the_runs_list_shows_each_runs_time_with_its_zone(admin_client):
    RunRecord.objects.create(session_id="s1", task="t", model_name="m", created_at=AT)

    page = admin_client.get("/admin/runs/runrecord/").content.decode()

    assert "2026-01-02 03:04:05 UTC" in page


def test_a_read_only_alert_shows_its_times_in_the_configured_zone(admin_client, settings):
    settings.TIME_ZONE = "Europe/Paris"
    rule = AlertRule.objects.get(kind=AlertRule.SPAN_REREAD)
    alert = Alert.objects.create(
        rule=rule, session_id="s1", message="m", first_seen=AT, last_seen=AT
    )

    listed = admin_client.get("/admin/telemetry/alert/").content.decode()
    form = admin_client.get(f"/admin/telemetry/alert/{alert.pk}/change/").content.decode()

    # 03:04 UTC is 04:04 in Paris in winter: the list's "last seen", the form's both times.
    assert "2026-01-02 04:04:05 CET" in listed
    assert form.count("2026-01-02 04:04:05 CET") == 2
