"""`python manage.py scroll_lint [SESSION ...] [--json]`.

Runs the trajectory lint rules (scroll_core/lint) over recorded sessions of the Event Log (all
of them when none is named) and prints each flag with its cell, its seqs and why, then a count
per rule. Reading never writes: the log is only read.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dashboard.eventlog import get_event_log
from scroll_core.lint import RULE_NAMES, lint_session


class Command(BaseCommand):
    help = (
        "Lint recorded sessions (window refill, re-reading, head-and-tail reads, undercounting "
        "filters, no disconfirming query, archive answered) with seqs."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("sessions", nargs="*", help="session ids (default: every session)")
        parser.add_argument("--json", action="store_true", help="print the flags as JSON")

    def handle(self, *args: object, **options: object) -> None:
        log = get_event_log()
        wanted = list(options["sessions"])  # type: ignore[call-overload]
        known = {s.session_id for s in log.sessions()}
        missing = [s for s in wanted if s not in known]
        if missing:
            raise CommandError(f"no such session in the Event Log: {', '.join(missing)}")
        sessions = wanted or sorted(known)
        flags = [flag for session in sessions for flag in lint_session(log, session)]
        if options["json"]:
            self.stdout.write(json.dumps([asdict(f) for f in flags], indent=2))
            return
        for flag in flags:
            self.stdout.write(
                f"{flag.session_id} seq {flag.cell_seq} [{flag.rule}] seqs "
                f"{','.join(map(str, flag.seqs))}: {flag.explanation}"
            )
        counts = Counter(f.rule for f in flags)
        summary = ", ".join(f"{rule} {counts.get(rule, 0)}" for rule in RULE_NAMES)
        self.stdout.write(f"{len(sessions)} session(s): {summary}")
