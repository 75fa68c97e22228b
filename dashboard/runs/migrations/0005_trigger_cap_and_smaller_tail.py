"""Large windows evict at 98,304 tokens at the latest (``trigger_cap_tokens``) down to a tail of
at most 4,096 tokens (was 40,000): chosen on the dev sessions of ``bench/gateway_cost.py``
(issue 37). The seeded default and demo profiles follow when an operator has not changed their
tail cap from the seeded 40,000; other profiles keep what they have (the new column takes the
new default)."""

from django.db import migrations, models

SEEDED, CAPPED = 40000, 4096


def cap_tail(apps, schema_editor):
    profiles = apps.get_model("runs", "TuningProfile").objects.using(schema_editor.connection.alias)
    profiles.filter(name__in=("default", "demo"), tail_cap_tokens=SEEDED).update(
        tail_cap_tokens=CAPPED
    )


def uncap_tail(apps, schema_editor):
    profiles = apps.get_model("runs", "TuningProfile").objects.using(schema_editor.connection.alias)
    profiles.filter(name__in=("default", "demo"), tail_cap_tokens=CAPPED).update(
        tail_cap_tokens=SEEDED
    )


class Migration(migrations.Migration):
    dependencies = [("runs", "0004_demo_profile_folds")]

    operations = [
        migrations.AddField(
            model_name="tuningprofile",
            name="trigger_cap_tokens",
            field=models.IntegerField(
                default=98304,
                help_text="Compress at the latest when the view passes this many tokens.",
            ),
        ),
        migrations.AlterField(
            model_name="tuningprofile",
            name="tail_cap_tokens",
            field=models.IntegerField(
                default=4096, help_text="The protected tail never exceeds this many tokens."
            ),
        ),
        migrations.RunPython(cap_tail, uncap_tail),
    ]
