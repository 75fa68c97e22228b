from __future__ import annotations

import pytest
from django.urls import reverse


@pytest.fixture
def client(client, db, django_user_model):
    """A client logged in as an ordinary (non-staff) user: every page needs a login."""
    user = django_user_model.objects.create_user("viewer", password="pw")
    client.force_login(user)
    return client


def _fill(log, session_id, n, *, start=0):
    return [
        log.append(
            session_id=session_id, kind="context_msg", role="user", content=f"msg {start + i}"
        )
        for i in range(n)
    ]


def _seqs(response):
    return [e.seq for e in response.context["events"]]


def test_it_shows_the_events_of_a_session_in_seq_order(client, console_log):
    seqs = _fill(console_log, "alpha", 3)
    console_log.append(
        session_id="alpha",
        kind="tool_result",
        role="tool",
        name="bash",
        content="ok",
        headline="ran the tests",
    )

    response = client.get("/sessions/alpha/")

    assert response.status_code == 200
    assert _seqs(response)[:3] == seqs
    html = response.content.decode()
    assert "tool / bash" in html
    assert "ran the tests" in html
    assert f'id="e{seqs[0]}"' in html


def test_session_ids_with_colons_and_slashes_resolve(client, console_log):
    [seq] = _fill(console_log, "locomo:conv-26/part 2", 1)

    url = reverse("session", args=["locomo:conv-26/part 2"])
    response = client.get(url)

    assert url == "/sessions/locomo:conv-26/part%202/"
    assert response.status_code == 200
    assert _seqs(response) == [seq]


def test_unknown_session_is_404(client, console_log):
    _fill(console_log, "alpha", 1)

    assert client.get("/sessions/nope/").status_code == 404


def test_it_escapes_html_in_event_content(client, console_log):
    console_log.append(
        session_id="alpha",
        kind="model_turn",
        role="assistant",
        name="<b>bold</b>",
        content='<script>alert("x")</script><img src=x onerror=alert(1)>',
        headline="<i>headline</i>",
    )

    html = client.get("/sessions/alpha/").content.decode()

    assert "<script>alert" not in html
    assert "<img src=x" not in html
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html
    assert "&lt;i&gt;headline&lt;/i&gt;" in html


def test_it_pages_newer_and_older_by_seq_cursor(client, console_log, settings):
    settings.SCROLL_PAGE_SIZE = 2
    seqs = _fill(console_log, "alpha", 5)

    first = client.get("/sessions/alpha/")
    assert _seqs(first) == seqs[0:2]
    assert first.context["older_after"] is None
    assert first.context["newer_after"] == seqs[1]

    second = client.get("/sessions/alpha/", {"after": first.context["newer_after"]})
    assert _seqs(second) == seqs[2:4]
    assert f'href="?after={seqs[3]}"' in second.content.decode()

    last = client.get("/sessions/alpha/", {"after": second.context["newer_after"]})
    assert _seqs(last) == seqs[4:5]
    assert last.context["newer_after"] is None

    back = client.get("/sessions/alpha/", {"after": last.context["older_after"]})
    assert _seqs(back) == seqs[2:4]
    assert _seqs(client.get("/sessions/alpha/", {"after": back.context["older_after"]})) == seqs[:2]


def test_older_pages_skip_events_of_interleaved_sessions(client, console_log, settings):
    settings.SCROLL_PAGE_SIZE = 2
    mine = []
    for i in range(4):
        mine += _fill(console_log, "alpha", 1, start=i)
        _fill(console_log, "beta", 3)

    last = client.get("/sessions/alpha/", {"after": mine[1]})
    assert _seqs(last) == mine[2:4]

    back = client.get("/sessions/alpha/", {"after": last.context["older_after"]})
    assert _seqs(back) == mine[0:2]
    assert back.context["older_after"] is None


def test_a_bad_cursor_is_a_clear_400(client, console_log):
    _fill(console_log, "alpha", 1)

    response = client.get("/sessions/alpha/", {"after": "-3"})

    assert response.status_code == 400
    assert b"after must be a non-negative integer" in response.content


def test_an_htmx_pager_request_gets_only_the_rows(client, console_log, settings):
    settings.SCROLL_PAGE_SIZE = 2
    seqs = _fill(console_log, "alpha", 3)

    response = client.get("/sessions/alpha/", {"after": seqs[1]}, headers={"HX-Request": "true"})

    html = response.content.decode()
    assert html.lstrip().startswith('<div id="event-page"')
    assert "<html" not in html
    assert f'data-last-seq="{seqs[2]}"' in html


def test_large_payloads_show_their_size(client, console_log):
    console_log.append(session_id="alpha", kind="tool_result", content="x" * 40000)

    html = client.get("/sessions/alpha/").content.decode()

    assert "39.1\xa0KB" in html
