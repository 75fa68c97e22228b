"""Running code is a permission, not a login: the console's own permissions, an "Operators"
group holding them (every existing staff user joins it), and each run's agent and whether it
may execute its task's fenced code.

Operators grant the permissions in admin (Authentication and Authorization > Users: add the
user to the "Operators" group, or give single permissions); superusers hold them all.
"""

from __future__ import annotations

from django.db import migrations, models

OPERATORS = "Operators"
# Every permission the Operators group holds (codenames of the dashboard app).
OPERATOR_PERMISSIONS = [
    "start_run",
    "stop_run",
    "control_kernel",
    "run_task_code",
    "save_profile_from_replay",
]


def create_operators(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    # Permissions are normally created after the whole migrate run (post_migrate); this group
    # needs them now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None

    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    User = apps.get_model("auth", "User")
    group, _ = Group.objects.get_or_create(name=OPERATORS)
    group.permissions.add(
        *Permission.objects.filter(
            content_type__app_label="dashboard", codename__in=OPERATOR_PERMISSIONS
        )
    )
    for user in User.objects.filter(is_staff=True):
        user.groups.add(group)


def record_old_agents(apps, schema_editor):
    # Runs before this migration all ran as the Session default agent, "main".
    apps.get_model("dashboard", "RunRecord").objects.filter(agent_id="").update(agent_id="main")


def remove_operators(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name=OPERATORS).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("dashboard", "0002_seed_profiles_and_rules"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="runrecord",
            options={
                "ordering": ["-created_at", "-id"],
                "permissions": [
                    ("start_run", "Can start agent runs"),
                    ("stop_run", "Can stop running agent runs"),
                    ("control_kernel", "Can restart or stop a session's kernel"),
                    ("run_task_code", "Can have a run execute the task's own fenced code"),
                ],
            },
        ),
        migrations.AlterModelOptions(
            name="tuningprofile",
            options={
                "ordering": ["name"],
                "permissions": [
                    ("save_profile_from_replay", "Can save a tuning profile from the replay lab")
                ],
            },
        ),
        migrations.AddField(
            model_name="runrecord",
            name="agent_id",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AddField(
            model_name="runrecord",
            name="task_code",
            field=models.BooleanField(default=True),
        ),
        migrations.RunPython(record_old_agents, migrations.RunPython.noop),
        migrations.RunPython(create_operators, remove_operators),
    ]
