"""The bench's span load endpoint: off unless SCROLL_BENCH, loopback and staff only."""

from __future__ import annotations

import json
import time

import pytest
from django.http import Http404
from django.test import RequestFactory

from dashboard.console import benchload, views
from dashboard.telemetry.models import SpanRecord
from dashboard.telemetry.spans import ConsoleSpanSink
from scroll_core import telemetry


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_superuser("b", "b@example.invalid", "pw")


def _post(user, remote="127.0.0.1", **data):
    request = RequestFactory().post("/bench/load/", data, REMOTE_ADDR=remote)
    request.user = user
    return request


@pytest.mark.django_db
def test_it_is_not_there_unless_the_bench_started_the_server(staff, settings):
    settings.SCROLL_BENCH = False
    with pytest.raises(Http404):
        views.bench_load(_post(staff))


@pytest.mark.django_db
def test_it_refuses_other_hosts_and_non_staff(staff, settings, django_user_model):
    settings.SCROLL_BENCH = True
    with pytest.raises(Http404):
        views.bench_load(_post(staff, remote="10.0.0.8"))
    viewer = django_user_model.objects.create_user("v", password="pw")
    assert views.bench_load(_post(viewer)).status_code == 302  # to the admin login


@pytest.mark.django_db
def test_bounds_are_checked(staff, settings):
    settings.SCROLL_BENCH = True
    response = views.bench_load(_post(staff, sessions=1, rate=10, seconds=10_000))
    assert response.status_code == 400
    assert "seconds" in json.loads(response.content)["error"]


@pytest.mark.django_db(transaction=True)
def test_spans_go_through_the_sink_at_the_asked_rate(staff, settings):
    settings.SCROLL_BENCH = True
    sink = ConsoleSpanSink(linger_s=0.0)
    telemetry.configure(sinks=[sink], ring_size=None, otlp=False)
    try:
        response = views.bench_load(_post(staff, sessions=2, rate=50, seconds=0.4))
        assert response.status_code == 202
        load = benchload.get_load(json.loads(response.content)["id"])
        deadline = time.monotonic() + 5
        while not load.done and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sink.flush(5.0)
    finally:
        telemetry.reset()
        sink.close()
    assert load.done and not load.error
    counts = load.to_dict()["counts"]
    assert set(counts) == {"bench:s000", "bench:s001"}
    # Paced by the clock, so how many fit depends on the machine; what does not: every
    # session gets the same count each tick, and never more than rate x seconds.
    assert len(set(counts.values())) == 1
    assert all(1 <= n <= 50 * 0.4 for n in counts.values())
    assert SpanRecord.objects.filter(name=benchload.BENCH_SPAN).count() == sum(counts.values())


@pytest.mark.django_db
def test_an_unknown_mode_is_refused(staff, settings):
    settings.SCROLL_BENCH = True
    response = views.bench_load(_post(staff, sessions=1, rate=10, seconds=1, mode="fast"))
    assert response.status_code == 400
    assert "mode" in json.loads(response.content)["error"]


@pytest.mark.django_db
def test_the_channels_baseline_sends_ready_rows_to_the_session_groups(staff, settings):
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from dashboard.groups import session_group

    settings.SCROLL_BENCH = True
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(session_group("bench:s001"), channel)

    response = views.bench_load(_post(staff, sessions=2, rate=50, seconds=0.2, mode="channels"))
    assert response.status_code == 202
    load = benchload.get_load(json.loads(response.content)["id"])
    while not load.done:  # bounded: the load ends itself after 0.2 s
        time.sleep(0.01)

    assert not load.error and load.to_dict()["mode"] == "channels"
    sent = load.counts["bench:s001"]
    got = [async_to_sync(layer.receive)(channel) for _ in range(sent)]
    assert sent >= 1 and all(m["type"] == benchload.BENCH_FRAME for m in got)
    assert all('data-name="bench.span"' in m["html"] for m in got)
    assert SpanRecord.objects.filter(name=benchload.BENCH_SPAN).count() == 0  # no Scroll path
