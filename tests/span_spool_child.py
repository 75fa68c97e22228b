"""A console process for tests/test_span_spool.py: its database is a PostgreSQL the test
stops and starts, its span sink the real one. It migrates, then answers one JSON line per
command read on stdin:

    spans N B    end B batches of N spans each (each batch handed to the sink before the next)
    stored T     wait up to T s for the spool to empty; the sink's stats and the rows stored
"""

from __future__ import annotations

import json
import os
import sys
import time

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dashboard.settings")
django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import close_old_connections  # noqa: E402

from dashboard.telemetry.models import SpanRecord  # noqa: E402
from dashboard.telemetry.spans import ConsoleSpanSink  # noqa: E402
from scroll_core import telemetry  # noqa: E402


def main() -> None:
    call_command("migrate", verbosity=0)
    sink = ConsoleSpanSink()
    telemetry.configure(sinks=[sink], ring_size=None, otlp=False)
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
        else:
            answer = {"error": f"unknown command {command!r}"}
        print(json.dumps(answer), flush=True)
    telemetry.reset()
    sink.close()


if __name__ == "__main__":
    main()
