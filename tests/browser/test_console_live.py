"""The console in a real browser: login, live updates without reload, alerts, escaping."""

from __future__ import annotations

import time

import pytest

from dashboard.groups import ALERTS, session_group, session_safe_id
from dashboard.span_frames import spans_message
from tests.browser.conftest import shoot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SID = "demo:incident-1"


def _span(name, span_id, **attributes):
    now = time.time_ns()
    return {
        "trace_id": "b" * 32,
        "span_id": span_id,
        "parent_id": None,
        "name": name,
        "start_ns": now - 5_000_000,
        "end_ns": now,
        "duration_ms": 5.0,
        "status": "ok",
        "status_message": None,
        "attributes": attributes,
        "session_id": SID,
        "kind": "internal",
        "events": [],
    }


def _send(group, message):
    """Send from this (non-server) thread as the span sink's worker does: the message goes
    through dashboard.telemetry.spans, which hands it to the server's event loop."""
    from dashboard.push import send_group, server_loop

    assert server_loop() is not None, "the page's socket should have recorded daphne's loop"
    assert send_group(group, message)


def _wait_live(page):
    page.wait_for_function("document.body.dataset.live === 'open'", timeout=10_000)


def test_login_is_required(browser, asgi_server, transactional_db):
    context = browser.new_context()
    pg = context.new_page()
    pg.goto(asgi_server + "/traces/")
    assert "/login/" in pg.url
    shoot(pg, "login")
    context.close()


def test_a_new_eviction_reaches_the_timeline_as_the_row_a_reload_renders(page, console_log):
    from dashboard.runs.models import CompressEvent

    console_log.append(session_id=SID, kind="context_msg", role="user", content="find the outage")
    page.goto(f"{page.base}/sessions/{SID}/")
    _wait_live(page)
    page.evaluate("window.__marker = 'same page'")
    assert page.is_visible("#timeline-empty")

    # The span arrives in the feed; the compress record it stands for reaches the timeline.
    _send(
        session_group(SID),
        {
            "type": "span.finished",
            "span": _span("scroll.evict", "e" * 16, **{"scroll.seq_lo": 1, "scroll.seq_hi": 40}),
        },
    )
    page.wait_for_selector(f"#span-{'e' * 16}", timeout=10_000)
    record = CompressEvent.objects.create(
        session_id=SID,
        action="evict",
        tokens_before=5000,
        tokens_after=2100,
        trigger_tokens=4800,
        evicted_lo=1,
        evicted_hi=40,
    )
    _send(session_group(SID), {"type": "session.changed", "session_id": SID, "summary": {}})

    page.wait_for_selector(f"#timeline #compress-{record.pk}", timeout=10_000)
    assert page.evaluate("window.__marker") == "same page"
    assert not page.is_visible("#timeline-empty")
    live_row = page.inner_html(f"#compress-{record.pk}")
    assert "evicted 1–40" in live_row and "scroll.seq_hi" not in live_row
    shoot(page, "session")
    page.reload()
    assert page.inner_html(f"#compress-{record.pk}") == live_row


def test_event_content_with_html_and_script_is_shown_as_text(page, console_log):
    evil = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'
    console_log.append(session_id="evil", kind="context_msg", role="user", content=evil)

    page.goto(f"{page.base}/sessions/evil/")

    assert page.evaluate("window.pwned") is None
    assert evil in page.inner_text("table.events")


def test_an_alert_is_raised_live_and_acknowledged(page):
    from dashboard.telemetry.models import Alert, AlertRule

    page.goto(f"{page.base}/alerts/")
    _wait_live(page)
    assert page.inner_text("#alert-count") == "0"
    assert page.is_visible("#alerts-open tr.none")

    rule, _ = AlertRule.objects.get_or_create(kind=AlertRule.SPAN_REREAD)
    alert = Alert.objects.create(rule=rule, session_id=SID, message="t0:1-40 re-read 3 times")
    _send(ALERTS, {"type": "alert.changed", "alert": alert.to_dict()})

    page.wait_for_function("document.getElementById('alert-count').textContent === '1'")
    page.wait_for_selector(f"#alerts-open #alert-{alert.pk}")
    assert not page.is_visible("#alerts-open tr.none")
    shoot(page, "alerts")
    # Acknowledged, the row moves to the next table in one swap: a MutationObserver on both
    # tables never sees it missing or twice.
    page.evaluate(
        """(id) => {
            window.__seen = [];
            const count = () => window.__seen.push(document.querySelectorAll("#" + id).length);
            const watch = new MutationObserver(count);
            for (const t of ["alerts-open", "alerts-acknowledged"]) {
                watch.observe(document.getElementById(t), {childList: true});
            }
        }""",
        f"alert-{alert.pk}",
    )
    page.click(f"#alert-{alert.pk} button[name=acknowledge]")
    page.wait_for_selector(f"#alerts-acknowledged #alert-{alert.pk}")
    seen = page.evaluate("window.__seen")
    assert seen and set(seen) == {1}
    assert page.is_visible("#alerts-open tr.none")
    assert not page.is_visible("#alerts-acknowledged tr.none")

    alert.refresh_from_db()
    assert alert.state == Alert.ACKNOWLEDGED
    assert alert.acknowledged_by.username == "ops"
    assert page.inner_text("#alert-count") == "0"


def test_traces_stream_spans_live(page):
    page.goto(f"{page.base}/traces/")
    _wait_live(page)

    _send(
        "scroll.spans",
        {"type": "span.finished", "span": _span("scroll.expand", "f" * 16, **{"scroll.seq_lo": 7})},
    )

    page.wait_for_selector(f"#span-{'f' * 16}", timeout=10_000)
    # A batch from a busy sink, as it sends one (rows rendered once, one frame): every row
    # lands, the newest on top.
    batch = [_span("scroll.search", c * 16, **{"scroll.query": c}) for c in "123"]
    _send("scroll.spans", spans_message(batch))
    page.wait_for_selector(f"#span-{'3' * 16}", timeout=10_000)
    ids = page.eval_on_selector_all("#span-rows tr", "rows => rows.map(r => r.id)")
    assert ids[:4] == [f"span-{c * 16}" for c in "321f"]
    shoot(page, "traces")


def test_main_pages_render(page, console_log):
    console_log.append(session_id=SID, kind="context_msg", role="user", content="hello")
    for name, path in (("sessions", "/"), ("kernels", "/kernels/"), ("runs", "/runs/")):
        page.goto(page.base + path)
        assert page.locator("#alert-count").count() == 1
        shoot(page, name)
    assert session_safe_id(SID)


def test_a_changed_session_moves_to_the_top_and_is_never_missing_on_the_way(page, console_log):
    # Two sessions; the older one (second row) gets a new event. A MutationObserver records
    # how many rows carry its id after every batch of changes the page makes: moved in one
    # swap, it is never seen missing (nor twice) between removal and insertion.
    console_log.append(session_id="run:older", kind="context_msg", role="user", content="a")
    console_log.append(session_id="run:newer", kind="context_msg", role="user", content="b")
    older = f"session-{session_safe_id('run:older')}"
    page.goto(page.base + "/")
    _wait_live(page)
    rows = "#session-rows > tr.session"
    assert page.locator(rows).nth(1).get_attribute("id") == older
    page.evaluate(
        """(id) => {
            window.__seen = [];
            new MutationObserver(() => {
                window.__seen.push(document.querySelectorAll("#" + CSS.escape(id)).length);
            }).observe(document.getElementById("session-rows"), {childList: true});
        }""",
        older,
    )
    console_log.append(session_id="run:older", kind="context_msg", role="user", content="c")
    _send("scroll.spans", {"type": "session.changed", "session_id": "run:older", "summary": {}})
    page.wait_for_function(
        "(id) => document.querySelector('#session-rows > tr.session').id === id", arg=older
    )
    assert page.locator(f"#{older}").count() == 1
    assert page.locator(rows).count() == 2
    seen = page.evaluate("window.__seen")
    assert seen and set(seen) == {1}


def test_a_brand_new_session_appears_in_the_sessions_table_without_reloading(page, console_log):
    page.goto(page.base + "/")
    _wait_live(page)
    page.evaluate("window.__marker = 'same page'")
    assert page.locator("#sessions-empty").count() == 1

    console_log.append(session_id="run:fresh", kind="context_msg", role="user", content="go")
    _send("scroll.spans", {"type": "session.changed", "session_id": "run:fresh", "summary": {}})

    page.wait_for_selector(f"#session-rows #session-{session_safe_id('run:fresh')}")
    assert page.locator("#sessions-empty").count() == 0
    assert page.evaluate("window.__marker") == "same page"
