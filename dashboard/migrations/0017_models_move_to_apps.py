"""The console's tables move to the apps that own them (runs, telemetry, gateway).

Nothing moves in the database: every table keeps its name (the new models set ``db_table``),
so the new apps' 0001 migrations only add the models to their state and this one only drops
them from ``dashboard``'s. The content types are renamed to the new app labels, which keeps
every permission (and so the Operators group and each user's grants) and every admin log
entry pointing at the same rows.
"""

from django.db import migrations

MOVED = {
    "runs": (
        "agentgrant", "compressevent", "consolemarker", "kernelstate", "profilechange",
        "runrecord", "sessionindex", "tuningprofile", "workercommand",
    ),
    "telemetry": ("alert", "alertrule", "modelprice", "spanrecord"),
    "gateway": ("gatewaykey", "storedconversation", "storedresponse"),
}  # fmt: skip


def _relabel(apps, schema_editor, *, forward: bool) -> None:
    content_type = apps.get_model("contenttypes", "ContentType")
    db = schema_editor.connection.alias
    for app, models in MOVED.items():
        old, new = ("dashboard", app) if forward else (app, "dashboard")
        for model in models:
            if content_type.objects.using(db).filter(app_label=new, model=model).exists():
                continue  # already there (made by a post_migrate of an earlier, partial run)
            content_type.objects.using(db).filter(app_label=old, model=model).update(app_label=new)


def relabel_forward(apps, schema_editor):
    _relabel(apps, schema_editor, forward=True)


def relabel_backward(apps, schema_editor):
    _relabel(apps, schema_editor, forward=False)


class Migration(migrations.Migration):
    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("dashboard", "0016_stored_conversations"),
        ("runs", "0001_initial"),
        ("telemetry", "0001_initial"),
        ("gateway", "0001_initial"),
    ]

    operations = [
        migrations.RunPython(relabel_forward, relabel_backward),
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.RemoveField(
                    model_name="agentgrant",
                    name="granted_by",
                ),
                migrations.RemoveField(
                    model_name="agentgrant",
                    name="revoked_by",
                ),
                migrations.RemoveField(
                    model_name="alert",
                    name="acknowledged_by",
                ),
                migrations.RemoveField(
                    model_name="alert",
                    name="rule",
                ),
                migrations.RemoveField(
                    model_name="compressevent",
                    name="run",
                ),
                migrations.DeleteModel(
                    name="ConsoleMarker",
                ),
                migrations.RemoveField(
                    model_name="gatewaykey",
                    name="profile",
                ),
                migrations.DeleteModel(
                    name="KernelState",
                ),
                migrations.DeleteModel(
                    name="ModelPrice",
                ),
                migrations.RemoveField(
                    model_name="profilechange",
                    name="changed_by",
                ),
                migrations.RemoveField(
                    model_name="profilechange",
                    name="profile",
                ),
                migrations.RemoveField(
                    model_name="runrecord",
                    name="created_by",
                ),
                migrations.RemoveField(
                    model_name="runrecord",
                    name="profile",
                ),
                migrations.DeleteModel(
                    name="SessionIndex",
                ),
                migrations.DeleteModel(
                    name="SpanRecord",
                ),
                migrations.DeleteModel(
                    name="StoredConversation",
                ),
                migrations.DeleteModel(
                    name="StoredResponse",
                ),
                migrations.DeleteModel(
                    name="WorkerCommand",
                ),
                migrations.DeleteModel(
                    name="AgentGrant",
                ),
                migrations.DeleteModel(
                    name="Alert",
                ),
                migrations.DeleteModel(
                    name="AlertRule",
                ),
                migrations.DeleteModel(
                    name="CompressEvent",
                ),
                migrations.DeleteModel(
                    name="GatewayKey",
                ),
                migrations.DeleteModel(
                    name="ProfileChange",
                ),
                migrations.DeleteModel(
                    name="RunRecord",
                ),
                migrations.DeleteModel(
                    name="TuningProfile",
                ),
            ],
        ),
    ]
