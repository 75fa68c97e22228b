"""The console's handle on the Event Log: one EventLog per process, opened from settings.

Opening is keyed by the configured paths, so a test that overrides
SCROLL_EVENTLOG_PATH gets a log of its own; `reset_event_log()` closes what is open
(it also runs whenever a test overrides one of those paths).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from scroll_core.eventlog import EventLog

_lock = threading.Lock()
_logs: dict[tuple[Path, Path], EventLog] = {}


def get_event_log() -> EventLog:
    """The process-wide EventLog at settings.SCROLL_EVENTLOG_PATH."""
    key = (Path(settings.SCROLL_EVENTLOG_PATH), Path(settings.SCROLL_PAYLOAD_DIR))
    with _lock:
        log = _logs.get(key)
        if log is None:
            key[0].parent.mkdir(parents=True, exist_ok=True)
            log = EventLog(key[0], payload_dir=key[1])
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
    if setting in {"SCROLL_DATA_DIR", "SCROLL_EVENTLOG_PATH", "SCROLL_PAYLOAD_DIR"}:
        reset_event_log()
