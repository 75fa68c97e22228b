"""Every bench prints one JSON envelope: flat numeric figures, the rest as details."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_common", REPO / "bench" / "_common.py")
assert _spec is not None and _spec.loader is not None
common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(common)


def test_nested_numbers_flatten_and_everything_else_is_a_detail():
    figures, details = common.split_figures(
        {
            "ratio": 0.8,
            "tiers": {"bwrap": {"p50_ms": 0.1}, "process": {"p50_ms": 0.2}},
            "bwrap": {"available": True, "reason": "works"},
            "mixed": {"n": 3, "name": "x"},
            "empty": float("nan"),
            "flag": False,
        }
    )

    assert figures == {"ratio": 0.8, "tiers.bwrap.p50_ms": 0.1, "tiers.process.p50_ms": 0.2}
    assert details["bwrap"] == {"available": True, "reason": "works"}
    assert details["mixed"] == {"n": 3, "name": "x"}  # a half-numeric dict stays whole
    assert details["empty"] is None and details["flag"] is False
    assert all(not (isinstance(v, float) and math.isnan(v)) for v in figures.values())


def test_a_bench_that_names_its_figures_keeps_them():
    figures, details = common.split_figures({"figures": {"a": 1.0}, "setup": {"n": 2}})

    assert figures == {"a": 1.0} and details == {"setup": {"n": 2}}


def test_the_envelope_says_what_ran_where_and_whether_it_was_quick(tmp_path):
    script = tmp_path / "tiny.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(REPO / 'bench')!r})\n"
        "from _common import emit\n"
        "emit({'x_ms': 1.5, 'note': 'hi'}, True)\n",
        encoding="utf-8",
    )

    done = subprocess.run(
        [sys.executable, str(script), "--json", "--quick"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    envelope = json.loads(done.stdout)

    assert envelope["figures"] == {"x_ms": 1.5} and envelope["details"] == {"note": "hi"}
    assert envelope["quick"] is True
    assert envelope["command"].endswith("tiny.py --json --quick")
    assert envelope["machine"]["cores"] >= 1 and envelope["machine"]["python"]
