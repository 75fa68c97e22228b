"""Whether a worker's pass has anything to do: one indexed statement on the cursor.

A worker polls five times a second (``POLL_S``) for console commands and claimable runs. Most
passes find neither, and building the ORM's queries for them (the claim's ``OR`` of two
statuses over a model of thirty-odd columns) cost a millisecond or two of CPU each time, in
every web process with an embedded worker, beside the requests it serves. This asks both
questions in one statement; the ORM's queries run only when it says yes.

The answer may say yes when there is nothing for this worker (a run pinned to another
process, a command another worker took meanwhile): the ORM's queries then find nothing, as
before. It never says no when there is something: its conditions are the ORM queries' own,
less the pinning.
"""

from __future__ import annotations

from datetime import datetime

from django.db import connection

from dashboard.runs.models import RunRecord, WorkerCommand

__all__ = ["anything_waiting"]


def anything_waiting(worker_id: str, now: datetime, expired: bool) -> tuple[bool, bool]:
    """(a command waits for ``worker_id``, a run may be claimable: queued, or with
    ``expired`` running with a lease that ended before ``now``)."""
    q = connection.ops.quote_name
    commands = q(WorkerCommand._meta.db_table)
    runs = q(RunRecord._meta.db_table)
    lapsed = f" OR ({q('status')} = %s AND {q('lease_until')} < %s)" if expired else ""
    sql = (
        f"SELECT EXISTS (SELECT 1 FROM {commands} WHERE {q('worker')} = %s AND {q('state')} = %s), "
        f"EXISTS (SELECT 1 FROM {runs} WHERE {q('status')} = %s{lapsed})"
    )
    params: list[object] = [worker_id, WorkerCommand.PENDING, RunRecord.QUEUED]
    if expired:
        params += [RunRecord.RUNNING, connection.ops.adapt_datetimefield_value(now)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return bool(row[0]), bool(row[1])
