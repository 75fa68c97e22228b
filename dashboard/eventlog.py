"""The console's handle on the Event Log: one EventStore per process, opened from settings.

SCROLL_EVENTLOG_URL (a postgres:// URL) selects the PostgreSQL backend; otherwise the log
is the SQLite file at SCROLL_EVENTLOG_PATH. Opening is keyed by the configured location,
so a test that overrides SCROLL_EVENTLOG_PATH or SCROLL_EVENTLOG_URL gets a log of its own;
`reset_event_log()` closes what is open (it also runs whenever a test overrides one of
those settings).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from scroll_core.store import EventStore, open_event_store

_lock = threading.Lock()
_logs: dict[tuple[str, Path], EventStore] = {}


def get_event_log() -> EventStore:
    """The process-wide Event Log: at settings.SCROLL_EVENTLOG_URL when it is set (the
    PostgreSQL backend), else the SQLite file at settings.SCROLL_EVENTLOG_PATH."""
    url = getattr(settings, "SCROLL_EVENTLOG_URL", None)
    key = (url or str(settings.SCROLL_EVENTLOG_PATH), Path(settings.SCROLL_PAYLOAD_DIR))
    with _lock:
        log = _logs.get(key)
        if log is None:
            if url:
                reader = getattr(settings, "SCROLL_EVENTLOG_READER_URL", None)
                log = open_event_store(url, reader_url=reader)
            else:
                Path(key[0]).parent.mkdir(parents=True, exist_ok=True)
                log = open_event_store(key[0], payload_dir=key[1])
            _logs[key] = log
        return log


def reset_event_log() -> None:
    """Close every EventLog this process opened; the next call opens afresh."""
    with _lock:
        logs = list(_logs.values())
        _logs.clear()
    for log in logs:
        close = getattr(log, "close", None)
        if close is not None:
            close()


@receiver(setting_changed)
def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in {
        "SCROLL_DATA_DIR",
        "SCROLL_EVENTLOG_PATH",
        "SCROLL_EVENTLOG_URL",
        "SCROLL_EVENTLOG_READER_URL",
        "SCROLL_PAYLOAD_DIR",
    }:
        reset_event_log()
