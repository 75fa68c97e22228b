"""Shared pieces of the importers: reading, validation problems, event drafts.

Every importer turns a whole file into a list of event dicts (the keyword arguments of
``EventLog.append``) before anything is appended. A malformed record does not stop the
parse at once: problems are collected with their location so that the single
``IngestError`` raised at the end names the first one and counts the rest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from ..errors import IngestError
from ..store import Seqs
from ..timeutil import format_ts, parse_ts

__all__ = [
    "AppendLog",
    "Bad",
    "Draft",
    "Parsed",
    "Problems",
    "as_dict",
    "as_list",
    "as_str",
    "content_hash",
    "draft",
    "load_json",
    "read_jsonl",
    "read_text",
    "timestamp",
]

Draft = dict[str, Any]

# How many further problem locations an IngestError lists after the first one.
_MORE_LOCATIONS = 8


class AppendLog(Protocol):
    """The part of the Event Log an import needs."""

    def append_many(self, events: Any) -> Seqs: ...


class Bad(Exception):
    """One malformed record: where it is and what is wrong with it."""

    def __init__(self, location: str, reason: str) -> None:
        super().__init__(f"{location}: {reason}")
        self.location = location
        self.reason = reason

    def error(self, path: Path) -> IngestError:
        return IngestError(str(path), self.location, self.reason)


@dataclass
class Problems:
    """Problems found while parsing one file; ``check`` raises them as one IngestError."""

    path: Path
    found: list[Bad] = field(default_factory=list)

    def add(self, bad: Bad) -> None:
        self.found.append(bad)

    def check(self) -> None:
        if not self.found:
            return
        first = self.found[0]
        reason = first.reason
        rest = self.found[1:]
        if rest:
            shown = ", ".join(b.location for b in rest[:_MORE_LOCATIONS])
            more = "" if len(rest) <= _MORE_LOCATIONS else ", ..."
            reason += f" (and {len(rest)} more problem(s): {shown}{more})"
        raise IngestError(str(self.path), first.location, reason)


@dataclass
class Parsed:
    """A fully validated file: the events to append, in order, and records skipped."""

    events: list[Draft]
    skipped: int = 0


def read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise IngestError(str(path), None, "file not found") from None
    except OSError as exc:
        raise IngestError(str(path), None, f"cannot read file: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise IngestError(str(path), f"line {line}", "not valid UTF-8") from None


def load_json(path: Path) -> Any:
    """The whole file as one JSON document; a syntax error names its line and column."""
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise IngestError(
            str(path), f"line {exc.lineno} column {exc.colno}", f"invalid JSON: {exc.msg}"
        ) from None


def read_jsonl(text: str) -> Iterator[tuple[str, Any]]:
    """``(location, value)`` per non-blank line; an unparseable line yields a ``Bad``."""
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        location = f"line {number}"
        try:
            yield location, json.loads(line)
        except json.JSONDecodeError as exc:
            yield location, Bad(location, f"invalid JSON: {exc.msg} (column {exc.colno})")


def as_dict(value: Any, where: str, what: str = "value") -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Bad(where, f"{what} must be a JSON object, not {_kind(value)}")
    return value


def as_list(value: Any, where: str, what: str = "value") -> list[Any]:
    if not isinstance(value, list):
        raise Bad(where, f"{what} must be a JSON array, not {_kind(value)}")
    return value


def as_str(obj: Mapping[str, Any], key: str, where: str, *, optional: bool = False) -> str | None:
    value = obj.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        problem = "is missing" if key not in obj else f"must be a string, not {_kind(value)}"
        raise Bad(where, f"{key!r} {problem}")
    return value


def timestamp(value: Any, where: str, *, what: str = "timestamp", offset_s: float = 0.0) -> str:
    """A stored-form UTC timestamp from an ISO-8601 string or datetime, shifted by offset."""
    if not isinstance(value, (str, datetime)):
        problem = "is missing" if value is None else f"must be a string, not {_kind(value)}"
        raise Bad(where, f"{what} {problem}")
    try:
        dt = parse_ts(value)
    except ValueError as exc:
        raise Bad(where, f"{what}: {exc}") from None
    return format_ts(dt + timedelta(seconds=offset_s))


def content_hash(*parts: Any) -> str:
    """A short stable hash of JSON-able parts, for dedup keys of records without an id."""
    blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def draft(
    *,
    session_id: str,
    kind: str,
    content: str,
    dedup_key: str,
    role: str | None = None,
    name: str | None = None,
    tool_call_id: str | None = None,
    tool_input: Any = None,
    metadata: Mapping[str, Any] | None = None,
    created_at: str | None = None,
) -> Draft:
    """One event as ``EventLog.append`` keywords; unset optional fields are left out."""
    event: Draft = {
        "session_id": session_id,
        "kind": kind,
        "content": content,
        "dedup_key": dedup_key,
    }
    optional = {
        "role": role,
        "name": name,
        "tool_call_id": tool_call_id,
        "tool_input": tool_input,
        "created_at": created_at,
    }
    event.update({k: v for k, v in optional.items() if v is not None})
    if metadata:
        event["metadata"] = {k: v for k, v in metadata.items() if v is not None}
    return event


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }.get(type(value), type(value).__name__)
