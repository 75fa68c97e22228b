"""The console pages: login everywhere, alerts, traces, spans, escaping, vendored Plotly."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from dashboard.telemetry.models import Alert, AlertRule, SpanRecord

PAGES = ["home", "traces", "alerts", "kernels", "runs"]


@pytest.fixture
def viewer(db, django_user_model):
    return django_user_model.objects.create_user("viewer", password="pw")


@pytest.fixture
def client(client, viewer):
    client.force_login(viewer)
    return client


def _alert(session_id="s1", message="index gap at 12", state=Alert.OPEN):
    rule, _ = AlertRule.objects.get_or_create(kind=AlertRule.INDEX_GAP)
    return Alert.objects.create(rule=rule, session_id=session_id, message=message, state=state)


def _span(span_id="a" * 16, name="scroll.expand", session_id="s1", **extra):
    fields = {
        "trace_id": "b" * 32,
        "span_id": span_id,
        "name": name,
        "session_id": session_id,
        "start_ns": 1_700_000_000_000_000_000,
        "end_ns": 1_700_000_000_050_000_000,
        "duration_ms": 50.0,
        "status": "ok",
        "attributes": {"scroll.seq_lo": 3, "scroll.seq_hi": 9},
    }
    fields.update(extra)
    return SpanRecord.objects.create(**fields)


@pytest.mark.parametrize("name", PAGES)
def test_every_page_sends_anonymous_visitors_to_the_login_page(db, name):
    response = Client().get(reverse(name))

    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))


def test_login_page_logs_a_user_in(db, viewer):
    anonymous = Client()
    page = anonymous.get(reverse("login"))
    response = anonymous.post(reverse("login"), {"username": "viewer", "password": "pw"})

    assert page.status_code == 200
    assert response.status_code == 302
    assert anonymous.get(reverse("home")).status_code == 200


@pytest.mark.parametrize("name", PAGES)
def test_every_page_shows_the_open_alert_count_in_its_header(client, console_log, name):
    _alert()
    _alert(session_id="s2")
    _alert(session_id="s3", state=Alert.RESOLVED)

    html = client.get(reverse(name)).content.decode()

    assert '<span id="alert-count" class="badge hot" title="open alerts">2</span>' in html


def test_tuning_link_is_for_staff_only(client, admin_client, console_log):
    assert reverse("admin:index") not in client.get(reverse("home")).content.decode()
    assert reverse("admin:index") in admin_client.get(reverse("home")).content.decode()
    assert client.get(reverse("admin:index")).status_code == 302


def test_acknowledging_an_alert_records_who_and_moves_it(client, viewer):
    alert = _alert()

    response = client.post(reverse("alert_acknowledge", args=[alert.pk]))

    alert.refresh_from_db()
    assert response.status_code == 302
    assert alert.state == Alert.ACKNOWLEDGED
    assert alert.acknowledged_by == viewer
    html = client.get(reverse("alerts")).content.decode()
    assert f'id="alerts-acknowledged"><tr id="alert-{alert.pk}"' in html.replace("\n", "")


def test_resolving_an_alert_closes_it(client):
    alert = _alert()

    client.post(reverse("alert_resolve", args=[alert.pk]))

    alert.refresh_from_db()
    assert alert.state == Alert.RESOLVED


def test_alert_buttons_refuse_get_and_need_csrf(db, viewer):
    alert = _alert()
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(viewer)

    assert strict.get(reverse("alert_acknowledge", args=[alert.pk])).status_code == 405
    assert strict.post(reverse("alert_acknowledge", args=[alert.pk])).status_code == 403
    alert.refresh_from_db()
    assert alert.state == Alert.OPEN


def test_traces_filter_by_session_operation_errors_and_slow(client):
    _span("1" * 16, name="scroll.expand", session_id="s1", duration_ms=5.0)
    _span("2" * 16, name="scroll.search", session_id="s1", duration_ms=500.0)
    _span("3" * 16, name="scroll.expand", session_id="s2", status="error", duration_ms=7.0)

    def ids(**query):
        response = client.get(reverse("traces"), query)
        return sorted(s["span_id"] for s in response.context["spans"])

    assert ids() == ["1" * 16, "2" * 16, "3" * 16]
    assert ids(session="s2") == ["3" * 16]
    assert ids(op="scroll.expand") == ["1" * 16, "3" * 16]
    assert ids(errors="1") == ["3" * 16]
    assert ids(slow_ms="100") == ["2" * 16]


def test_traces_page_subscribes_with_its_filters(client):
    html = client.get(reverse("traces"), {"op": "scroll.evict", "errors": "1"}).content.decode()

    assert 'ws-connect="/ws/feed/?op=scroll.evict&amp;errors=1&amp;span_after=' in html


def test_span_detail_links_to_grafana_only_when_configured(client, settings):
    span = _span()
    settings.SCROLL_GRAFANA_URL = ""
    assert (
        "Open this trace in Grafana"
        not in client.get(reverse("span", args=[span.span_id])).content.decode()
    )

    settings.SCROLL_GRAFANA_URL = "http://grafana.local:3000"
    html = client.get(reverse("span", args=[span.span_id])).content.decode()

    assert 'href="http://grafana.local:3000/explore?' in html
    assert span.trace_id in html
    assert "scroll.seq_lo" in html


def test_unknown_span_is_404(client):
    assert client.get(reverse("span", args=["f" * 16])).status_code == 404


def test_event_content_with_html_and_script_is_shown_as_text(client, console_log):
    evil = '<script>window.pwned=1</script><img src=x onerror="alert(1)">'
    seq = console_log.append(session_id="evil", kind="context_msg", role="user", content=evil)

    for url in (reverse("session", args=["evil"]), reverse("event", args=[seq])):
        html = client.get(url).content.decode()
        assert "<script>window.pwned" not in html
        assert "<img src=x" not in html
        assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in html


def test_span_attributes_with_html_are_escaped(client):
    span = _span(attributes={"scroll.query": "<b>bold</b>"})

    html = client.get(reverse("span", args=[span.span_id])).content.decode()

    assert "<b>bold</b>" not in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html


def test_inline_expand_returns_the_whole_event_to_htmx(client, console_log):
    long_text = "x" * 700 + "THE END"
    seq = console_log.append(session_id="s", kind="tool_result", role="tool", content=long_text)

    page = client.get(reverse("session", args=["s"])).content.decode()
    fragment = client.get(reverse("event", args=[seq]), headers={"HX-Request": "true"})

    assert f'hx-get="/events/{seq}/"' in page and f'href="/events/{seq}/"' in page
    assert "THE END" in fragment.content.decode()
    assert "<html" not in fragment.content.decode()


def test_plotly_is_served_from_the_installed_package(client):
    response = client.get(reverse("plotly_js"))

    body = response.content
    assert response.status_code == 200
    assert response["Content-Type"] == "text/javascript"
    assert b"plotly" in body[:2000].lower()


def test_session_page_draws_budget_from_compress_events(client, console_log):
    from dashboard.runs.models import CompressEvent

    console_log.append(session_id="s", kind="context_msg", role="user", content="hi")
    CompressEvent.objects.create(
        session_id="s",
        action="evict",
        tokens_before=900,
        tokens_after=400,
        prefix_tokens=100,
        index_tokens=50,
        tail_tokens=250,
        trigger_tokens=800,
        context_size=1000,
    )

    response = client.get(reverse("session", args=["s"]))

    budget = response.context["budget"]
    names = [t["name"] for t in budget["data"]]
    assert names == ["prefix", "index", "digest", "folded", "tail", "trigger", "C"]
    assert budget["data"][5]["y"] == [800]
    assert budget["data"][6]["y"] == [1000]
    assert 'id="budget-data"' in response.content.decode()
    assert "/ws/sessions/" in response.content.decode()


def test_kernel_actions_need_the_control_kernel_permission(client):
    response = client.post(reverse("kernel_action", args=["restart", "s1"]))

    assert response.status_code == 403
    assert "runs.control_kernel" in response.content.decode()


def test_empty_alert_tables_say_none(client):
    _alert(state=Alert.OPEN)
    html = client.get(reverse("alerts")).content.decode()

    assert html.count('<tr class="none">') == 2  # acknowledged and resolved; open has a row


def test_a_span_without_a_recorded_error_shows_ok_and_an_error_shows_error(client):
    _span(span_id="1" * 16, status="unset")
    _span(span_id="2" * 16, status="error", status_message="boom")
    html = client.get(reverse("traces")).content.decode()

    assert '<td class="status status-ok">ok</td>' in html
    assert '<td class="status status-error">error: boom</td>' in html
    assert "unset" not in html
    assert "· ok</small>" in client.get(reverse("span", args=["1" * 16])).content.decode()
