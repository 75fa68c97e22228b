"""Prices per model (admin: Model prices) for the cost of each call, session and agent, and
the "eviction a net loss" alert rule (an evicted span re-read for more prefill than keeping
it would have cost under a prefix cache).

Depends on the newest migration of this branch (0010_workers); at merge it is re-pointed at
the newest migration of main.
"""

from __future__ import annotations

import django.core.validators
from django.db import migrations, models


def seed_rule(apps, schema_editor):
    apps.get_model("dashboard", "AlertRule").objects.get_or_create(
        kind="eviction_net_loss", defaults={"threshold": 1, "window": 0}
    )


def drop_rule(apps, schema_editor):
    apps.get_model("dashboard", "AlertRule").objects.filter(kind="eviction_net_loss").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0009_gateway"),
    ]

    operations = [
        migrations.CreateModel(
            name="ModelPrice",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "model",
                    models.CharField(
                        help_text="The model name as runs record it, e.g. gpt-4o.",
                        max_length=200,
                        unique=True,
                    ),
                ),
                (
                    "input_per_mtok",
                    models.DecimalField(
                        decimal_places=4,
                        default=0,
                        max_digits=12,
                        validators=[django.core.validators.MinValueValidator(0)],
                        verbose_name="input per 1M tokens",
                    ),
                ),
                (
                    "cached_input_per_mtok",
                    models.DecimalField(
                        decimal_places=4,
                        default=0,
                        max_digits=12,
                        validators=[django.core.validators.MinValueValidator(0)],
                        verbose_name="cached input per 1M tokens",
                    ),
                ),
                (
                    "output_per_mtok",
                    models.DecimalField(
                        decimal_places=4,
                        default=0,
                        max_digits=12,
                        validators=[django.core.validators.MinValueValidator(0)],
                        verbose_name="output per 1M tokens",
                    ),
                ),
                ("currency", models.CharField(default="USD", max_length=8)),
            ],
            options={
                "verbose_name": "model price",
                "ordering": ["model"],
            },
        ),
        migrations.AlterField(
            model_name="alertrule",
            name="kind",
            field=models.CharField(
                choices=[
                    ("index_gap", "Index gap (the blocks no longer tile the evicted range)"),
                    (
                        "headline_quality",
                        "Headline quality falling (missing, malformed, duplicate)",
                    ),
                    ("span_reread", "Evicted span re-read instead of computed in the kernel"),
                    ("print_truncation", "Repeated print-cap truncation"),
                    ("kernel_failure", "Kernel crash or timeout"),
                    ("context_unfit", "Context window unfit"),
                    (
                        "eviction_net_loss",
                        "Evicted span re-read past its cost (a net loss under a prefix cache)",
                    ),
                ],
                max_length=32,
                unique=True,
            ),
        ),
        migrations.RunPython(seed_rule, drop_rule),
    ]
