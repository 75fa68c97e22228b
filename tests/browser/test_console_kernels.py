"""The Kernels page in a real browser: Restart asks first, and only a confirmed restart is
done (and audited on the session's timeline)."""

from __future__ import annotations

import time

import pytest

from dashboard.runs import runner as runner_module

# What this checks is the page in a real browser (layout, scripts, what a user can reach),
# which the console's database and channel layer cannot change: it runs on the embedded
# pass only (tests/conftest.py, same_on_every_backend); the Redis live path is
# test_console_live.py's and test_console_redis.py's.
pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.same_on_every_backend,
]

CELL = "Run this.\n```python\nx = 6 * 7\nprint('answer', x)\n```"


def _wait_until(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def test_a_restart_is_done_only_once_the_operator_confirms_it(page, live_runner):
    from dashboard.runs.models import KernelAction

    runner, _ = live_runner
    run = runner_module.start_run(f"{CELL}\n---\n{CELL}", pause_s=300)
    sid = run.session_id
    _wait_until(lambda: any(k["session_id"] == sid for k in runner_module.kernel_statuses()))
    page.goto(page.base + "/kernels/")
    asked: list[str] = []
    posted: list[str] = []
    page.on("request", lambda r: posted.append(r.url) if r.method == "POST" else None)

    def answer(accept: bool):
        def handle(dialog) -> None:
            asked.append(dialog.message)
            dialog.accept() if accept else dialog.dismiss()

        return handle

    restart = page.locator(f"tr.kernel:has-text('{sid}') button:text-is('Restart')")
    page.once("dialog", answer(False))
    restart.click()
    _wait_until(lambda: len(asked) == 1)
    assert sid in asked[0]

    page.once("dialog", answer(True))
    restart.click()
    _wait_until(lambda: KernelAction.objects.filter(session_id=sid, action="restart").exists())
    _wait_until(lambda: runner.kernels.status()["sessions"][sid].restarts == 1)
    # Asked twice, sent once: the dismissed click sent nothing (a request it had sent would
    # have been made before the confirmed one's).
    assert len(asked) == 2
    assert [url.removeprefix(page.base) for url in posted] == [f"/kernels/restart/{sid}/"]
    assert KernelAction.objects.count() == 1
    runner_module.stop_run(sid)
    runner_module.wait_for_run(sid, 60)
