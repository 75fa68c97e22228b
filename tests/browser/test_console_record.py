"""What the console shows as sent is what the upstream received (issue 29), in Debian's
chromium: a gateway session and a run against a scripted loopback upstream that logs each
request's bytes; the inspector's "sent" text of every call equals them, byte for byte."""

from __future__ import annotations

import pytest

from tests.browser.conftest import login

pytest.importorskip("playwright.sync_api")
# What this checks is the page in a real browser (layout, scripts, what a user can reach),
# which the console's database and channel layer cannot change: it runs on the embedded
# pass only (tests/conftest.py, same_on_every_backend); the Redis live path is
# test_console_live.py's and test_console_redis.py's.
pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.same_on_every_backend,
]


def _sent_texts(page, session_id: str, calls: int) -> list[str]:
    shown = []
    for n in range(calls):
        page.goto(f"{page.base}/sessions/{session_id}/calls/{n}/")
        page.wait_for_selector("#call-sent")
        shown.append(page.locator("#call-sent").text_content())
    return shown


def test_a_gateway_sessions_calls_show_what_the_upstream_received(
    browser, gateway, upstream, staff
):
    from gateway_clients import assistant_of, make_key, oa

    from dashboard.gateway.service import get_service
    from dashboard.record.read import session_calls
    from dashboard.runs.models import TuningProfile

    profile = TuningProfile.objects.create(name="gw-browser-record", context_size=2048)
    client = oa(gateway, make_key(upstream, profile=profile))
    history = [{"role": "system", "content": "You are terse. Ünïcödé ☃ welcome."}]
    for i in range(20):
        history.append({"role": "user", "content": f"turn {i}: " + "stack the boxes " * 30})
        raw = client.chat.completions.with_raw_response.create(model="gpt-test", messages=history)
        history.append(assistant_of(raw.parse()))
    get_service().flush()
    session = raw.headers["x-scroll-session"]
    calls = session_calls(session)
    assert len(calls) == len(upstream.raw) and any(c.view["blocks"] for c in calls)
    page = login(browser, gateway, "ops", "pw-ops-1", bypass_csp=False)
    assert _sent_texts(page, session, len(calls)) == [b.decode() for b in upstream.raw]


def test_a_runs_calls_show_what_the_endpoint_received(
    browser, live_runner, asgi_server, upstream, staff, monkeypatch
):
    from dashboard.record.read import session_calls
    from dashboard.runs import runner

    monkeypatch.setenv("SCROLL_MODEL_NAME", "upstream-model")
    monkeypatch.setenv("SCROLL_MODEL_BASE_URL", upstream.url)
    monkeypatch.setenv("SCROLL_MODEL_API_KEY", "sk-test")
    task = "\n---\n".join(f"question {i}: where did the crates go?" for i in range(4))
    run = runner.wait_for_run(runner.start_run(task, model="upstream-model").session_id, 60)
    assert run.status == "done", run.error
    calls = session_calls(run.session_id)
    assert len(calls) == len(upstream.raw) == 4
    page = login(browser, asgi_server, "ops", "pw-ops-1", bypass_csp=False)
    assert _sent_texts(page, run.session_id, len(calls)) == [b.decode() for b in upstream.raw]
