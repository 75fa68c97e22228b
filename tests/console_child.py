"""A console process for the tests that stop its PostgreSQL and start it again
(tests/test_span_spool.py, tests/test_restart_not_found.py): its database (and its Event Log,
when SCROLL_EVENTLOG_URL is set) is on a server the test controls, its span sink the real
one. It migrates, then answers one JSON line per command read on stdin:

    spans N B    end B batches of N spans each (each batch handed to the sink before the next)
    stored T     wait up to T s for the spool to empty; the sink's stats and the rows stored
    get PATH     a logged-in operator's GET of PATH through the ASGI application (as daphne
                 serves it: Django's test client keeps connections across requests, a
                 server closes or checks them at each one): its status code
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import django
import httpx

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import close_old_connections  # noqa: E402
from django.test import Client  # noqa: E402

from dashboard.asgi import application  # noqa: E402
from dashboard.telemetry.models import SpanRecord  # noqa: E402
from dashboard.telemetry.spans import ConsoleSpanSink  # noqa: E402
from scroll_core import telemetry  # noqa: E402


async def _get(path: str, cookies: dict[str, str]) -> int:
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://127.0.0.1", cookies=cookies
    ) as client:
        return (await client.get(path)).status_code


def main() -> None:
    call_command("migrate", verbosity=0)
    sink = ConsoleSpanSink()
    telemetry.configure(sinks=[sink], ring_size=None, otlp=False)
    users = get_user_model().objects
    user = users.filter(username="operator").first() or users.create_user("operator")
    login = Client(HTTP_HOST="127.0.0.1")
    login.force_login(user)
    cookies = {name: morsel.value for name, morsel in login.cookies.items()}
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command, *args = line.split()
        if command == "spans":
            size, batches = int(args[0]), int(args[1])
            for _ in range(batches):
                for _ in range(size):
                    with telemetry.span("scroll.search", session="s-spool"):
                        pass
                assert sink.flush(10.0), "the sink did not take its queue"
            answer = sink.stats()
        elif command == "stored":
            deadline = time.monotonic() + float(args[0])
            while sink.stats()["spool_pending"] and time.monotonic() < deadline:
                time.sleep(0.05)
            close_old_connections()
            answer = sink.stats() | {"rows": SpanRecord.objects.count()}
        elif command == "get":
            answer = {"status": asyncio.run(_get(args[0], cookies))}
        else:
            answer = {"error": f"unknown command {command!r}"}
        print(json.dumps(answer), flush=True)
    telemetry.reset()
    sink.close()


if __name__ == "__main__":
    main()
