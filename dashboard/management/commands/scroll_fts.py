"""`python manage.py scroll_fts check|rebuild|optimize`: the Event Log's full-text index."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dashboard.eventlog import get_event_log
from scroll_core.errors import SearchIndexCorrupt


class Command(BaseCommand):
    help = (
        "Maintain the Event Log's full-text index. check: exit non-zero when the index is "
        "damaged or does not cover exactly the searchable events. rebuild: refill it from the "
        "events (which are only read). optimize: merge its segments after bulk imports."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["check", "rebuild", "optimize"])

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        log = get_event_log()
        if action == "check":
            try:
                covered = log.fts_check()
            except SearchIndexCorrupt as exc:
                raise CommandError(f"{log.location}: {exc}") from exc
            self.stdout.write(self.style.SUCCESS(f"FTS index OK: {covered} events indexed"))
        elif action == "rebuild":
            covered = log.fts_rebuild()
            self.stdout.write(self.style.SUCCESS(f"FTS index rebuilt: {covered} events indexed"))
        else:
            log.fts_optimize()
            self.stdout.write(self.style.SUCCESS("FTS index optimized"))
