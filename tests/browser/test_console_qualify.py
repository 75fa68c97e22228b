"""The Qualify pages in chromium: an operator starts a qualification of the rule-based
baseline and watches its scorecard fill in without a reload; two stored scorecards (scripted
endpoints over loopback HTTP) are picked from the list and compared side by side."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect
from qualify_endpoints import scorecard

from dashboard.qualify import service
from dashboard.qualify.models import Qualification
from scroll_core.models.policy import POLICY_NAME
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


def _qualified(name: str) -> Qualification:
    card = scorecard(name)
    q = service.create(model=card.model, upstream=card.upstream)
    q.record(card)
    return q


def test_an_operator_starts_one_and_its_scorecard_fills_in_live(strict_page):
    page = strict_page
    page.goto(f"{page.base}/qualify/")
    page.fill("#qualify-start input[name=model]", POLICY_NAME)
    page.click("#qualify-start button[type=submit]")
    page.wait_for_url(f"{page.base}/qualify/*/")
    page.evaluate("window.__marker = 'same page'")
    # The fragment polls itself until the suite is done; the page is never reloaded.
    expect(page.locator("#qualify-verdict")).to_contain_text("fail", timeout=60_000)
    assert page.evaluate("window.__marker") == "same page"
    expect(page.locator("#qualify-status")).to_have_text("done")
    expect(page.locator("#category-acting")).to_contain_text("0/3")
    expect(page.locator("#item-actingbind_filter")).to_have_class("fail")
    expect(page.locator("#item-protocolheadlines")).to_have_class("pass")
    shoot(page, "qualify-scorecard")


def test_two_scorecards_are_picked_and_compared(strict_page):
    good, archive = _qualified("competent"), _qualified("archive_answerer")
    page = strict_page
    page.goto(f"{page.base}/qualify/")
    page.check(f"#qualification-{good.pk} input[name=a]")
    page.check(f"#qualification-{archive.pk} input[name=b]")
    page.click("#qualify-compare-form button[type=submit]")
    page.wait_for_url(f"{page.base}/qualify/compare/*")
    expect(page.locator("#compare-verdict")).to_contain_text("pass")
    expect(page.locator("#compare-verdict td").nth(2)).to_have_text("fail")
    expect(page.locator("#compare-protocol")).to_contain_text("100.0% (4/4)")
    expect(page.locator("#compare-item-protocolseam")).to_have_class("differs")
    expect(page.locator("#compare-item-protocolseam")).to_contain_text("archived index")
    expect(page.locator("tr.differs")).to_have_count(1)
    shoot(page, "qualify-compare")


def test_the_session_page_shows_its_lint_flags(strict_page, console_log):
    from agent_fakes import ScriptedModel, repl, reply

    from scroll_core.agent import Session
    from scroll_core.kernel import Kernel, KernelConfig
    from scroll_core.profile import Profile

    table = "rows = [f'row {i:04d} ' + 'x' * 20 for i in range(400)]\nprint(rows)"
    model = ScriptedModel(reply("Look.", repl(table)), reply("Again.", repl(table)), reply("400."))
    with Kernel(KernelConfig(sandbox="process", grace_s=0.5)) as kernel, Session(
        console_log, model, session_id="lint-browser", kernel=kernel,
        profile=Profile(context_size=model.context_size, print_cap=500),
    ) as agent:  # fmt: skip
        assert agent.ask("How many rows?").ok
    page = strict_page
    page.goto(f"{page.base}/sessions/lint-browser/")
    flag = page.locator("#lint-flags tr.rule-window_refill")
    expect(flag).to_have_count(1)
    expect(flag).to_contain_text("variables persist")
    flag.locator("td a").first.click()  # the cell's event
    page.wait_for_url(f"{page.base}/events/*/")
    shoot(page, "qualify-lint-event")


def test_the_qualify_pages_fit_a_phone(strict_page):
    good = _qualified("competent")
    page = strict_page
    page.set_viewport_size({"width": 390, "height": 844})
    for url in ("/qualify/", f"/qualify/{good.pk}/", f"/qualify/compare/?a={good.pk}&b={good.pk}"):
        page.goto(page.base + url)
        overflow = page.evaluate(
            "(() => { const h = document.querySelector('header.top');"
            " return Math.max(h.scrollWidth - h.clientWidth,"
            " ...Array.from(h.querySelectorAll('a, button'), a =>"
            " a.getBoundingClientRect().right - window.innerWidth)); })()"
        )
        assert overflow <= 0, f"{url}: the header overflows by {overflow}px"
        wide = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert wide <= 0, f"{url}: the page scrolls sideways by {wide}px"
