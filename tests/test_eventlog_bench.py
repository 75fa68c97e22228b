"""``bench/eventlog.py`` measures both backends in one run and feeds the README's table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from readme_tables import render_block  # noqa: E402


def test_one_small_run_reports_both_backends_side_by_side(postgres_server):
    env = {**os.environ, "SCROLL_BENCH_POSTGRES_URL": postgres_server.url}
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "eventlog.py"), "--json", "--events", "2000"],
        capture_output=True, text=True, timeout=600, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    envelope = json.loads(done.stdout)
    figures = envelope["figures"]
    for backend in ("sqlite", "postgres"):
        assert figures[f"{backend}.events"] == 2000
        for key in ("ingest_ratio", "search_overhead_ratio", "search_p50_ms"):
            assert figures[f"{backend}.{key}"] > 0, key
    assert figures["postgres.native_ts_rank_p50_ms"] > 0
    table = render_block("eventlog", envelope)
    assert "| | sqlite | postgres |" in table
    assert "| ingest_events_per_s |" in table and "| native_ts_rank_p50_ms | – |" in table


def test_a_size_below_one_batch_is_refused():
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "eventlog.py"), "--events", "10"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "at least 1000" in done.stderr
    with pytest.raises(json.JSONDecodeError):
        json.loads(done.stdout or "not json")
