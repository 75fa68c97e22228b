"""Real runs in the browser: tuning a live session from admin, and the demo's evictions.

The runs go through dashboard.runs.runner (process-tier kernels, the policy model) with telemetry
wired to the console's span sink, so spans reach the page the way they do in `make run`.
"""

from __future__ import annotations

import threading
import time

import pytest
from playwright.sync_api import expect

from dashboard.groups import session_safe_id
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

CELL = "Next.\n```python\nx = 6 * 7\nprint('answer', x)\n```"


def _wait_live(page):
    page.wait_for_function("document.body.dataset.live === 'open'", timeout=10_000)


def _shows(page, element_id, text, timeout=30_000):
    page.wait_for_function(
        "([id, t]) => document.getElementById(id).innerText.includes(t)",
        arg=[element_id, text],
        timeout=timeout,
    )


def test_a_trigger_ratio_changed_in_admin_takes_effect_at_the_next_compress(page, live_runner):
    from dashboard.runs.models import RunRecord, TuningProfile
    from dashboard.telemetry.models import SpanRecord

    profile = TuningProfile.objects.create(name="small", context_size=6000)
    gate = threading.Event()

    def hold() -> str:
        # The run waits here, between compresses, while the operator edits the profile.
        return "tuned" if gate.wait(30) else "timed out"

    task = f"Wait for the operator.\n```python\nprint(ops.hold())\n```\n---\n{CELL}"
    run = runner_module.start_run(task, profile, host_functions={"ops.hold": hold})
    # The turn's first compress is stored (the page renders it) and the run waits in ops.hold.
    deadline = time.monotonic() + 30
    spans = SpanRecord.objects.filter(session_id=run.session_id, name="scroll.compress")
    while not spans.exists() and time.monotonic() < deadline:
        time.sleep(0.1)

    page.goto(f"{page.base}/sessions/{run.session_id}/")
    _wait_live(page)
    page.evaluate("window.__marker = 'same page'")
    # That compress triggered at 0.8 x 6,000.
    _shows(page, "span-rows", "scroll.trigger_tokens=4800")

    admin = page.context.new_page()
    admin.goto(f"{page.base}/admin/runs/tuningprofile/{profile.pk}/change/")
    admin.fill("input[name=trigger_ratio]", "0.5")
    admin.click("input[name=_save]")
    admin.wait_for_selector(".messagelist .success")
    shoot(admin, "admin-profile")
    admin.close()
    # Without a reload, before the run's next step: the change is on the timeline ...
    page.wait_for_selector("#timeline li.timeline-profile", timeout=10_000)
    assert "trigger_ratio: 0.8 → 0.5 by ops" in page.inner_text("#timeline li.timeline-profile")
    live_change = page.inner_html("#timeline li.timeline-profile")
    gate.set()
    # ... and the session picks it up at its next compress, which triggers at 0.5 x 6,000.
    _shows(page, "span-rows", "scroll.trigger_tokens=3000")
    _shows(page, "span-rows", "scroll.profile.applied")
    # The header follows without a reload: the trigger, and the run's end.
    _shows(page, "session-summary", "/ 3000 / 6000")
    _shows(page, "run-status", "done")
    assert page.evaluate("window.__marker") == "same page"

    run = runner_module.wait_for_run(run.session_id, 60)
    assert run.status == RunRecord.DONE, run.error
    assert run.trigger_tokens == 3000
    page.reload()
    # The recorded change (who, old and new) is on the timeline, the trigger in the summary.
    # The recorded change (who, old and new) reloads as the row that arrived live.
    assert page.inner_html("#timeline li.timeline-profile") == live_change
    assert "/ 3000 / 6000" in page.inner_text("dl.summary")
    shoot(page, "session-tuned")


def test_the_demo_session_shows_evictions_in_the_index_panel(page, live_runner):
    from dashboard.runs import demo
    from dashboard.runs.models import RunRecord

    run = demo.start_demo(pause_s=0.2)

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.evictions >= 1 or run.status not in RunRecord.ACTIVE:
            break
        time.sleep(0.5)
    assert run.evictions >= 1, (run.status, run.error)

    page.goto(f"{page.base}/sessions/{run.session_id}/")
    rows = page.locator("table.index tbody tr")
    assert rows.count() >= 1
    first = rows.first.inner_text()
    assert "–" in first  # a seq range
    assert page.locator("#timeline li").count() >= 1
    shoot(page, "demo-session")
    page.goto(f"{page.base}/")
    # Retried, not read once: while the run goes on, each change moves its row to the top in
    # two frames (removed, then inserted), and a single read can fall between them.
    expect(page.locator(f"#session-{session_safe_id(run.session_id)}")).to_have_count(1)
    runner_module.stop_run(run.session_id)
