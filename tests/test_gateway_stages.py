"""Stages, the per-request laps behind the gateway's ``Server-Timing`` header.

A streaming reply's header is written on the event loop while the serving thread is still
taking laps (``upstream``, ``log``...), so reading the laps must never trip over a lap taken
at the same moment: CI once failed a streamed request with "dictionary changed size during
iteration" raised from ``Stages.header``.
"""

from __future__ import annotations

import re
import sys
import threading

from scroll_core.gateway import Stages


def test_the_header_lists_each_lap_once_in_the_order_first_taken_and_adds_repeats():
    stages = Stages(began=0.0)
    stages.lap("parse")
    stages.lap("upstream")
    stages.lap("upstream")
    names = [part.split(";")[0] for part in stages.header().split(", ")]
    assert names == ["parse", "upstream"]
    assert all(re.fullmatch(r"\w+;dur=\d+\.\d\d", p) for p in stages.header().split(", "))
    assert stages.total() >= sum(stages.ms.values()) - 1e-6


def test_reading_the_header_while_another_thread_takes_laps_never_fails():
    stages = Stages()
    stop = threading.Event()
    failures: list[BaseException] = []

    def lapper() -> None:
        n = 0
        while not stop.is_set():
            stages.lap(f"stage{n % 4000}")  # new names grow the laps as the header reads
            n += 1

    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    thread = threading.Thread(target=lapper)
    thread.start()
    try:
        for _ in range(3000):
            try:
                stages.header()
            except RuntimeError as exc:  # pragma: no cover (the failure this test guards)
                failures.append(exc)
                break
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(before)
    assert failures == []
    assert len(stages.ms) > 1  # the other thread did take laps meanwhile
