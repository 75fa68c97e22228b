from __future__ import annotations

import pytest
from django.urls import reverse

from dashboard.runs.models import PROFILE_FIELDS, ProfileChange, TuningProfile
from dashboard.runs.profiles import core_profile, save_profile

pytestmark = pytest.mark.django_db


def _form(profile: TuningProfile, **changes):
    data = {"name": profile.name, "description": profile.description}
    data.update({name: getattr(profile, name) for name in PROFILE_FIELDS})
    data.update(changes)
    # The change-history inline's management form.
    data.update(
        {
            "changes-TOTAL_FORMS": "0",
            "changes-INITIAL_FORMS": "0",
            "changes-MIN_NUM_FORMS": "0",
            "changes-MAX_NUM_FORMS": "1000",
        }
    )
    return data


@pytest.fixture
def demo():
    return TuningProfile.objects.get(name="demo")


def test_a_change_in_admin_is_saved_and_audited_with_who_and_values(admin_client, demo):
    url = reverse("admin:runs_tuningprofile_change", args=[demo.pk])

    response = admin_client.post(url, _form(demo, trigger_ratio="0.6"))

    assert response.status_code == 302, response.content.decode()[:2000]
    demo.refresh_from_db()
    assert demo.trigger_ratio == 0.6
    change = ProfileChange.objects.get(profile=demo)
    assert (change.field, change.old_value, change.new_value) == ("trigger_ratio", "0.8", "0.6")
    assert change.changed_by.username == "admin"
    assert core_profile(demo.pk).trigger_ratio == 0.6


def test_admin_refuses_a_trigger_ratio_outside_0_1_with_a_message(admin_client, demo):
    url = reverse("admin:runs_tuningprofile_change", args=[demo.pk])

    response = admin_client.post(url, _form(demo, trigger_ratio="1.5"))

    assert response.status_code == 200
    assert "trigger_ratio must be in (0, 1]" in response.content.decode()
    demo.refresh_from_db()
    assert demo.trigger_ratio == 0.8
    assert not ProfileChange.objects.exists()


def test_admin_refuses_a_negative_cap(admin_client, demo):
    url = reverse("admin:runs_tuningprofile_change", args=[demo.pk])

    response = admin_client.post(url, _form(demo, tail_cap_tokens="-5"))

    assert response.status_code == 200
    assert "tail_cap_tokens must not be negative" in response.content.decode()
    assert not ProfileChange.objects.exists()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("exec_timeout_s", "86400000", "exec_timeout_s must be at most 600"),
        ("print_cap", "2000000000", "print_cap must be at most 1,000,000"),
        ("context_size", "100000000", "context_size must be at most 10,000,000"),
    ],
)
def test_admin_refuses_a_knob_above_its_upper_bound_naming_it(
    admin_client, demo, field, value, message
):
    url = reverse("admin:runs_tuningprofile_change", args=[demo.pk])

    response = admin_client.post(url, _form(demo, **{field: value}))

    assert response.status_code == 200
    assert message in response.content.decode()
    demo.refresh_from_db()
    assert getattr(demo, field) != float(value)
    assert not ProfileChange.objects.exists()


def test_the_profile_form_lists_every_knob(admin_client, demo):
    response = admin_client.get(reverse("admin:runs_tuningprofile_change", args=[demo.pk]))

    html = response.content.decode()
    for name in PROFILE_FIELDS:
        assert f'name="{name}"' in html


def test_save_profile_records_only_what_changed(demo, django_user_model):
    user = django_user_model.objects.create_user("ops", password="x-very-long-pass")
    demo.tier_cap = 4
    demo.print_cap = 1000

    changes = save_profile(demo, user)

    assert sorted(c.field for c in changes) == ["print_cap", "tier_cap"]
    assert {c.changed_by for c in changes} == {user}
