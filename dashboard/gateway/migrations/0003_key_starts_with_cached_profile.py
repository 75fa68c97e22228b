"""A new gateway key starts with the seeded ``long-window-cache`` profile (issue 37): behind a
provider's prompt cache it costs less than the default past a 40k window and recalls as much.
Existing keys keep the profile they have."""

import django.db.models.deletion
from django.db import migrations, models

import dashboard.runs.models


class Migration(migrations.Migration):
    dependencies = [
        ("gateway", "0002_gatewaykey_project"),
        ("runs", "0005_trigger_cap_and_cached_profile"),
    ]

    operations = [
        migrations.AlterField(
            model_name="gatewaykey",
            name="profile",
            field=models.ForeignKey(
                blank=True,
                default=dashboard.runs.models.cached_profile_id,
                help_text="The knobs of this key's sessions. A new key starts with "
                "long-window-cache (cheaper behind a provider's prompt cache past a 40k "
                "window); blank: the default profile.",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="gateway_keys",
                to="runs.tuningprofile",
            ),
        ),
    ]
