"""Gateway sessions recorded before the recorder filled them in: their agent (named in the
task line the recorder wrote, "gateway: agent <id> through ...") and no task code, so the
Runs page's agent column and the session page's "task code" say what happened."""

import re

from django.db import migrations

_AGENT = re.compile(r"^gateway: agent (\S+) through ")


def name_agents(apps, schema_editor):
    run_record = apps.get_model("runs", "RunRecord")
    db = schema_editor.connection.alias
    for run in run_record.objects.using(db).filter(kind="gateway"):
        found = _AGENT.match(run.task or "")
        if not run.agent_id and found:
            run.agent_id = found.group(1)[:200]
        run.task_code = False
        run.save(update_fields=["agent_id", "task_code"])


class Migration(migrations.Migration):
    dependencies = [("runs", "0001_initial")]

    operations = [migrations.RunPython(name_agents, migrations.RunPython.noop)]
