"""Every console page at a phone's width (390 x 844, issue 29): nothing sticks out of the
screen, so an operator reads and acts without scrolling sideways.

One finished session of the policy model (evictions, compresses, spans stored by the console's
span sink), a gateway session, a running run whose kernel lives, and open and acknowledged
alerts give each page rows to draw. One browser page visits every page in turn and collects
what sticks out; the test fails once, listing all of it.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.browser.conftest import SCREENSHOTS, shoot

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

WIDTH, HEIGHT = 390, 844
S = "phone:session-1"
GATEWAY = "phone:gateway-1"
RUNNING = "phone:running-1"
# Sub-pixel rounding of borders and of Plotly's responsive width.
SLACK = 1.5
QUESTIONS = ["What is Ann's cat called?", "Where does Pepper nap?", "Does Ann play the piano?"]

# What sticks out of the screen: the page scrolling sideways, and any element drawn left of
# 0 or right of the screen's edge, even inside a container that scrolls (its content is then
# out of sight until the operator scrolls it). Plotly's own SVG parts are clipped by the chart.
OUT_OF_SCREEN = """(slack) => {
  const vw = document.documentElement.clientWidth;
  const found = [];
  const sw = document.documentElement.scrollWidth;
  if (sw > vw + slack) found.push(`the page is ${sw}px wide`);
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
    + (el.classList.length ? '.' + Array.from(el.classList).join('.') : '');
  for (const el of document.querySelectorAll('header.top *, main *')) {
    const chart = el.closest('.js-plotly-plot');
    if (chart && chart !== el) continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    if (r.left < -slack || r.right > vw + slack) {
      const parent = el.parentElement ? name(el.parentElement) + ' > ' : '';
      found.push(`${parent}${name(el)} at ${Math.round(r.left)}..${Math.round(r.right)}`);
    }
  }
  return found;
}"""

# A chart's legend covering its x axis (the budget chart's dates) or its plot, and a bar
# slot with nothing drawn in it (a span never read back, drawn as a zero-height bar).
CHART_FAULTS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).flatMap(chart => {
  const found = [];
  const box = el => el.getBoundingClientRect();
  const legend = chart.querySelector('.legend');
  if (legend) {
    const l = box(legend);
    const covers = r => r.width > 0 && r.height > 0 && l.left < r.right && r.left < l.right
      && l.top < r.bottom && r.top < l.bottom;
    const parts = {'.xtick text': 'an x axis label', '.g-xtitle text': 'the x axis title',
                   '.nsewdrag': 'the plot'};
    Object.entries(parts).forEach(([selector, what]) => {
      if (Array.from(chart.querySelectorAll(selector)).some(el => covers(box(el)))) {
        found.push(`${chart.id}: its legend covers ${what}`);
      }
    });
  }
  const bars = chart.data.filter(t => t.type === 'bar');
  if (bars.length) {
    const slots = new Set(bars.flatMap(t => t.x)).size;
    const drawn = Array.from(chart.querySelectorAll('.barlayer .point path'))
      .filter(p => box(p).height >= 2).length;
    if (drawn < slots) found.push(`${chart.id}: ${slots - drawn} of ${slots} bars not visible`);
  }
  return found;
})"""

# The narrowest visible element of a selector, and where the leftmost one starts.
COLUMN = """(selector) => {
  const boxes = Array.from(document.querySelectorAll(selector), el => el.getBoundingClientRect())
    .filter(r => r.width > 0 && r.height > 0);
  if (!boxes.length) return null;
  return {width: Math.min(...boxes.map(r => r.width)), left: Math.min(...boxes.map(r => r.left))};
}"""


@pytest.fixture
def phone_data(console_log, staff):
    """The finished session (S), a gateway session, a running run with a live kernel and two
    alerts; returns what the pages need to name (a chat span, its trace, an event's seq)."""
    from dashboard.runs.models import (
        CompressEvent,
        KernelState,
        RunRecord,
        SessionIndex,
        TuningProfile,
    )
    from dashboard.telemetry.models import Alert, AlertRule, SpanRecord
    from dashboard.telemetry.spans import ConsoleSpanSink
    from scroll_core import telemetry
    from scroll_core.agent import Session
    from scroll_core.kernel import Kernel, KernelConfig
    from scroll_core.models import PolicyModel
    from scroll_core.models.policy import POLICY_NAME
    from scroll_core.store import KIND_CONTEXT_MSG

    profile = TuningProfile.objects.create(
        name="phone", context_size=4096, protected_recent_tool_results=1
    )
    record = RunRecord.objects.create(
        session_id=S, agent_id="agent-phone", task="Answer questions about Ann's diary.",
        profile=profile, model_name=POLICY_NAME, status=RunRecord.RUNNING,
        started_at=timezone.now(),
    )  # fmt: skip
    for turn in range(90):
        text = "My cat Pepper naps on the piano." if turn == 5 else f"Day {turn}: a quiet walk."
        console_log.append(session_id=S, agent_id="agent-phone", kind=KIND_CONTEXT_MSG,
                           role="user", name="Ann", content=text)  # fmt: skip

    def save(step):
        for item in step.compressions:
            CompressEvent.from_step(record, S, step.turn, step.step, item, None).save()

    sink = ConsoleSpanSink()
    telemetry.configure(sinks=[sink], ring_size=None, otlp=False)
    try:
        with (
            Kernel(KernelConfig(sandbox="process")) as kernel,
            Session(
                console_log,
                PolicyModel(context_size=4096),
                session_id=S,
                agent_id="agent-phone",
                profile=profile.to_core(),
                kernel=kernel,
                on_step=save,
            ) as agent,
        ):
            for question in QUESTIONS:
                assert agent.ask(question).ok
            index = agent.state.index
            SessionIndex.objects.create(session_id=S, data=index.to_checkpoint(), blocks=len(index))
    finally:
        sink.flush(5.0)
        telemetry.reset()
        sink.close()
    record.status, record.ended_at = RunRecord.DONE, timezone.now()
    record.evictions = CompressEvent.objects.filter(session_id=S).exclude(evicted_lo=None).count()
    record.save()
    assert record.evictions >= 1, "the session should evict, so the index has rows"

    # A gateway session: a client's turns, no task code, its kernel in a web process.
    RunRecord.objects.create(
        session_id=GATEWAY, agent_id="agent-gateway", task="(gateway)", kind="gateway",
        model_name="gpt-4o-mini", status=RunRecord.RUNNING, task_code=False,
        started_at=timezone.now(),
    )  # fmt: skip
    for i in range(3):
        console_log.append(session_id=GATEWAY, agent_id="agent-gateway", kind=KIND_CONTEXT_MSG,
                           role="user", content=f"Question {i} from the client.")  # fmt: skip
    KernelState.objects.create(
        session_id=GATEWAY, worker="gateway:web-process-1234", tier="process", alive=True,
        cells=2, last_status="ok", layers="rlimits",
    )  # fmt: skip
    # A run that a worker holds right now: its kernel has the Restart/Stop/... buttons.
    RunRecord.objects.create(
        session_id=RUNNING, agent_id="agent-running", task="A long task " * 20,
        profile=profile, model_name=POLICY_NAME, status=RunRecord.RUNNING,
        worker="worker-host-1:4242", lease_until=timezone.now() + timedelta(hours=1),
        started_at=timezone.now(),
    )  # fmt: skip
    KernelState.objects.create(
        session_id=RUNNING, worker="worker-host-1:4242", tier="process", alive=True, pid=4242,
        memory_bytes=52_000_000, started_at=time.time() - 60, cells=7, last_status="ok",
        layers="rlimits, seccomp, landlock", missing_layers=["bubblewrap"],
    )  # fmt: skip

    rule, _ = AlertRule.objects.get_or_create(kind=AlertRule.SPAN_REREAD)
    alert = Alert.objects.create(
        rule=rule, session_id=S, key="t1:12-40", count=3,
        message="Evicted span 12-40 was re-read 3 times instead of computed in the kernel.",
    )  # fmt: skip
    Alert.objects.create(
        rule=rule, session_id=RUNNING, key="t1:2-9", state=Alert.ACKNOWLEDGED,
        message="Evicted span 2-9 was re-read twice.", acknowledged_by=staff,
        acknowledged_at=timezone.now(),
    )  # fmt: skip

    chat = SpanRecord.objects.filter(session_id=S, name__startswith="chat ").last()
    assert chat is not None, "the session's model calls should be stored as chat spans"
    seq = console_log.session_events(S, limit=1)[0].seq
    return {"chat": chat, "seq": seq, "alert": alert}


def _pages(data) -> list[str]:
    chat = data["chat"]
    return [
        "/",
        "/?q=piano",
        f"/sessions/{S}/",
        f"/sessions/{S}/?q=piano",
        f"/sessions/{GATEWAY}/",
        f"/events/{data['seq']}/",
        f"/sessions/{S}/calls/0/",
        f"/sessions/{S}/calls/",  # redirects to the last call, which has an index
        "/traces/",
        f"/traces/?session={S}",
        f"/traces/spans/{chat.span_id}/",
        f"/traces/{chat.trace_id}/",
        "/alerts/",
        "/runs/",
        "/kernels/",
        "/replay/",
        f"/replay/?session={S}",
        "/no-such-page/",
    ]


def _shot_name(path: str, chat) -> str:
    """A screenshot's name, the same from run to run (ids differ)."""
    path = path.replace(S, "session").replace(GATEWAY, "gateway")
    path = path.replace(chat.span_id, "span").replace(chat.trace_id, "trace")
    return "phone-" + ("".join(c if c.isalnum() else "-" for c in path).strip("-") or "home")


# The columns an operator reads, and the least width each needs to be read (issue 29: the
# inspector's text column was 36 px wide, the event log's content started at x = 545).
COLUMNS = {
    f"/sessions/{S}/": ["table.events td.preview"],
    f"/sessions/{S}/calls/0/": ["table.window-parts td.preview"],
    f"/sessions/{S}/calls/": ["table.window-parts td.preview"],
    "/alerts/": ["table.alerts td.msg"],
    "/traces/": ["table.spans td.attrs"],
}
MIN_COLUMN = 300


def test_every_console_page_fits_a_phone_screen(browser, asgi_server, phone_data):
    chat = phone_data["chat"]
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
    problems: dict[str, list[str]] = {}

    def visit(path: str) -> None:
        page.goto(asgi_server + path)
        page.wait_for_load_state("load")
        found = []
        if page.locator(".chart[data-figure]").count():
            page.wait_for_selector(".chart .main-svg", timeout=10_000)
            found += page.evaluate(CHART_FAULTS)
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            charts = page.locator(".chart[data-figure]").first.locator("xpath=..")
            charts.screenshot(path=str(SCREENSHOTS / f"{_shot_name(path, chat)}-charts.png"))
        # What an operator can unfold must fit as well (attributes, the raw JSON, costs).
        page.evaluate("document.querySelectorAll('main details').forEach(d => { d.open = true; })")
        for selector in COLUMNS.get(path, ()):
            column = page.evaluate(COLUMN, selector)
            if column is None:
                found.append(f"no {selector} on the page")
            elif column["width"] < MIN_COLUMN or column["left"] < 0:
                found.append(
                    f"{selector} is {column['width']:.0f}px wide at x={column['left']:.0f}"
                )
        found += page.evaluate(OUT_OF_SCREEN, SLACK)
        shoot(page, _shot_name(path, chat))
        if found:
            problems[path] = found

    try:
        visit("/login/")
        page.fill("input[name=username]", "ops")
        page.fill("input[name=password]", "pw-ops-1")
        page.click("button[type=submit]")
        page.wait_for_url(asgi_server + "/")
        for path in _pages(phone_data):
            visit(path)
        # Acting at this width: acknowledge the open alert; its row moves live to the
        # acknowledged table, and its cells are named by their columns like the page's.
        row = f"#alert-{phone_data['alert'].pk}"
        page.goto(asgi_server + "/alerts/")
        page.wait_for_selector("body[data-live='open']", state="attached", timeout=10_000)
        page.click(f"#alerts-open {row} button[name=acknowledge]")
        page.wait_for_selector(f"#alerts-acknowledged {row}", timeout=10_000)
        labels = page.evaluate(
            f"Array.from(document.querySelectorAll('{row} td'), td => td.dataset.label || '')"
        )
        assert labels == ["last seen", "rule", "session", "message", "count", "state", ""]
        shown = page.evaluate(
            f"getComputedStyle(document.querySelector('{row} td.num'), '::before').content"
        )
        assert shown == '"count "'
        if found := page.evaluate(OUT_OF_SCREEN, SLACK):
            problems["/alerts/ after acknowledging"] = found
        # Django's admin has its own narrow-screen styles (its tables scroll in their box);
        # the page itself must not scroll sideways.
        for path in ("/admin/", "/admin/runs/runrecord/", "/admin/telemetry/alert/"):
            page.goto(asgi_server + path)
            width = page.evaluate("document.documentElement.scrollWidth")
            if width > WIDTH + SLACK:
                problems[path] = [f"the page is {width}px wide"]
    finally:
        context.close()
    report = "\n".join(
        f"{path}: {len(found)} faults, e.g. " + "; ".join(found[:6])
        for path, found in problems.items()
    )
    assert not problems, f"at {WIDTH}px:\n{report}"
    assert errors == []
