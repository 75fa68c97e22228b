"""The console's own pages pass its Content-Security-Policy, in a real browser.

A real run (policy model, process-tier kernel, telemetry into the console's span sink) fills
the sessions, spans, compress records and replay data; then every page is visited logged in,
its live socket is waited for (and on the traces page a live row is swapped in), and the page
must have logged no console error, thrown nothing and reported no CSP violation.
"""

from __future__ import annotations

import time

import pytest

from dashboard.runs import runner as runner_module
from tests.browser.conftest import shoot

# What this checks is the page in a real browser (layout, scripts, what a user can reach),
# which the console's database and channel layer cannot change: it runs on the embedded
# pass only (tests/conftest.py, same_on_every_backend); the Redis live path is
# test_console_live.py's and test_console_redis.py's.
pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.same_on_every_backend,
]

CELL = "Compute.\n```python\nrows = [i * i for i in range(50)]\nprint('sum', sum(rows))\n```"
# The page's live socket is open (static/scroll.js marks the body).
LIVE = "body[data-live='open']"
# Records every CSP violation on the page before any of its own scripts run.
WATCH_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", function (e) {
  window.__csp.push(e.violatedDirective + " blocked " + (e.blockedURI || "inline") +
                    " at " + e.sourceFile + ":" + e.lineNumber);
});
"""


@pytest.fixture
def recorded_run(console_log, monkeypatch):
    """One finished run of two turns, with its spans persisted by the console's sink."""
    from dashboard.runs.models import RunRecord
    from dashboard.runs.worker import Worker
    from dashboard.telemetry.spans import ConsoleSpanSink
    from scroll_core import telemetry
    from scroll_core.kernel import KernelConfig, KernelManager

    kernels = KernelManager(KernelConfig(sandbox="process"), pool_size=0)
    runner = Worker(slots=1, kernels=kernels, poll_s=0.05).start()
    sink = ConsoleSpanSink()
    telemetry.configure(sinks=[sink], ring_size=None, otlp=False)
    try:
        run = runner_module.start_run(f"{CELL}\n---\nWhat was the sum of the rows?")
        run = runner_module.wait_for_run(run.session_id, 120)
        assert run.status == RunRecord.DONE, run.error
        sink.flush(5.0)
        yield run
    finally:
        runner.shutdown()
        sink.flush(5.0)
        telemetry.reset()
        sink.close()


class Watched:
    """Console errors, uncaught exceptions and CSP violations of one page."""

    def __init__(self, page) -> None:
        self.page = page
        self.problems: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.problems.append(f"pageerror: {exc}"))

    def _console(self, message) -> None:
        if message.type == "error":
            self.problems.append(f"console.error: {message.text}")

    def visit(self, url: str, *, live: bool = True) -> None:
        self.page.goto(url)
        self.page.wait_for_load_state("load")
        if live:
            self.page.wait_for_selector(LIVE, state="attached", timeout=10_000)
        self.check(url)

    def check(self, where: str) -> None:
        violations = self.page.evaluate("window.__csp || []")
        found = self.problems + [f"csp: {v}" for v in violations]
        self.problems = []
        assert not found, f"{where}: {found}"


def _send_span(session_id: str) -> None:
    from dashboard.groups import SPANS
    from dashboard.push import send_group

    now = time.time_ns()
    span = {
        "id": 10**9,
        "trace_id": "c" * 32,
        "span_id": "d" * 16,
        "parent_id": None,
        "name": "scroll.search",
        "start_ns": now - 1_000_000,
        "end_ns": now,
        "duration_ms": 1.0,
        "status": "ok",
        "status_message": None,
        "attributes": {"scroll.query": "<b>live</b>"},
        "session_id": session_id,
        "kind": "internal",
        "events": [],
    }
    assert send_group(SPANS, {"type": "span.finished", "span": span})


def test_every_console_page_passes_the_csp_with_no_console_errors(
    strict_page, recorded_run, console_log
):
    from datetime import timedelta

    from django.utils import timezone

    from dashboard.runs.models import KernelState, RunRecord, TuningProfile
    from dashboard.telemetry.models import Alert, AlertRule, SpanRecord

    page = strict_page
    page.context.add_init_script(WATCH_VIOLATIONS)
    watched = Watched(page)
    base, sid = page.base, recorded_run.session_id
    span = SpanRecord.objects.filter(session_id=sid).first()
    first_seq = console_log.session_events(sid, limit=1)[0].seq
    assert span is not None
    # Rows with controls: an open alert (htmx buttons) and a live kernel (restart, stop).
    rule, _ = AlertRule.objects.get_or_create(kind=AlertRule.INDEX_GAP)
    Alert.objects.create(rule=rule, session_id=sid, message="index gap at <b>12</b>")
    # A live kernel as its worker records it (the page reads the row, not a process), held
    # under a live lease.
    KernelState.objects.update_or_create(
        session_id=sid, defaults={"worker": "w", "tier": "process", "alive": True, "cells": 1}
    )
    RunRecord.objects.filter(session_id=sid).update(
        status=RunRecord.RUNNING, worker="w", lease_until=timezone.now() + timedelta(hours=1)
    )

    for path in (
        "/",
        "/?q=rows",
        f"/sessions/{sid}/",
        f"/sessions/{sid}/?q=sum",
        f"/events/{first_seq}/",
        "/traces/",
        f"/traces/spans/{span.span_id}/",
        "/alerts/",
        "/kernels/",
        "/runs/",
        "/replay/",
        f"/replay/?session={sid}&policy=scroll",
    ):
        watched.visit(base + path)
    # The session page drew its Plotly charts under the policy.
    page.goto(f"{base}/sessions/{sid}/")
    page.wait_for_selector("#budget-chart .main-svg", timeout=10_000)
    page.wait_for_selector(LIVE, state="attached", timeout=10_000)
    watched.check("session charts")
    page.goto(f"{base}/replay/?session={sid}&policy=scroll&trigger_ratio=0.6")
    page.wait_for_selector("#replay-budget-chart .main-svg", timeout=10_000)
    watched.check("replay chart")
    shoot(page, "csp-replay")

    # A live row swapped in over the socket passes too (htmx, the ws extension, scroll.js).
    page.goto(f"{base}/traces/")
    page.wait_for_selector(LIVE, state="attached", timeout=10_000)
    _send_span(sid)
    page.wait_for_selector("#span-rows >> text=scroll.search", timeout=10_000)
    watched.check("live traces")

    # The inline expand on the session page (an htmx GET swapping in a fragment).
    page.goto(f"{base}/sessions/{sid}/")
    page.wait_for_selector(LIVE, state="attached", timeout=10_000)
    expand = page.locator("[hx-get*='/events/']").first
    if expand.count():
        expand.click()
        page.wait_for_load_state("networkidle")
    watched.check("inline expand")

    # Tuning (Django admin) is part of the console too.
    profile = TuningProfile.get_default()
    for path in ("/admin/", f"/admin/runs/tuningprofile/{profile.pk}/change/"):
        watched.visit(base + path, live=False)

    # Acknowledging the alert through its htmx button, and the page after it.
    watched.visit(base + "/alerts/")
    page.click("button[name=acknowledge]")
    page.wait_for_load_state("networkidle")
    watched.check("alert acknowledged")
    assert page.locator("button", has_text="Restart").count() == 0  # not on the alerts page
    watched.visit(base + "/kernels/")
    assert page.locator("button", has_text="Restart").count() == 1

    # And the login page after logging out.
    page.click("form.logout button")
    watched.visit(base + "/login/", live=False)
