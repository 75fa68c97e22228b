"""Every live element stays live, every page is clean, at 1280 px and at 390 px (issue 11).

One real demo run (policy model, process-tier kernel, telemetry into the console's span sink)
waits at its first turn while three pages open under the console's CSP: its session page at
1280 px, the Runs page at 390 px and the Kernels page at 1280 px. Then it goes on, and each
live figure must change on the page that was already open: the session header, the index
table, the budget chart (updated in place, its layout kept), the timeline, the kernel's cell
count, the run's status. Afterwards every page is visited at both widths: no console error,
no uncaught exception, the navigation inside the screen, every input pattern valid.
"""

from __future__ import annotations

import threading
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

WIDE, NARROW = 1280, 390
LIVE = "body[data-live='open']"
# Long enough for a demo run on a loaded two-core machine; each wait ends on its condition.
RUN_TIMEOUT_S = 240


class Watched:
    """A logged-in page of a given width whose console errors and exceptions are kept."""

    def __init__(self, browser, base: str, width: int) -> None:
        self.context = browser.new_context(viewport={"width": width, "height": 900})
        self.page = self.context.new_page()
        self.base, self.width = base, width
        self.problems: list[str] = []
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda exc: self.problems.append(f"pageerror: {exc}"))
        self.page.goto(base + "/login/")
        self.page.fill("input[name=username]", "ops")
        self.page.fill("input[name=password]", "pw-ops-1")
        self.page.click("button[type=submit]")
        self.page.wait_for_url(base + "/")

    def _console(self, message) -> None:
        if message.type == "error":
            self.problems.append(f"console.error: {message.text}")

    def open(self, path: str, *, live: bool = True) -> None:
        self.page.goto(self.base + path)
        self.page.wait_for_load_state("load")
        if live:
            self.page.wait_for_selector(LIVE, state="attached", timeout=10_000)

    def value(self, expression: str):
        return self.page.evaluate(expression)

    def wait_until(self, expression: str, what: str, timeout_s: float = RUN_TIMEOUT_S) -> None:
        """Poll ``expression`` in the page (evaluate works under the CSP, where Playwright's
        wait_for_function would need eval) until it is truthy."""
        deadline = time.monotonic() + timeout_s
        while not self.page.evaluate(expression):
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.width}px: {what} did not happen live")
            self.page.wait_for_timeout(100)

    def check(self, where: str, *, expected_404: bool = False) -> None:
        found = self.problems
        if expected_404:
            found = [p for p in found if "status of 404" not in p]
        self.problems = []
        assert not found, f"{self.width}px {where}: {found}"
        # The navigation fits the screen: nothing in the header sticks out to the right.
        overflow = self.value(
            "(() => { const h = document.querySelector('header.top');"
            " return h ? Math.max(h.scrollWidth - h.clientWidth,"
            " ...Array.from(h.querySelectorAll('a, button'), a =>"
            " a.getBoundingClientRect().right - window.innerWidth)) : 0; })()"
        )
        assert overflow <= 0, f"{self.width}px {where}: the header overflows by {overflow}px"
        # Chromium compiles pattern="" with the v flag and ignores one that fails.
        bad = self.value(
            "Array.from(document.querySelectorAll('input[pattern]')).filter(i => {"
            " try { new RegExp('^(?:' + i.pattern + ')$', 'v'); return false; }"
            " catch (e) { return true; } }).map(i => i.pattern)"
        )
        assert bad == [], f"{self.width}px {where}: patterns the browser rejects: {bad}"

    def close(self) -> None:
        self.context.close()


def _figure_points(page: Watched) -> int:
    return page.value(
        "(() => { const el = document.getElementById('budget-chart');"
        " return el && el.data && el.data.length ? el.data[0].x.length : -1; })()"
    )


def test_every_live_figure_changes_without_reload_and_every_page_is_clean(
    browser, asgi_server, staff, live_runner, console_log
):
    from dashboard.runs import demo, demo_data
    from dashboard.runs.models import RunRecord
    from dashboard.telemetry.models import SpanRecord

    profile = demo.demo_profile()
    holding, gate = threading.Event(), threading.Event()

    def hold() -> str:
        holding.set()
        return "go" if gate.wait(60) else "timed out"

    first = "Wait for the operator.\n```python\nprint(ops.hold())\n```"
    run = runner_module.start_run(
        first,
        profile,
        None,
        kind="demo",
        turns=[first, *demo.TURNS],
        host_functions=demo_data.host_functions() | {"ops.hold": hold},
        pause_s=0.2,
    )
    assert holding.wait(60), "the run should reach its first cell"
    sid = run.session_id

    wide, narrow, kernels = (
        Watched(browser, asgi_server, WIDE),
        Watched(browser, asgi_server, NARROW),
        Watched(browser, asgi_server, WIDE),
    )
    try:
        wide.open(f"/sessions/{sid}/")
        wide.page.wait_for_selector("#budget-chart .main-svg", timeout=10_000)
        wide.value(
            "window.__marker = 'same page';"
            " window.__chart = document.getElementById('budget-chart');"
            " window.__events = document.getElementById('session-events').textContent;"
        )
        points = _figure_points(wide)
        narrow.open("/runs/")
        narrow.value("window.__marker = 'same page'")
        assert narrow.value(f"document.querySelector('#run-{run.pk} .run-status').textContent") in (
            "running",
            "queued",
        )
        kernels.open("/kernels/")
        kernels.value("window.__marker = 'same page'")
        cells = kernels.value("document.querySelector('#kernel-rows .kernel-cells').textContent")
        shoot(wide.page, "live-session-before")

        gate.set()

        # The session page: header, timeline, index table, the chart updated in place.
        wide.wait_until(
            "document.getElementById('session-events').textContent !== window.__events",
            "the header's event count changing",
        )
        wide.wait_until(
            "document.querySelector('#timeline li.timeline-compress')", "a timeline entry"
        )
        wide.wait_until(
            "document.querySelector('#session-index table.index tbody tr')", "an index row"
        )
        wide.wait_until(f"(() => {{ {_POINTS} }})() > {points}", "a new budget chart point")
        assert wide.value("document.getElementById('budget-chart') === window.__chart")
        assert (
            wide.value("document.getElementById('budget-chart').layout.yaxis.title.text")
            == "tokens"
        )
        assert wide.value("!!document.querySelector('#budget-chart .legend')")
        assert wide.value(
            "document.getElementById('retrieval-chart').layout.yaxis.title.text"
        ).startswith("retrievals")
        wide.wait_until(
            "document.getElementById('run-evictions').textContent !== '0'",
            "evictions in the header",
        )
        # The Kernels page: the cell count moves.
        kernels.wait_until(
            "(() => { const c = document.querySelector('#kernel-rows .kernel-cells');"
            f" return c && c.textContent !== {cells!r}; }})()",
            "the kernel's cell count changing",
        )
        # The Runs page (390 px): the run's row turns "done".
        narrow.wait_until(
            f"document.querySelector('#run-{run.pk} .run-status').textContent === 'done'",
            "the run's status turning done",
        )
        wide.wait_until("document.getElementById('run-status').textContent === 'done'", "done")
        # The index table and the retrieval chart agree on every evicted span.
        table = wide.value(
            "Array.from(document.querySelectorAll('#session-index tbody tr'),"
            " r => [r.dataset.block, Number(r.lastElementChild.textContent)])"
        )
        bars = wide.value(
            "(() => { const d = document.getElementById('retrieval-chart').data[0];"
            " return d.x.map((k, i) => [k, d.y[i]]); })()"
        )
        assert table and all(row in bars for row in table), (table, bars)
        for watched in (wide, narrow, kernels):
            assert watched.value("window.__marker") == "same page"
            watched.check("after the live updates")
        shoot(wide.page, "live-session-after")
        shoot(narrow.page, "live-runs-390")
        shoot(kernels.page, "live-kernels")

        run = RunRecord.objects.get(pk=run.pk)
        assert run.status == RunRecord.DONE, run.error
        span = SpanRecord.objects.filter(session_id=sid).first()
        seq = console_log.session_events(sid, limit=1)[0].seq
        pages = [
            "/",
            "/?q=pool",
            f"/sessions/{sid}/",
            f"/sessions/{sid}/?q=pool",
            f"/sessions/{sid}/?none=1",
            f"/events/{seq}/",
            "/traces/",
            f"/traces/spans/{span.span_id}/",
            "/alerts/",
            "/kernels/",
            "/runs/",
            "/replay/",
            f"/replay/?session={sid}&policy=scroll",
        ]
        for watched in (wide, narrow):
            for path in pages:
                watched.open(path)
                if path.startswith("/sessions/") and "?" not in path:
                    watched.page.wait_for_selector("#budget-chart .main-svg", timeout=10_000)
                watched.check(path)
                # Stable names: the session and span ids differ from run to run.
                name = path.replace(sid, "session").replace(span.span_id, "span")
                name = "".join(c if c.isalnum() else "-" for c in name).strip("-") or "home"
                shoot(watched.page, f"page-{watched.width}-{name[:60]}")
            for path in ("/admin/", f"/admin/runs/tuningprofile/{profile.pk}/change/"):
                watched.open(path, live=False)
                watched.check(path)
            watched.open("/no-such-page/", live=False)
            assert watched.page.locator("#not-found").count() == 1
            assert watched.page.locator("nav.main a").count() >= 5
            watched.check("404", expected_404=True)
            shoot(watched.page, f"page-{watched.width}-404")
    finally:
        gate.set()
        for watched in (wide, narrow, kernels):
            watched.close()


_POINTS = (
    "const el = document.getElementById('budget-chart');"
    " return el && el.data && el.data.length ? el.data[0].x.length : -1;"
)
