"""The console's smaller faults (issue 11), each with the view test that would have caught it."""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from dashboard.console import session_live
from dashboard.runs.models import CompressEvent, RunRecord, TuningProfile


@pytest.fixture
def client(client, db, django_user_model):
    user = django_user_model.objects.create_user("viewer", password="pw")
    client.force_login(user)
    return client


def _compress(session_id, action, at, **fields):
    return CompressEvent.objects.create(session_id=session_id, action=action, at=at, **fields)


# ------------------------------------------------------------------------------ search
def _many(log, session_id, n, word="outage"):
    for i in range(n):
        log.append(session_id=session_id, kind="context_msg", role="user", content=f"{word} {i}")


def test_search_past_fifty_hits_pages_on_and_says_there_are_more(client, console_log):
    _many(console_log, "s1", 120)

    first = client.get("/", {"q": "outage"})
    html = first.content.decode()
    assert len(first.context["hits"]) == 50
    # Not "50 hits": the search stopped there, and says so.
    assert "50+ hits" in html
    assert "?q=outage&amp;hits=2" in html

    second = client.get("/", {"q": "outage", "hits": "2"})
    seqs = {h.seq for h in second.context["hits"]}
    assert len(seqs) == 50 and not seqs & {h.seq for h in first.context["hits"]}
    assert "100+ hits" in second.content.decode()

    last = client.get("/", {"q": "outage", "hits": "3"})
    assert len(last.context["hits"]) == 20
    assert "120 hits" in last.content.decode()  # the true count once every hit is known
    assert "hits=4" not in last.content.decode()


def test_search_stops_paging_at_its_depth_and_says_how_many_it_ranked(client, console_log):
    _many(console_log, "s1", 210)

    last = client.get("/", {"q": "outage", "hits": "4"}).content.decode()
    assert "200+ hits" in last and "hits=5" not in last
    assert client.get("/", {"q": "outage", "hits": "5"}).status_code == 404


def test_a_malformed_hits_page_is_a_404_not_a_500(client, console_log):
    _many(console_log, "s1", 3)
    for bad in ("0", "-1", "x", "99999999999"):
        assert client.get("/", {"q": "outage", "hits": bad}).status_code == 404


def test_a_neighbour_boosted_hit_lacking_the_term_is_marked(client, console_log):
    console_log.append(session_id="s1", kind="context_msg", role="user", content="the pager")
    console_log.append(session_id="s1", kind="context_msg", role="user", content="zebra outage")
    console_log.append(session_id="s1", kind="context_msg", role="user", content="the pager 2")

    response = client.get("/", {"q": "zebra"})

    unmatched = [h for h in response.context["hits"] if not h.matched]
    assert unmatched, "the turns beside a match rank by it"
    html = response.content.decode()
    assert html.count('class="hit neighbour"') == len(unmatched)
    assert html.count("near a match</span>") == len(unmatched)


def test_in_session_search_keeps_the_time_and_role_columns(client, console_log):
    console_log.append(
        session_id="s1",
        kind="context_msg",
        role="assistant",
        content="outage found",
        created_at="2024-01-02T03:04:05Z",
    )

    html = client.get("/sessions/s1/", {"q": "outage"}).content.decode()
    head = html[html.index('id="search-hits"') :]
    head = head[: head.index("</thead>")]
    assert "<th>time</th>" in head and "<th>role / name</th>" in head
    assert "2024-01-02T03:04:05.000Z" in html
    assert ">assistant</td>" in html


# ---------------------------------------------------------------------------- timeline
def test_the_timeline_pages_past_its_newest_twenty_and_hides_compress_none(client, console_log):
    console_log.append(session_id="s1", kind="context_msg", role="user", content="go")
    start = timezone.now() - timedelta(hours=1)
    evicts = [
        _compress("s1", "evict", start + timedelta(seconds=2 * i), evicted_lo=i, evicted_hi=i)
        for i in range(30)
    ]
    nones = [_compress("s1", "none", start + timedelta(seconds=2 * i + 1)) for i in range(30)]

    first = client.get("/sessions/s1/")
    page = first.context["timeline"]
    assert [e.item.pk for e in page.entries] == [c.pk for c in evicts[::-1][:20]]
    html = first.content.decode()
    assert "show 30 “compress none” rows" in html
    assert 'href="?timeline=2#timeline"' in html

    older = client.get("/sessions/s1/", {"timeline": "2"}).context["timeline"]
    assert [e.item.pk for e in older.entries] == [c.pk for c in evicts[::-1][20:]]
    assert older.older_page is None and older.newer_page == 1

    every = client.get("/sessions/s1/", {"none": "1"}).context["timeline"]
    assert {e.item.pk for e in every.entries} == {c.pk for c in evicts[20:] + nones[20:]}


def test_profile_changes_interleave_with_compresses_by_time(db):
    profile = TuningProfile.objects.create(name="t1")
    started = timezone.now() - timedelta(minutes=5)
    run = RunRecord.objects.create(
        session_id="s1", task="x", profile=profile, model_name="m", started_at=started
    )
    before = _compress("s1", "evict", started + timedelta(seconds=1))
    change = profile.changes.create(field="trigger_ratio", old_value="0.8", new_value="0.5")
    change.changed_at = started + timedelta(seconds=2)
    change.save()
    after = _compress("s1", "evict", started + timedelta(seconds=3))

    page = session_live.timeline_page("s1", run)
    assert [e.dom_id for e in page.entries] == [
        f"compress-{after.pk}",
        f"profile-change-{change.pk}",
        f"compress-{before.pk}",
    ]
    # Live: only what came after the cursors.
    entries, compress_after, change_after, action_after = session_live.timeline_after(
        "s1", run, before.pk, 0, 0
    )
    assert [e.dom_id for e in entries] == [f"compress-{after.pk}", f"profile-change-{change.pk}"]
    assert (compress_after, change_after, action_after) == (after.pk, change.pk, 0)
    assert session_live.timeline_after("s1", run, compress_after, change_after, 0)[0] == []


def test_a_malformed_timeline_page_is_a_404(client, console_log):
    console_log.append(session_id="s1", kind="context_msg", role="user", content="go")
    assert client.get("/sessions/s1/", {"timeline": "abc"}).status_code == 404


# ---------------------------------------------------------------------- retrieval chart
def test_blocks_never_retrieved_are_drawn_and_merged_blocks_keep_their_retrievals():
    blocks = [
        {"key": "t1:1-80", "lo_seq": 1, "hi_seq": 80},
        {"key": "t0:81-120", "lo_seq": 81, "hi_seq": 120},
    ]
    # Two expands hit t0:1-40 before it merged into t1:1-80; one hit a block now gone.
    counts = Counter({"t0:1-40": 2, "t0:500-600": 1})

    rows = session_live.retrievals_per_block(blocks, counts)

    assert rows == [("t1:1-80", 2), ("t0:81-120", 0), ("t0:500-600", 1)]
    figure = session_live.retrieval_figure(rows)
    bar = figure["data"][0]
    assert bar["x"] == ["t1:1-80", "t0:81-120", "t0:500-600"]
    assert bar["y"] == [2, 0, 1] and bar["text"] == ["2", "0", "1"]
    assert "rate" not in json.dumps(figure["layout"])  # a count, titled as one
    assert figure["layout"]["yaxis"]["title"]["text"].startswith("retrievals")


def test_an_empty_retrieval_chart_says_so():
    figure = session_live.retrieval_figure([])
    assert figure["data"] == []
    assert "Nothing evicted yet" in figure["layout"]["annotations"][0]["text"]


def test_chart_data_is_json_for_a_live_update_not_an_unstyled_fragment(client, console_log):
    console_log.append(session_id="s1", kind="context_msg", role="user", content="go")
    _compress("s1", "evict", timezone.now(), tail_tokens=100, trigger_tokens=4800)

    response = client.get("/sessions/s1/", {"part": "charts"})

    assert response["Content-Type"] == "application/json"
    data = response.json()
    assert data["budget"]["layout"]["uirevision"] == "keep"
    assert data["budget"]["layout"]["yaxis"]["title"]["text"] == "tokens"
    assert "chart data</a>" not in client.get("/sessions/s1/").content.decode()


# -------------------------------------------------------------------- imported sessions
def test_an_imported_session_shows_no_empty_charts_and_no_bare_total_as_its_view(
    client, console_log
):
    console_log.append(session_id="locomo:conv-1", kind="context_msg", role="user", content="hi")

    page = client.get("/sessions/locomo:conv-1/").content.decode()
    assert 'id="budget-chart"' not in page and 'id="retrieval-chart"' not in page
    assert "this session was imported" in page

    home = client.get("/").content.decode()
    row = home[home.index('id="session-') :]
    row = row[: row.index("</tr>")]
    assert "imported" in row
    assert "no view" in row


# ------------------------------------------------------------------------------- admin
def _profile_form(profile, **changes):
    from dashboard.runs.models import PROFILE_FIELDS

    data = {"name": profile.name, "description": profile.description}
    data.update({name: getattr(profile, name) for name in PROFILE_FIELDS})
    data.update(changes)
    data.update(
        {
            "changes-TOTAL_FORMS": "0",
            "changes-INITIAL_FORMS": "0",
            "changes-MIN_NUM_FORMS": "0",
            "changes-MAX_NUM_FORMS": "1000",
        }
    )
    return data


def test_admin_shows_every_invalid_knob_at_once_and_saves_nothing(admin_client):
    profile = TuningProfile.objects.create(name="t1")
    url = f"/admin/runs/tuningprofile/{profile.pk}/change/"

    response = admin_client.post(
        url, _profile_form(profile, trigger_ratio="1.5", tier_cap="1", print_cap="0")
    )

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert {"trigger_ratio", "tier_cap", "print_cap"} <= set(errors)
    profile.refresh_from_db()
    assert (profile.trigger_ratio, profile.tier_cap) == (0.8, 10)


def test_admin_number_inputs_carry_the_core_bounds_and_the_tier_cap_help_matches(admin_client):
    profile = TuningProfile.objects.create(name="t1", tier_cap=4)

    html = admin_client.get(f"/admin/runs/tuningprofile/{profile.pk}/change/").content
    html = html.decode()

    def tag(name):
        start = html.index(f'name="{name}"')
        return html[html.rindex("<input", 0, start) : html.index(">", start)]

    assert 'min="256"' in tag("context_size") and 'max="10000000"' in tag("context_size")
    assert 'min="2"' in tag("tier_cap")
    assert 'min="0"' in tag("trigger_ratio") and 'max="1"' in tag("trigger_ratio")
    assert 'max="600"' in tag("exec_timeout_s")
    assert "reaches 4 blocks it keeps its newest and folds the other 3" in html
    assert "nine" not in html


def test_alert_rule_windows_say_their_unit(admin_client):
    from dashboard.telemetry.models import AlertRule

    rule = AlertRule.objects.first()
    html = admin_client.get(f"/admin/telemetry/alertrule/{rule.pk}/change/").content.decode()
    assert "Window (spans)" in html
    assert "in spans" in html
    # The changelist, where the window is edited inline, says the unit in its header too.
    listing = admin_client.get("/admin/telemetry/alertrule/").content.decode()
    assert "Window (spans)" in listing


# --------------------------------------------------------------------- pages and alerts
def test_a_missing_page_is_a_styled_404_with_navigation(client, settings):
    settings.DEBUG = False
    response = client.get("/sessions/no-such-session/")

    assert response.status_code == 404
    html = response.content.decode()
    assert 'rel="stylesheet"' in html and '<nav class="main">' in html
    assert 'id="not-found"' in html and 'href="/"' in html


def test_every_page_names_a_favicon_that_is_served(client):
    html = client.get("/runs/").content.decode()
    start = html.index('rel="icon"')
    href = html[html.index('href="', start) + 6 :]
    href = href[: href.index('"')]
    assert href.endswith("favicon.svg")
    # Pages naming no icon (admin's) get it at the browser's default address.
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"] == href


def test_an_emptied_open_alerts_table_says_none(client):
    from dashboard.telemetry.models import Alert, AlertRule

    rule = AlertRule.objects.first()
    Alert.objects.create(rule=rule, session_id="s1", message="m")

    html = client.get("/alerts/").content.decode()
    body = html[html.index('id="alerts-open"') :]
    body = body[: body.index("</tbody>")]
    # Present but hidden while a row is open; static/scroll.js shows it once the row leaves.
    assert '<tr class="none" hidden>' in body


def test_no_template_pattern_starts_a_class_with_a_dash():
    """Chromium compiles pattern="" with the v flag, where "[-" is a syntax error: the check
    is then dropped (the browser tests also compile every pattern on the pages they visit)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "templates"
    patterns = [
        (path.name, found)
        for path in root.rglob("*.html")
        for found in re.findall(r'pattern="([^"]+)"', path.read_text())
    ]
    assert patterns, "the replay lab's profile-name input has a pattern"
    assert [(name, p) for name, p in patterns if "[-" in p] == []


def test_every_time_on_the_pages_uses_one_format(admin_client, console_log):
    import re

    from dashboard.telemetry.models import Alert, AlertRule, SpanRecord

    profile = TuningProfile.objects.create(name="t1")
    run = RunRecord.objects.create(
        session_id="s1", task="x", profile=profile, model_name="m", started_at=timezone.now()
    )
    console_log.append(session_id="s1", kind="context_msg", role="user", content="outage")
    _compress("s1", "evict", timezone.now(), evicted_lo=1, evicted_hi=1)
    profile.changes.create(field="tier_cap", old_value="10", new_value="4")
    Alert.objects.create(rule=AlertRule.objects.first(), session_id="s1", message="m")
    SpanRecord.objects.create(
        trace_id="a" * 32, span_id="b" * 16, name="scroll.search", session_id="s1",
        start_ns=1_700_000_000_000_000_000, end_ns=1_700_000_000_100_000_000, duration_ms=100,
    )  # fmt: skip
    one_format = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

    for path in ("/", "/?q=outage", "/sessions/s1/", "/alerts/", "/runs/", "/traces/"):
        html = admin_client.get(path).content.decode()
        times = re.findall(r'class="time">([^<]*)<', html)
        assert times, path
        assert [t for t in times if t and not one_format.match(t)] == [], path
    assert run.pk
