"""``bench/search_ab.py`` times two checkouts' search on one log against the bare FTS5 query."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_the_search_ab_times_both_checkouts_on_one_log_and_splits_the_search():
    # This checkout against itself: the same hits on both sides, and every figure reported.
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "search_ab.py"), "--base", str(REPO),
         "--events", "1000", "--json"],
        capture_output=True, text=True, timeout=600, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout)["figures"]
    assert figures["events"] == 1000 and figures["queries"] == 300
    for side in ("base", "this"):
        for clock in ("wall", "cpu"):
            assert figures[f"{side}.{clock}_p50_ms"] > 0
            assert figures[f"{side}.{clock}_search_overhead_ratio"] == pytest.approx(
                figures[f"{side}.{clock}_p50_ms"] / figures[f"raw.{clock}_p50_ms"], rel=0.01
            )
    parts = ("candidates", "pool_read", "ranker")
    assert all(figures[f"phase.{part}_p50_ms"] > 0 for part in parts)
    assert figures["phase.search_p50_ms"] > figures["phase.candidates_p50_ms"]


def test_a_base_that_ranks_otherwise_stops_the_run(tmp_path):
    # A copy of this checkout whose search reads fewer candidates: another ranking, refused.
    import shutil

    shutil.copytree(REPO / "scroll_core", tmp_path / "scroll_core")
    search = tmp_path / "scroll_core" / "store" / "search.py"
    text = search.read_text(encoding="utf-8")
    assert "    candidates: int = 30\n" in text
    search.write_text(text.replace("    candidates: int = 30\n", "    candidates: int = 3\n"))
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "search_ab.py"), "--base", str(tmp_path),
         "--events", "1000"],
        capture_output=True, text=True, timeout=600, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode != 0 and "rank" in done.stderr and "differently" in done.stderr
