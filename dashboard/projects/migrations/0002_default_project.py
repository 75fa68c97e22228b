"""The default project, with every agent the console knows of today (issue 31).

Its ``everyone_role`` is "operator": every user, present and future, is in it, so a console
upgraded or started fresh shows what it showed before projects, and the Django permissions
still decide who runs code. Agents no row names (transcripts imported later) belong to it too.
"""

from django.db import migrations


def create_default(apps, schema_editor):
    project_model = apps.get_model("projects", "Project")
    owner_model = apps.get_model("projects", "AgentOwner")
    run_model = apps.get_model("runs", "RunRecord")
    key_model = apps.get_model("gateway", "GatewayKey")
    project, _ = project_model.objects.get_or_create(
        is_default=True, defaults={"name": "Default", "everyone_role": "operator"}
    )
    agents = set(run_model.objects.exclude(agent_id="").values_list("agent_id", flat=True))
    agents |= set(key_model.objects.values_list("agent_id", flat=True))
    known = set(owner_model.objects.values_list("agent_id", flat=True))
    owner_model.objects.bulk_create(
        [owner_model(agent_id=a, project=project) for a in sorted(agents - known)]
    )


class Migration(migrations.Migration):
    dependencies = [
        ("projects", "0001_initial"),
        ("runs", "0004_demo_profile_folds"),
        ("gateway", "0001_initial"),
    ]

    operations = [migrations.RunPython(create_default, migrations.RunPython.noop)]
