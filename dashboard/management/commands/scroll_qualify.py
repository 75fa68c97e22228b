"""`python manage.py scroll_qualify --upstream URL --model NAME [--api openai|anthropic]
[--key-env VAR] [--profile P] [--json]`.

Runs the qualification suite (scroll_core/qualify) against the model through Scroll's own
loop, prints the scorecard and stores it in the console (Qualify page). ``--model
scroll-policy-baseline`` with no upstream qualifies the rule-based baseline. The exit status
is 0 when the model passes, 1 when it fails, 2 when it could not be run.

`python manage.py scroll_qualify --queued` runs the qualifications the console queued instead
(with ``SCROLL_WORKERS=external`` the console only queues them), each claimed with one
conditional update so several of these never run the same one; it exits 0.
"""

from __future__ import annotations

import json
import sys

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dashboard.qualify import service
from dashboard.qualify.models import Qualification
from scroll_core.errors import ConfigError
from scroll_core.qualify import APIS, ItemResult


class Command(BaseCommand):
    help = "Qualify a model for Scroll: run the fixed suite and store its scorecard."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--upstream", default="", help="the model's base URL (…/v1)")
        parser.add_argument("--model", default="", help="the model name to request")
        parser.add_argument(
            "--queued", action="store_true", help="run the console's queued qualifications"
        )
        parser.add_argument("--api", default="openai", choices=APIS, help="its wire format")
        parser.add_argument(
            "--key-env", default="", help="environment variable holding the API key"
        )
        parser.add_argument("--profile", default="", help="tuning profile it is qualified for")
        parser.add_argument("--json", action="store_true", help="print the scorecard as JSON")

    def handle(self, *args: object, **options: object) -> None:
        if options["queued"]:
            self._run_queued()
            return
        if not str(options["model"]).strip():
            raise CommandError("--model is required (or --queued)")
        try:
            qualification = service.create(
                model=str(options["model"]),
                upstream=str(options["upstream"]),
                api=str(options["api"]),
                key_env=str(options["key_env"]),
                profile=str(options["profile"]),
            )
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
        quiet = bool(options["json"])

        def progress(item: ItemResult) -> None:
            if not quiet:
                mark = "pass" if item.passed else "FAIL"
                self.stdout.write(
                    f"  {mark}  {item.id:<28} {item.cells:>2} cells {item.tokens:>7} tokens "
                    f"{item.seconds:6.2f}s  {item.detail}"
                )

        card = service.execute(qualification, on_item=progress)
        qualification.refresh_from_db()
        if card is None:
            self.stderr.write(f"qualification {qualification.pk} failed: {qualification.error}")
            sys.exit(2)
        if quiet:
            self.stdout.write(json.dumps({"id": qualification.pk, **card.to_dict()}, indent=2))
        else:
            self.stdout.write(
                f"{card.model} (suite {card.suite_version}): {card.summary()} "
                f"[{card.tokens} tokens, {card.seconds:.1f}s; scorecard #{qualification.pk}]"
            )
        if not card.passed:
            sys.exit(1)

    def _run_queued(self) -> None:
        queued = Qualification.objects.filter(status=Qualification.QUEUED).order_by("id")
        for qualification in list(queued):
            card = service.execute(qualification)
            qualification.refresh_from_db()
            if card is not None:
                self.stdout.write(f"#{qualification.pk} {card.model}: {card.summary()}")
            elif qualification.status == Qualification.FAILED:
                self.stdout.write(f"#{qualification.pk} not run: {qualification.error}")
