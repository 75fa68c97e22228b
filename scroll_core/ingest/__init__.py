"""Import transcripts from other tools into the Event Log, without any model call.

``ingest(log, fmt, path)`` parses and validates the whole file first, then appends all of
its events in one ``append_many`` transaction: a malformed file raises ``IngestError``
(naming the line or JSON path and the reason) and leaves the log untouched. Every event
carries a deterministic ``dedup_key``, so importing the same file again appends nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import IngestError, InvalidEvent
from . import claude_code, letta, locomo, longmemeval, openai_chat
from ._common import AppendLog, Draft, Parsed

__all__ = ["FORMATS", "IngestReport", "ingest", "parse"]

_PARSERS: dict[str, Callable[..., Parsed]] = {
    "openai": openai_chat.parse,
    "claude-code": claude_code.parse,
    "locomo": locomo.parse,
    "longmemeval": longmemeval.parse,
    "letta": letta.parse,
}
FORMATS: tuple[str, ...] = tuple(_PARSERS)


@dataclass(frozen=True)
class IngestReport:
    """What one import did. ``events_read`` = ``events_appended + events_already_present``."""

    format: str
    path: str
    sessions: tuple[str, ...]
    events_read: int
    events_appended: int
    events_already_present: int
    records_skipped: int = 0

    def __str__(self) -> str:
        return (
            f"{self.path} ({self.format}): {len(self.sessions)} session(s), "
            f"{self.events_read} events read, {self.events_appended} appended, "
            f"{self.events_already_present} already present"
        )


def parse(fmt: str, path: str | Path, *, session_id: str | None = None) -> list[Draft]:
    """The validated events of a file as ``EventLog.append`` keywords; appends nothing."""
    return _parse(fmt, Path(path), session_id).events


def ingest(
    log: AppendLog,
    fmt: str,
    path: str | Path,
    *,
    session_id: str | None = None,
    progress: bool | None = None,
) -> IngestReport:
    """Import one file in format ``fmt`` (one of ``FORMATS``) into ``log``, all or nothing.

    ``session_id`` puts every event into that session instead of the one the file names.
    ``progress`` shows a tqdm bar on stderr; ``None`` shows it only when stderr is a terminal.
    """
    path = Path(path)
    parsed = _parse(fmt, path, session_id)
    events = _unique(parsed.events)
    sessions = tuple(dict.fromkeys(e["session_id"] for e in events))
    show = sys.stderr.isatty() if progress is None else progress
    try:
        appended = log.append_many(_progress(events, show, path.name)).inserted
    except InvalidEvent as exc:
        raise IngestError(str(path), None, f"the event log refused an event: {exc}") from exc
    return IngestReport(
        format=fmt,
        path=str(path),
        sessions=sessions,
        events_read=len(parsed.events),
        events_appended=appended,
        events_already_present=len(parsed.events) - appended,
        records_skipped=parsed.skipped,
    )


def _parse(fmt: str, path: Path, session_id: str | None) -> Parsed:
    parser = _PARSERS.get(fmt)
    if parser is None:
        known = ", ".join(FORMATS)
        raise IngestError(str(path), None, f"unknown format {fmt!r} (known: {known})")
    if session_id is not None and not session_id.strip():
        raise IngestError(str(path), None, "session id must not be empty")
    return parser(path, session_id=session_id)


def _unique(events: list[Draft]) -> list[Draft]:
    """Drop repeats of a (session, dedup_key) inside one file; the first one wins."""
    seen: set[tuple[str, str]] = set()
    unique: list[Draft] = []
    for event in events:
        key = (event["session_id"], event["dedup_key"])
        if key not in seen:
            seen.add(key)
            unique.append(event)
    return unique


def _progress(events: list[Draft], show: bool, label: str) -> Iterable[Draft]:
    if not show:
        return events
    from tqdm import tqdm

    def bar() -> Iterator[Draft]:
        with tqdm(total=len(events), desc=f"ingest {label}", unit="event", file=sys.stderr) as t:
            for event in events:
                yield event
                t.update()

    return bar()
