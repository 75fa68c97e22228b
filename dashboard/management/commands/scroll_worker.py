"""``python manage.py scroll_worker``: run agent sessions outside the web processes.

Claims queued runs (and runs whose worker stopped renewing its lease), drives them, answers
console commands for them, and keeps kernel state and indexes in the database. SIGTERM or
SIGINT stops it after the current steps; a run it had not finished stays running with a lease
that expires, and another worker resumes it from its checkpoint.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from dashboard.runs.worker import Worker


class Command(BaseCommand):
    help = "Run agent sessions queued by the console (one worker; start as many as you like)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--slots", type=int, default=None,
                            help="runs at once (default SCROLL_RUNNER_WORKERS)")  # fmt: skip
        parser.add_argument("--lease", type=float, default=None,
                            help="lease seconds (default SCROLL_WORKER_LEASE_S)")  # fmt: skip
        parser.add_argument("--poll", type=float, default=0.2, help="seconds between passes")
        parser.add_argument("--id", default=None, help="this worker's name (default generated)")
        parser.add_argument(
            "--no-telemetry", action="store_true", help="do not store spans for the console"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        slots = options["slots"] or int(settings.SCROLL_RUNNER_WORKERS)
        lease = options["lease"] or float(settings.SCROLL_WORKER_LEASE_S)
        if slots < 1 or lease <= 0 or options["poll"] <= 0:
            raise CommandError("--slots, --lease and --poll must be positive")
        if not options["no_telemetry"]:
            from dashboard.telemetry.spans import install_sink

            install_sink()
        worker = Worker(
            worker_id=options["id"],
            slots=slots,
            lease_s=lease,
            poll_s=options["poll"],
            kernel_pool=int(settings.SCROLL_KERNEL_POOL),
        )
        halt = threading.Event()

        def stop(signum: int, frame: Any) -> None:
            halt.set()
            worker.shutdown_soon()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        # The line tests and operators wait for: the worker is claiming from here on.
        self.stdout.write(f"scroll_worker {worker.id} ready ({slots} slots, lease {lease:g} s)")
        self.stdout.flush()
        worker.run_forever()
        worker.shutdown()
        self.stdout.write(f"scroll_worker {worker.id} stopped")
