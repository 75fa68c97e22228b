"""A viewer (logged in, no permissions) in a real browser: the Runs page offers no start form,
and a start forced past the page is refused with a 403 that says what is missing."""

from __future__ import annotations

import pytest

from tests.browser.conftest import login, shoot
from tests.browser.test_console_csp import WATCH_VIOLATIONS, Watched

# What this checks is the page in a real browser (layout, scripts, what a user can reach),
# which the console's database and channel layer cannot change: it runs on the embedded
# pass only (tests/conftest.py, same_on_every_backend); the Redis live path is
# test_console_live.py's and test_console_redis.py's.
pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.same_on_every_backend,
]

# Builds and submits the start form the page does not show, with the page's own CSRF token.
FORCE_START = """
() => {
  const form = document.createElement("form");
  form.method = "post";
  form.action = "/runs/";
  const fields = {
    csrfmiddlewaretoken: document.querySelector("input[name=csrfmiddlewaretoken]").value,
    task: "Run this.\\n```python\\nprint(6 * 7)\\n```",
    profile: document.body.dataset.forcedProfile,
  };
  for (const [name, value] of Object.entries(fields)) {
    const input = document.createElement("input");
    input.type = "hidden"; input.name = name; input.value = value;
    form.appendChild(input);
  }
  document.body.appendChild(form);
  form.submit();
}
"""


@pytest.fixture
def viewer_page(browser, asgi_server, django_user_model):
    django_user_model.objects.create_user("viewer", password="pw-viewer-1")
    pg = login(browser, asgi_server, "viewer", "pw-viewer-1", bypass_csp=False)
    yield pg
    pg.context.close()


def test_a_viewer_sees_no_start_form_and_a_forced_start_gets_403(viewer_page, console_log):
    from dashboard.runs.models import RunRecord, TuningProfile

    page = viewer_page
    page.context.add_init_script(WATCH_VIOLATIONS)
    watched = Watched(page)
    watched.visit(page.base + "/runs/")
    assert page.locator("form.run").count() == 0
    assert page.locator("textarea[name=task]").count() == 0
    assert "start_run" in page.inner_text("#runs-read-only")
    shoot(page, "runs-viewer")

    page.evaluate(
        "id => { document.body.dataset.forcedProfile = id; }", str(TuningProfile.get_default().pk)
    )
    with page.expect_navigation() as navigation:
        page.evaluate(FORCE_START)

    assert navigation.value.status == 403

    assert page.locator("#denied").count() == 1
    denied = page.inner_text("#denied")
    assert "runs.start_run" in denied and "Operators" in denied
    # The browser logs the 403 itself; anything else (a CSP violation, a script error) fails.
    watched.problems = [p for p in watched.problems if "status of 403 (Forbidden)" not in p]
    watched.check("the 403 page")
    assert not RunRecord.objects.exists()
    shoot(page, "runs-viewer-403")


def test_a_viewer_sees_no_kernel_or_replay_save_controls(viewer_page, console_log):
    page = viewer_page
    page.goto(page.base + "/kernels/")
    assert page.locator("button", has_text="Restart").count() == 0
    page.goto(page.base + "/replay/")
    assert page.locator("button[name=save]").count() == 0


def test_an_operator_sees_the_start_form_with_a_choice_of_agent(
    browser, asgi_server, console_log, django_user_model
):
    from django.contrib.auth.models import Group

    console_log.append(session_id="old", agent_id="run-old", kind="context_msg", role="user",
                       content="an earlier run")  # fmt: skip
    user = django_user_model.objects.create_user("op", password="pw-op-12345")
    user.groups.add(Group.objects.get(name="Operators"))
    page = login(browser, asgi_server, "op", "pw-op-12345", bypass_csp=False)
    try:
        page.goto(page.base + "/runs/")
        assert page.locator("form.run textarea[name=task]").count() == 1
        options = page.locator("select[name=agent] option").all_inner_texts()
        assert options == ["a new agent of its own", "continue run-old"]
        assert page.locator("#task-code-off").count() == 0
    finally:
        page.context.close()
