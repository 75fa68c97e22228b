from __future__ import annotations

import pytest
from django.urls import reverse


@pytest.fixture
def client(client, db, django_user_model):
    """A client logged in as an ordinary (non-staff) user: every page needs a login."""
    user = django_user_model.objects.create_user("viewer", password="pw")
    client.force_login(user)
    return client


def _add(log, session_id, content, **extra):
    return log.append(
        session_id=session_id, kind="context_msg", role="user", content=content, **extra
    )


def test_it_lists_sessions_with_event_counts(client, console_log):
    for i in range(3):
        _add(console_log, "locomo:conv-26", f"turn {i}", created_at="2023-05-08T13:56:00Z")
    _add(console_log, "alpha", "hello there", created_at="2024-01-02T03:04:05Z")

    response = client.get("/")

    assert response.status_code == 200
    rows = {s.session_id: s for s in response.context["page"].object_list}
    assert rows["locomo:conv-26"].events == 3
    assert rows["alpha"].events == 1
    assert rows["alpha"].tokens > 0
    html = response.content.decode()
    assert 'href="/sessions/locomo:conv-26/"' in html
    assert 'href="/sessions/alpha/"' in html
    assert "2024-01-02T03:04:05.000Z" in html  # the one timestamp format


def test_it_says_so_when_the_log_is_empty(client, console_log):
    response = client.get("/")

    assert response.status_code == 200
    assert "The Event Log is empty" in response.content.decode()


def test_it_paginates_sessions(client, console_log, settings):
    settings.SCROLL_PAGE_SIZE = 2
    for name in ("s1", "s2", "s3"):
        _add(console_log, name, "x")

    first = client.get("/")
    second = client.get("/", {"page": 2})

    assert [s.session_id for s in first.context["page"].object_list] == ["s3", "s2"]
    assert [s.session_id for s in second.context["page"].object_list] == ["s1"]
    assert 'href="?page=2"' in first.content.decode()


def test_search_shows_hits_linking_to_their_event(client, console_log):
    _add(console_log, "alpha", "the weather is mild")
    seq = _add(console_log, "beta/run:1", "Caroline adopted a golden retriever")

    response = client.get("/", {"q": "retriever"})

    hits = response.context["hits"]
    assert [h.seq for h in hits] == [seq]
    html = response.content.decode()
    assert f'href="/sessions/beta/run:1/?after={seq - 1}#e{seq}"' in html
    assert "1 hit" in html


def test_search_with_no_match_says_so(client, console_log):
    _add(console_log, "alpha", "the weather is mild")

    response = client.get("/", {"q": "zeppelin"})

    assert response.context["hits"] == []
    assert "No events match." in response.content.decode()


@pytest.mark.parametrize("query", ['"unbalanced', "AND OR NOT", "*", "a:b (c", "NEAR("])
def test_search_survives_fts_syntax_in_the_query(client, console_log, query):
    _add(console_log, "alpha", "plain words")

    response = client.get("/", {"q": query})

    assert response.status_code == 200


def test_search_escapes_html_in_the_query(client, console_log):
    response = client.get("/", {"q": "<script>alert(1)</script>"})

    html = response.content.decode()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_home_refuses_post(client, console_log):
    assert client.post(reverse("home")).status_code == 405
