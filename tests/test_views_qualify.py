"""The Qualify pages through the real views: starting a qualification needs the permission to
run code, a bad form stores nothing, a scorecard shows its items and categories, and two
scorecards compare side by side."""

from __future__ import annotations

import time

import pytest
from django.urls import reverse
from qualify_endpoints import scorecard

from dashboard.qualify import service
from dashboard.qualify.models import Qualification
from scroll_core.models.policy import POLICY_NAME

pytestmark = pytest.mark.django_db(transaction=True)


def _wait_done(pk: int, timeout: float = 60.0) -> Qualification:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        q = Qualification.objects.get(pk=pk)
        if q.status in (Qualification.DONE, Qualification.FAILED):
            return q
        time.sleep(0.1)
    raise AssertionError(f"qualification {pk} still {q.status}")


def _qualified(name: str) -> Qualification:
    """A stored qualification of a scripted endpoint (its suite run shared with other tests)."""
    card = scorecard(name)
    q = service.create(model=card.model, upstream=card.upstream)
    q.record(card)
    return q


def test_an_operator_starts_a_qualification_and_reads_its_scorecard(operator):
    page = operator.get(reverse("qualifications"))
    assert b'id="qualify-start"' in page.content
    started = operator.post(reverse("qualify_start"), {"model": POLICY_NAME, "api": "openai"})
    q = Qualification.objects.get()
    assert started.status_code == 302 and started["Location"] == reverse(
        "qualification", args=[q.pk]
    )
    q = _wait_done(q.pk)
    assert q.status == Qualification.DONE, q.error
    assert q.passed is False and q.suite_version == "1"
    card = operator.get(reverse("qualification", args=[q.pk])).content.decode()
    assert 'id="qualify-verdict">fail' in card
    assert 'id="item-actingbind_filter" class="fail"' in card
    assert "every 2s" not in card  # a finished scorecard stops polling
    listed = operator.get(reverse("qualifications")).content.decode()
    assert f'id="qualification-{q.pk}"' in listed and POLICY_NAME in listed


def test_a_queued_scorecard_polls_for_itself(operator):
    q = Qualification.objects.create(model_name="m", upstream="http://127.0.0.1:9/v1")
    fragment = operator.get(reverse("qualification_card", args=[q.pk])).content.decode()
    assert 'hx-trigger="every 2s"' in fragment
    assert reverse("qualification_card", args=[q.pk]) in fragment


def test_starting_one_needs_the_permission_to_run_code(client, django_user_model):
    user = django_user_model.objects.create_user("reader", password="pw-reader-1")
    client.force_login(user)
    page = client.get(reverse("qualifications")).content.decode()
    assert 'id="qualify-read-only"' in page and 'id="qualify-start"' not in page
    refused = client.post(reverse("qualify_start"), {"model": POLICY_NAME})
    assert refused.status_code == 403
    assert b"start_run" in refused.content
    assert not Qualification.objects.exists()


@pytest.mark.parametrize(
    ("form", "says"),
    [
        ({"model": "gpt-x", "upstream": ""}, "needs an upstream"),
        ({"model": "gpt-x", "upstream": "http://127.0.0.1:9/v1", "api": "grpc"}, "unknown api"),
        (
            {"model": "gpt-x", "upstream": "http://127.0.0.1:9/v1", "key_env": "SCROLL_NO_SUCH"},
            "is not set on the server",
        ),
        ({"model": POLICY_NAME, "profile": "no-such-profile"}, "no tuning profile"),
        ({"model": POLICY_NAME, "key_env": "sk-live-abc123"}, "not hold the key"),
    ],
)
def test_a_bad_form_is_refused_with_a_clear_message_and_stores_nothing(operator, form, says):
    answer = operator.post(reverse("qualify_start"), form, follow=True)
    assert says in answer.content.decode()
    assert "sk-live-abc123" not in answer.content.decode()
    assert not Qualification.objects.exists()


def test_two_scorecards_compare_side_by_side(operator):
    good, archive = _qualified("competent"), _qualified("archive_answerer")
    assert good.passed and archive.passed is False
    page = operator.get(reverse("qualify_compare"), {"a": good.pk, "b": archive.pk})
    html = page.content.decode()
    assert page.status_code == 200
    assert 'id="compare-verdict"><td class="name">verdict</td><td>pass</td><td>fail</td>' in html
    # The one item they disagree on is marked; the others are not.
    assert 'id="compare-item-protocolseam" class="differs"' in html
    assert 'id="compare-item-actingbind_filter" class=""' in html
    assert "suite-differs" not in html


def test_compare_without_two_scorecards_says_so(operator):
    answer = operator.get(reverse("qualify_compare"), {"a": "x"}, follow=True)
    assert "Pick two scorecards" in answer.content.decode()
