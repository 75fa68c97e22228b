"""The demo profile keeps only the newest tool result whole (issue 29: the README promised
folds within a minute, but with five results protected the demo's few cells never left one
to fold). A demo profile an operator has changed from the seeded five is left as it is."""

from django.db import migrations

SEEDED, FOLDING = 5, 1


def protect_one(apps, schema_editor):
    profiles = apps.get_model("runs", "TuningProfile").objects.using(schema_editor.connection.alias)
    profiles.filter(name="demo", protected_recent_tool_results=SEEDED).update(
        protected_recent_tool_results=FOLDING,
        description="Small window for the built-in demo: folds and evictions within a minute.",
    )


def protect_five(apps, schema_editor):
    profiles = apps.get_model("runs", "TuningProfile").objects.using(schema_editor.connection.alias)
    profiles.filter(name="demo", protected_recent_tool_results=FOLDING).update(
        protected_recent_tool_results=SEEDED,
        description="Small window for the built-in demo: eviction within a minute.",
    )


class Migration(migrations.Migration):
    dependencies = [("runs", "0003_operator_kernel_actions")]

    operations = [migrations.RunPython(protect_one, protect_five)]
