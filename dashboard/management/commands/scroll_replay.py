"""`python manage.py scroll_replay SESSION [--profile NAME | --set KEY=VALUE ...]
[--policy scroll|none|summarise|flat] [--json] [--per-call]`.

Replays a recorded session under another profile or policy with no model calls and prints
the recorded run beside the replay: billed and prefill tokens, evictions, folds, peak view
against C, and regret. The recorded run is replayed under the profile in force at each of its
compresses (its run's tuning profile with the audited changes made since undone; the
``default`` profile for sessions the console did not run); its compress rows supply the
namespace digest sizes and forced compresses, so the recorded run is reproduced exactly,
even when its profile was tuned while it ran.
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from dashboard.eventlog import get_event_log
from dashboard.runs.inforce import Recorded, load_recorded
from dashboard.runs.models import TuningProfile
from scroll_core.errors import ConfigError
from scroll_core.profile import Profile
from scroll_core.replay import POLICIES, TraceError, counterfactual

KNOBS = tuple(f.name for f in fields(Profile))


def parse_sets(pairs: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` pairs as a mapping; a malformed pair or unknown key is a CommandError
    that names it."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key or not value.strip():
            raise CommandError(f"--set expects KEY=VALUE, got {pair!r}")
        if key not in KNOBS:
            raise CommandError(f"--set {key}: unknown profile setting (known: {', '.join(KNOBS)})")
        out[key] = value.strip()
    return out


class Command(BaseCommand):
    help = (
        "Replay a recorded session under another profile or context policy, deterministically "
        "and with no model calls, and compare it with the recorded run."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("session", help="session id in the Event Log")
        parser.add_argument("--profile", default=None, help="tuning profile name to replay with")
        parser.add_argument(
            "--set",
            dest="sets",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="change one knob of the profile (repeatable), e.g. trigger_ratio=0.7",
        )
        parser.add_argument("--policy", choices=POLICIES, default="scroll")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument(
            "--per-call", action="store_true", help="include every call's view and compress"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        session_id: str = options["session"]
        changes = parse_sets(options["sets"])
        recorded = self._recorded(session_id)
        if options["profile"] is not None:
            row = TuningProfile.objects.filter(name=options["profile"]).first()
            if row is None:
                known = ", ".join(TuningProfile.objects.values_list("name", flat=True))
                raise CommandError(
                    f"no tuning profile named {options['profile']!r} (known: {known})"
                )
            base = row.to_core()
        else:
            base = recorded.final
        try:
            profile = Profile.from_mapping({**base.to_dict(), **changes}) if changes else base
        except ConfigError as exc:
            raise CommandError(f"--set: {exc}") from exc
        report = counterfactual(
            recorded.trace,
            profile,
            options["policy"],
            recorded_profile=recorded.final,
            recorded_profiles=recorded.profiles,
            per_call=options["per_call"],
        )
        report["recorded_profile_name"] = recorded.profile_name
        report["recorded_profile_changes"] = recorded.changes
        report["changes"] = changes
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2, sort_keys=True))
            return
        self._print(report)

    def _recorded(self, session_id: str) -> Recorded:
        if not get_event_log().count(session_id):
            raise CommandError(f"no session {session_id!r} in the Event Log")
        try:
            recorded = load_recorded(session_id)
        except TraceError as exc:
            raise CommandError(str(exc)) from exc
        recorded.trace.notes.extend(recorded.notes)
        if not recorded.trace.calls:
            raise CommandError(
                f"session {session_id!r} has no model calls (no assistant events), so there "
                "is no view to replay: an imported transcript of user messages only"
            )
        return recorded

    def _print(self, report: dict[str, Any]) -> None:
        rec, rep, reg = report["recorded"], report["replay"], report["regret"]
        self.stdout.write(
            f"session {report['session_id']} ({report['source']}), policy {report['policy']}"
        )
        self.stdout.write(
            f"  recorded profile {report['recorded_profile_name']} as in force at each compress "
            f"({report['recorded_profile_changes']} change(s) while it ran)"
        )
        for key in (
            "calls",
            "billed_prompt_tokens",
            "prefill_tokens",
            "evictions",
            "folds",
            "peak_view",
            "unfit_compresses",
        ):
            self.stdout.write(f"  {key:<22} recorded {rec[key]!s:>10}   replay {rep[key]!s:>10}")
        if rep["overflow"]:
            self.stdout.write(f"  overflows the window at call {rep['overflow']['call']}")
        self.stdout.write(
            f"  regret: {reg['needless_retrievals']} needless of {reg['retrievals_recorded']} "
            f"recorded retrievals; {reg['evicted_spans_read_live']} evicted spans the run "
            f"read live; {reg['retrievals_unreachable']} retrievals now unreachable"
        )
        repro = report["reproduction"]
        self.stdout.write(
            f"  recorded compresses reproduced: {repro['exact']} ({repro['checked']} checked)"
        )
        if not repro["checked"] and not repro["calls_checked"]:
            self.stdout.write(
                "  nothing recorded to check against: no compress records and no view sizes "
                "in the log (a session the agent loop did not write)"
            )
        for note in rep["notes"]:
            self.stdout.write(f"  note: {note}")
