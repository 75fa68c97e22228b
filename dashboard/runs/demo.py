"""The built-in demo: an incident investigation over synthetic service logs.

Everything is generated deterministically from a seed, so every run of the demo sees the
same day: a payments API whose connection pool was cut from 50 to 8 by a config change at
09:14, a deploy at 10:02 that everyone blames first, an error spike at 13:47 and an outage
at 14:05 that only ends when the pool change is reverted at 14:41.

The operator's turns (``TURNS``) ask the session to pull those logs step by step through
host functions bound in the kernel as ``ops.*`` (``ops.config_changes()``, ``ops.deploys()``,
``ops.logs(service, start, end)``). The demo profile (``DEMO_KNOBS``) has a 6,000-token
window and keeps only the newest tool result whole, so from the third turn on (within the
first minute) each compress folds earlier outputs into pointers or evicts them to the index;
the last turns ask about facts from the first ones, which the policy model can only answer
through ``ms.search`` and ``ms.expand`` over the Event Log.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DEMO_KNOBS",
    "DEMO_PROFILE",
    "RECALL_QUESTIONS",
    "TURNS",
    "demo_profile",
    "start_demo",
    "start_demo_once",
    "task_text",
]

DEMO_PROFILE = "demo"
# The demo profile's knobs (the seed migrations write the same): a small window, and only the
# newest tool result protected from folding. With the default five protected, the demo's few
# cells never left an unprotected result in the view, so it evicted but never folded.
DEMO_KNOBS: dict[str, Any] = {"context_size": 6000, "protected_recent_tool_results": 1}
DEMO_DESCRIPTION = "Small window for the built-in demo: folds and evictions within a minute."


def _pull(service: str, start: str, end: str, why: str) -> str:
    return (
        f"{why}\n```python\nlines = ops.logs({service!r}, {start!r}, {end!r})\n"
        "for line in lines:\n    print(line)\n```"
    )


# Questions whose answers were printed early and have been evicted by the time they are asked.
RECALL_QUESTIONS = (
    "Which config change earlier today set db.pool.max_connections on payments-api, and who "
    "made it?",
    "Which deploy of payments-api did priya.n ship in the morning?",
    "What PoolTimeoutError did payments-api log during the spike, and what pool size did it "
    "report?",
)

TURNS: tuple[str, ...] = (
    "Incident INC-4821: checkout is failing on payments-api since about 14:05 UTC. Start with "
    "today's configuration changes.\n```python\nfor line in ops.config_changes():\n"
    "    print(line)\n```",
    "Now today's deploys.\n```python\nfor line in ops.deploys():\n    print(line)\n```",
    _pull("payments-api", "09:00", "10:30", "Baseline: payments-api in the morning."),
    _pull("ledger-svc", "11:30", "13:00", "Check ledger-svc around the noon campaign."),
    _pull("edge-gateway", "12:00", "13:30", "And the gateway before the incident."),
    _pull("payments-api", "13:30", "14:10", "payments-api as the errors start."),
    _pull("edge-gateway", "14:00", "14:40", "What the gateway saw during the outage."),
    _pull("payments-api", "14:10", "14:50", "payments-api through the rollback and the fix."),
    *RECALL_QUESTIONS,
)


def task_text() -> str:
    """The demo's turns as one task text (turns separated by ``---`` lines)."""
    return "\n---\n".join(TURNS)


def demo_profile() -> Any:
    """The demo's tuning profile, made with ``DEMO_KNOBS`` if it is missing (an operator's
    edits to an existing one are kept)."""
    from dashboard.runs.models import TuningProfile

    profile, _ = TuningProfile.objects.get_or_create(
        name=DEMO_PROFILE,
        defaults={**DEMO_KNOBS, "description": DEMO_DESCRIPTION},
    )
    return profile


def start_demo(*, pause_s: float = 4.0, session_id: str | None = None) -> Any:
    """Queue the demo run; returns its RunRecord. Any worker binds the ``ops.*`` functions
    (the ``demo`` host function set)."""
    from dashboard.runs import runner

    return runner.start_run(
        task_text(),
        demo_profile(),
        None,
        kind="demo",
        turns=TURNS,
        host_set="demo",
        pause_s=pause_s,
        session_id=session_id,
    )


DEMO_MARKER = "demo_started"


def start_demo_once(*, pause_s: float = 4.0) -> Any:
    """Queue the demo the first time any process of this console asks; None afterwards.

    The marker is a row in the console's database, so it holds once per data folder (or per
    PostgreSQL database) however many processes start together: its unique name lets one
    insert win.
    """
    from django.db import IntegrityError, transaction

    from dashboard.runs.models import ConsoleMarker

    try:
        with transaction.atomic():
            marker = ConsoleMarker.objects.create(name=DEMO_MARKER)
            run = start_demo(pause_s=pause_s)
            marker.detail = run.session_id[:200]
            marker.save(update_fields=["detail"])
    except IntegrityError:
        return None
    return run
