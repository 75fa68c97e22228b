"""Seed the default tuning profile, the demo's small-window profile and one rule per alert."""

from __future__ import annotations

from django.db import migrations

# (kind, threshold, window): see AlertRule; thresholds are edited in admin afterwards.
RULES = [
    ("index_gap", 1, 0),
    ("headline_quality", 3, 10),
    ("span_reread", 3, 0),
    ("print_truncation", 3, 10),
    ("kernel_failure", 1, 0),
    ("context_unfit", 1, 0),
]


def seed(apps, schema_editor):
    TuningProfile = apps.get_model("dashboard", "TuningProfile")
    AlertRule = apps.get_model("dashboard", "AlertRule")
    TuningProfile.objects.get_or_create(
        name="default", defaults={"description": "The reference implementation's constants."}
    )
    # A 6,000-token window makes folds and evictions show within a minute of the demo.
    TuningProfile.objects.get_or_create(
        name="demo",
        defaults={
            "description": "Small window for the built-in demo: eviction within a minute.",
            "context_size": 6000,
        },
    )
    for kind, threshold, window in RULES:
        AlertRule.objects.get_or_create(
            kind=kind, defaults={"threshold": threshold, "window": window}
        )


def unseed(apps, schema_editor):
    apps.get_model("dashboard", "AlertRule").objects.all().delete()
    apps.get_model("dashboard", "TuningProfile").objects.filter(
        name__in=["default", "demo"]
    ).delete()


class Migration(migrations.Migration):
    dependencies = [("dashboard", "0001_initial")]
    operations = [migrations.RunPython(seed, unseed)]
