"""``python manage.py scroll_demo``: run the built-in incident investigation in the foreground."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from dashboard.runs import runner
from dashboard.runs.demo import TURNS, start_demo
from dashboard.runs.models import RunRecord


class Command(BaseCommand):
    help = (
        "Run the demo session (an incident investigation over generated service logs) with "
        "the deterministic policy model and a 6,000-token window, and report what it did."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--pause", type=float, default=0.0, help="seconds between turns (default 0)"
        )
        parser.add_argument("--timeout", type=float, default=300.0, help="give up after this")
        parser.add_argument(
            "--telemetry", action="store_true", help="store spans for the console as it runs"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["pause"] < 0:
            raise CommandError("--pause must be 0 or more")
        if options["telemetry"]:
            from dashboard.telemetry.spans import install_sink

            install_sink()
        runner.start_embedded_worker()  # runs it here unless another worker is quicker
        run = start_demo(pause_s=options["pause"])
        self.stdout.write(f"demo session {run.session_id}: {len(TURNS)} turns")
        try:
            run = runner.wait_for_run(run.session_id, options["timeout"])
        finally:
            runner.shutdown_runner()
        self.stdout.write(
            f"status {run.status}: {run.turns} turns, {run.steps} steps, "
            f"{run.evictions} evictions, {run.folds} folds, {run.expands} expands, "
            f"view {run.view_tokens}/{run.context_size} tokens"
        )
        if run.last_answer:
            self.stdout.write(f"last answer: {run.last_answer[:500]}")
        if run.status != RunRecord.DONE:
            raise CommandError(f"the demo did not finish: {run.status} {run.error[:2000]}")
