"""A Playwright page on Debian's chromium, against the live ASGI server of tests/conftest.py
(daphne, in a thread of the test process, so the test shares its in-memory channel layer
and database).

Without chromium or the playwright package the browser tests skip and say why.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"


# Module scope: Playwright's sync API keeps an event loop running in the main thread while it
# is open, which would stop the async tests that run after this module.
@pytest.fixture(scope="module")
def browser(django_db_setup, django_db_blocker):
    if not (os.path.exists(CHROMIUM) and shutil.which(CHROMIUM)):
        pytest.skip(f"Debian's chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright package is not installed (pip install -e '.[dev]')")
    # Playwright's sync API keeps an event loop running in this thread, which Django takes
    # for an async context; the tests' ORM calls are plain synchronous ones (Django's docs
    # give this setting for exactly this case).
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def staff(transactional_db, django_user_model):
    return django_user_model.objects.create_superuser("ops", "ops@example.invalid", "pw-ops-1")


def login(browser, base: str, username: str, password: str, *, bypass_csp: bool = True):
    """A new browser context logged in as ``username``, and its page (``page.base`` = URL).

    ``bypass_csp`` lets Playwright's ``wait_for_function`` poll (it compiles its predicate,
    which the console's ``script-src 'self'`` forbids); the CSP tests pass False and wait on
    selectors instead.
    """
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, bypass_csp=bypass_csp)
    pg = context.new_page()
    pg.base = base
    pg.goto(base + "/login/")
    pg.fill("input[name=username]", username)
    pg.fill("input[name=password]", password)
    pg.click("button[type=submit]")
    pg.wait_for_url(base + "/")
    return pg


@pytest.fixture
def page(browser, asgi_server, staff, settings, tmp_path):
    """A logged-in page (staff); ``page.base`` is the server's URL."""
    pg = login(browser, asgi_server, "ops", "pw-ops-1")
    yield pg
    pg.context.close()


@pytest.fixture
def strict_page(browser, asgi_server, staff):
    """Like ``page``, with the console's CSP enforced (no ``wait_for_function``)."""
    pg = login(browser, asgi_server, "ops", "pw-ops-1", bypass_csp=False)
    yield pg
    pg.context.close()


def shoot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
