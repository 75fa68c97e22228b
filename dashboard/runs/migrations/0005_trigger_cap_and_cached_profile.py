"""``trigger_cap_tokens`` (none by default: the reference's trigger is a share of the window
only), and a seeded ``long-window-cache`` profile whose tail is capped at 4,096 tokens and
trigger at 98,304: behind a provider's prompt cache it costs less than the agent's own
compaction past a 40k window, where the reference's defaults cost more (``bench/gateway_cost.py``,
issue 37). The default and demo profiles keep the reference's values."""

from django.db import migrations, models

NAME = "long-window-cache"
# Written out, not imported: a migration keeps the values it shipped with.
TAIL_CAP, TRIGGER_CAP, NO_CAP = 4_096, 98_304, 10_000_000


def seed(apps, schema_editor):
    profiles = apps.get_model("runs", "TuningProfile").objects.using(schema_editor.connection.alias)
    profiles.get_or_create(
        name=NAME,
        defaults={
            "tail_cap_tokens": TAIL_CAP,
            "trigger_cap_tokens": TRIGGER_CAP,
            "description": "Gateway sessions at large windows behind a prompt cache: a small "
            "tail and an earlier trigger past 40k cost less than resending a large view.",
        },
    )


def unseed(apps, schema_editor):
    profiles = apps.get_model("runs", "TuningProfile").objects.using(schema_editor.connection.alias)
    profiles.filter(name=NAME, tail_cap_tokens=TAIL_CAP, trigger_cap_tokens=TRIGGER_CAP).delete()


class Migration(migrations.Migration):
    dependencies = [("runs", "0004_demo_profile_folds")]

    operations = [
        migrations.AddField(
            model_name="tuningprofile",
            name="trigger_cap_tokens",
            field=models.IntegerField(
                default=NO_CAP,
                db_default=NO_CAP,
                help_text="Compress at the latest when the view passes this many tokens.",
            ),
        ),
        migrations.RunPython(seed, unseed),
    ]
