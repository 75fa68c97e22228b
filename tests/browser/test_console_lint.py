"""Trajectory lint flags live in chromium: a session's reply answers a request of the archive;
its finished turn reaches the console's span sink, the lint flags it, and the alert appears on
the open Alerts page without a reload; the session page's lint panel shows the flag with its
seqs and its alert, and the alert's link leads back to it."""

from __future__ import annotations

import pytest
from agent_fakes import ScriptedModel, reply
from playwright.sync_api import expect

from dashboard.telemetry.lint_alerts import LINT_KINDS
from dashboard.telemetry.models import AlertRule
from dashboard.telemetry.spans import LIVE_LINT_WAIT_S, ConsoleSpanSink
from scroll_core import telemetry
from scroll_core.agent import Session
from scroll_core.lint import recorded_turns
from scroll_core.profile import Profile
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

S = "lint-live"


@pytest.fixture
def sink(console_log):
    # The lint rules as their migration seeds them: an earlier transactional test on this
    # worker flushed the seeded rows.
    for kind in LINT_KINDS.values():
        AlertRule.objects.get_or_create(kind=kind, defaults={"threshold": 1, "window": 0})
    # As the process's sink: the session's turns linted together once they waited.
    sink = ConsoleSpanSink(lint_wait_s=LIVE_LINT_WAIT_S)
    telemetry.configure(sinks=[sink], ring_size=None, otlp=False)
    yield sink
    sink.flush(5.0)
    telemetry.reset()
    sink.close()


def test_a_lint_flag_is_raised_live_and_shown_on_the_session_page(strict_page, console_log, sink):
    page = strict_page
    page.goto(f"{page.base}/alerts/")
    expect(page.locator("#alerts-open tr.none")).to_be_visible()

    model = ScriptedModel(reply("Bonjour."), reply("Translate 'good morning': Bonjour!"))
    with Session(console_log, model, session_id=S, profile=Profile(context_size=16_000)) as agent:
        assert agent.ask("Translate 'good morning' into French.").ok
        assert agent.ask("What is 23 times 41? Reply with the number.").ok
    answer = recorded_turns(console_log, S)[1].answer

    row = page.locator("#alerts-open tr.alert")
    expect(row).to_have_count(1, timeout=15_000)  # pushed over the socket: no reload
    expect(row).to_contain_text("Lint: the reply answers the archive, not the live turn")
    expect(row).to_contain_text(f"seqs 1, 3, {answer.seq}")
    expect(page.locator("#alert-count")).to_have_text("1")
    shoot(page, "lint-alert")

    row.locator("a.lint-cell").click()
    page.wait_for_url(f"{page.base}/sessions/{S}/#lint-panel")
    flag = page.locator(f"#lint-archive_answered-{answer.seq}")
    expect(flag).to_contain_text("answers what the archive asked")
    expect(flag.locator("td").nth(2)).to_have_text(f"1, 3, {answer.seq}")
    expect(flag.locator(".lint-alert a")).to_have_text("open")
    shoot(page, "lint-session")

    flag.locator(".lint-alert a").click()
    page.wait_for_url(f"{page.base}/alerts/#alert-*")
    expect(page.locator("#alerts-open tr.alert")).to_have_count(1)
