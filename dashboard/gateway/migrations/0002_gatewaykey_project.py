"""Gateway keys belong to a project (issue 31): the keys of the day go to the default one."""

import django.db.models.deletion
from django.db import migrations, models

import dashboard.projects.models


def keys_to_default(apps, schema_editor):
    project = apps.get_model("projects", "Project").objects.get(is_default=True)
    apps.get_model("gateway", "GatewayKey").objects.update(project=project)


class Migration(migrations.Migration):
    dependencies = [
        ("gateway", "0001_initial"),
        ("projects", "0002_default_project"),
    ]

    operations = [
        migrations.AddField(
            model_name="gatewaykey",
            name="project",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="gateway_keys",
                to="projects.project",
            ),
        ),
        migrations.RunPython(keys_to_default, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="gatewaykey",
            name="project",
            field=models.ForeignKey(
                blank=True,
                default=dashboard.projects.models.default_project_id,
                help_text="The project whose agents this key reaches: its agent must be one of them (blank: the default project).",
                on_delete=django.db.models.deletion.PROTECT,
                related_name="gateway_keys",
                to="projects.project",
            ),
        ),
    ]
