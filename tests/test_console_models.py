from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from dashboard.runs.models import PROFILE_FIELDS, ProfileChange, RunRecord, TuningProfile
from dashboard.telemetry.models import AlertRule
from scroll_core import Profile

pytestmark = pytest.mark.django_db


def test_migrations_seed_the_default_and_demo_profiles_and_one_rule_per_kind():
    default = TuningProfile.objects.get(name="default")
    assert default.to_core() == Profile()
    assert TuningProfile.objects.get(name="demo").to_core().context_size == 6000
    assert sorted(AlertRule.objects.values_list("kind", flat=True)) == sorted(
        k for k, _ in AlertRule.KIND_CHOICES
    )
    assert AlertRule.objects.get(kind="span_reread").threshold == 3


def test_every_core_knob_has_a_column():
    assert set(PROFILE_FIELDS) == set(Profile().to_dict())
    profile = TuningProfile(name="x", tier_cap=4, print_cap=500, trigger_ratio=0.7)
    assert profile.to_core() == Profile(tier_cap=4, print_cap=500, trigger_ratio=0.7)


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("trigger_ratio", 1.5, "trigger_ratio must be in (0, 1]"),
        ("trigger_ratio", 0.0, "trigger_ratio must be in (0, 1]"),
        ("tail_cap_tokens", -1, "tail_cap_tokens must not be negative"),
        ("tier_cap", 1, "tier_cap must be at least 2"),
        ("print_cap", 0, "print_cap must be positive"),
        ("exec_timeout_s", 0.0, "exec_timeout_s must be positive"),
    ],
)
def test_clean_refuses_what_the_core_refuses_and_names_the_field(field, value, words):
    profile = TuningProfile(name="bad", **{field: value})

    with pytest.raises(ValidationError) as caught:
        profile.full_clean()

    assert field in caught.value.message_dict
    assert words in caught.value.message_dict[field][0]


def test_a_tail_larger_than_the_trigger_is_refused_on_the_trigger_ratio():
    profile = TuningProfile(name="tight", context_size=1000, trigger_ratio=0.05)

    with pytest.raises(ValidationError) as caught:
        profile.full_clean()

    assert "protected tail" in caught.value.message_dict["trigger_ratio"][0]


def test_get_default_recreates_a_deleted_default():
    TuningProfile.objects.filter(name="default").delete()

    assert TuningProfile.get_default().to_core() == Profile()


def test_a_run_shows_only_the_profile_changes_made_while_it_ran():
    profile = TuningProfile.objects.get(name="demo")
    now = timezone.now()
    run = RunRecord.objects.create(
        session_id="s1",
        task="t",
        model_name="m",
        profile=profile,
        started_at=now - timedelta(minutes=5),
        ended_at=now,
    )
    before = ProfileChange.objects.create(
        profile=profile, field="tier_cap", old_value="10", new_value="4",
        changed_at=now - timedelta(minutes=10),
    )  # fmt: skip
    during = ProfileChange.objects.create(
        profile=profile, field="trigger_ratio", old_value="0.8", new_value="0.6",
        changed_at=now - timedelta(minutes=1),
    )  # fmt: skip

    assert list(run.profile_changes()) == [during]
    assert before not in run.profile_changes()
    assert run.summary()["profile"] == "demo"


def test_a_bad_numeric_setting_is_a_clear_error_at_start(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "SCROLL_DATA_DIR": str(tmp_path), "SCROLL_RUNNER_WORKERS": "many"}
    done = subprocess.run(
        [sys.executable, "manage.py", "check"], env=env, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert "SCROLL_RUNNER_WORKERS must be a whole number, got 'many'" in done.stderr
