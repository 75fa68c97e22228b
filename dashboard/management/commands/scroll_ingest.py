"""`python manage.py scroll_ingest --format FORMAT PATH [--session ID]`."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dashboard.eventlog import get_event_log
from scroll_core.errors import IngestError
from scroll_core.ingest import FORMATS, ingest


class Command(BaseCommand):
    help = (
        "Import a transcript file into the Event Log. A malformed file is refused whole: "
        "nothing of it is ingested."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="transcript file to import")
        parser.add_argument(
            "--format", required=True, choices=sorted(FORMATS), dest="fmt", help="file format"
        )
        parser.add_argument(
            "--session", dest="session_id", default=None, help="session id to file events under"
        )

    def handle(
        self, *args: Any, path: str, fmt: str, session_id: str | None, **options: Any
    ) -> None:
        log = get_event_log()
        try:
            report = ingest(log, fmt, path, session_id=session_id)
        except IngestError as exc:
            raise CommandError(str(exc)) from exc
        except OSError as exc:
            raise CommandError(f"{path}: {exc.strerror or exc}") from exc
        self.stdout.write(self.style.SUCCESS(str(report)))
        for sid in report.sessions:
            self.stdout.write(f"  session {sid}")
        if report.records_skipped:
            self.stdout.write(f"  {report.records_skipped} record(s) skipped (not events)")
