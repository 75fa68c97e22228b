"""What scoping by project costs a page: a user narrowed to one project against a user who
reads everything (the path every user takes while the default project is the only one, and
the same queries as before projects), in the same run.

    python bench/projects.py --json [--quick] [--sessions N] [--rounds R]

A temporary data folder, migrated; N sessions (2,000; 200 with --quick) of 5 events and 2
spans each, split between two projects, one open alert per session. Each round GETs the
sessions page (with a search), the traces page and the alerts page once as each user,
alternating which goes first, through Django's test client in this process.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from _common import emit, median, percentile

REPO = Path(__file__).resolve().parents[1]
PAGES = {"sessions": "/?q=rollout", "traces": "/traces/", "alerts": "/alerts/"}


def _setup(data: Path, sessions: int) -> tuple[object, object]:
    os.environ["SCROLL_DATA_DIR"] = str(data)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
    sys.path.insert(0, str(REPO))
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from dashboard.eventlog import get_event_log
    from dashboard.projects.models import VIEWER, AgentOwner, Membership, Project
    from dashboard.telemetry.models import Alert, AlertRule, SpanRecord

    log = get_event_log()
    a = Project.objects.create(name="A")
    b = Project.objects.create(name="B")
    rule, _ = AlertRule.objects.get_or_create(kind=AlertRule.INDEX_GAP)
    spans = []
    for i in range(sessions):
        agent, project = (f"a{i}", a) if i % 2 == 0 else (f"b{i}", b)
        AgentOwner.objects.create(agent_id=agent, project=project)
        sid = f"{agent}:s"
        log.append_many(
            {"session_id": sid, "agent_id": agent, "kind": "context_msg", "role": "user",
             "content": f"rollout step {n} of {agent}"}
            for n in range(5)
        )  # fmt: skip
        for n in range(2):
            span = SpanRecord(
                trace_id=f"{i:032x}", span_id=f"{i:012x}{n:04x}", name="scroll.expand",
                session_id=sid, start_ns=i, end_ns=i + 1000, duration_ms=0.001,
            )  # fmt: skip
            spans.append(span)
        Alert.objects.create(rule=rule, session_id=sid, key="k", message="gap")
    SpanRecord.objects.bulk_create(spans)
    users = get_user_model().objects
    root = users.create_superuser("root", "root@example.invalid", "pw-root-1")
    alice = users.create_user("alice", password="pw-alice-1")
    Membership.objects.create(project=a, user=alice, role=VIEWER)
    Project.objects.filter(is_default=True).update(everyone_role="")
    return root, alice


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="200 sessions, 5 rounds")
    parser.add_argument("--sessions", type=int)
    parser.add_argument("--rounds", type=int)
    args = parser.parse_args()
    sessions = args.sessions or (200 if args.quick else 2000)
    rounds = args.rounds or (5 if args.quick else 20)
    with tempfile.TemporaryDirectory(prefix="scroll-bench-projects-") as tmp:
        root, alice = _setup(Path(tmp), sessions)
        from django.test import Client

        clients = {}
        for name, user in (("everything", root), ("one_project", alice)):
            clients[name] = Client(HTTP_HOST="127.0.0.1")
            clients[name].force_login(user)
        times: dict[str, dict[str, list[float]]] = {
            side: {page: [] for page in PAGES} for side in clients
        }
        for page, url in PAGES.items():  # warm up, and check each side sees what it should
            seen = {side: c.get(url).content.decode() for side, c in clients.items()}
            narrowed = seen["one_project"]
            if re.search(r"\bb\d+:s", narrowed) or not re.search(r"\ba\d+:s", narrowed):
                raise SystemExit(f"{page}: the narrowed user's page is not narrowed")
        for r in range(rounds):
            order = list(clients) if r % 2 == 0 else list(reversed(clients))
            for page, url in PAGES.items():
                for side in order:
                    start = time.perf_counter()
                    answer = clients[side].get(url)
                    times[side][page].append((time.perf_counter() - start) * 1000)
                    if answer.status_code != 200:
                        raise SystemExit(f"{page} answered {answer.status_code} to {side}")
    result: dict[str, object] = {"sessions": sessions, "rounds": rounds}
    for page in PAGES:
        for side in clients:
            result[f"{page}.{side}.p50_ms"] = round(median(times[side][page]), 2)
            result[f"{page}.{side}.p99_ms"] = round(percentile(times[side][page], 99), 2)
        result[f"{page}.ratio"] = round(
            median(times["one_project"][page]) / median(times["everything"][page]), 2
        )
    emit(result, args.json)


if __name__ == "__main__":
    main()
