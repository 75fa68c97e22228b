"""The README's figure tables are generated from bench/results/ and cannot drift from them."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("readme_tables", REPO / "bench" / "readme_tables.py")
assert _spec is not None and _spec.loader is not None
readme_tables = importlib.util.module_from_spec(_spec)
sys.modules["readme_tables"] = readme_tables
_spec.loader.exec_module(readme_tables)

README = """# Demo

<!-- figures:alpha -->
stale text
<!-- /figures:alpha -->

Prose stays.
"""


def _result(folder: Path, name: str, figures: dict, **extra) -> Path:
    folder.mkdir(exist_ok=True)
    data = {
        "figures": figures,
        "machine": {"cores": 2, "python": "3.11.7", "date": "2026-11-30T06:00:00Z"},
        "command": f"python bench/{name}.py --json",
        "quick": False,
        **extra,
    }
    path = folder / f"{name}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_the_committed_readme_matches_the_committed_results(capsys):
    assert readme_tables.main(["--check"]) == 0, capsys.readouterr().err


def test_it_writes_every_figure_between_the_markers_and_keeps_the_prose(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(README, encoding="utf-8")
    _result(tmp_path / "results", "alpha", {"ratio": 0.8251, "events": 100000, "p50_ms": 1234.6})

    args = ["--readme", str(readme), "--results", str(tmp_path / "results")]
    assert readme_tables.main(args) == 0
    text = readme.read_text(encoding="utf-8")

    assert "stale text" not in text and "Prose stays." in text
    assert "| `ratio` | 0.825 |" in text
    assert "| `events` | 100,000 |" in text
    assert "| `p50_ms` | 1,235 |" in text
    assert "`python bench/alpha.py --json`" in text and "Quick" not in text
    assert readme_tables.main([*args, "--check"]) == 0


def test_check_fails_when_a_result_changed_and_rewrites_nothing(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(README, encoding="utf-8")
    args = ["--readme", str(readme), "--results", str(tmp_path / "results")]
    _result(tmp_path / "results", "alpha", {"ratio": 0.8})
    assert readme_tables.main(args) == 0
    before = readme.read_text(encoding="utf-8")

    _result(tmp_path / "results", "alpha", {"ratio": 0.7})

    assert readme_tables.main([*args, "--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    assert readme.read_text(encoding="utf-8") == before


def test_a_quick_run_is_marked_as_not_a_result(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(README, encoding="utf-8")
    _result(tmp_path / "results", "alpha", {"ratio": 0.8}, quick=True)

    readme_tables.main(["--readme", str(readme), "--results", str(tmp_path / "results")])

    assert "Quick smoke run" in readme.read_text(encoding="utf-8")


def test_a_result_no_block_publishes_fails_the_check(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(README, encoding="utf-8")
    _result(tmp_path / "results", "alpha", {"ratio": 0.8})
    _result(tmp_path / "results", "beta", {"ratio": 0.9})
    args = ["--readme", str(readme), "--results", str(tmp_path / "results")]

    assert readme_tables.main(args) == 1
    assert readme_tables.main([*args, "--check"]) == 1
    assert "beta" in capsys.readouterr().err


def test_a_block_with_no_results_yet_says_so(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(README, encoding="utf-8")
    (tmp_path / "results").mkdir()

    readme_tables.main(["--readme", str(readme), "--results", str(tmp_path / "results")])

    assert "No results yet" in readme.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "content",
    ['{"machine": {}}', '{"figures": {"x": "fast"}}', "not json", '{"figures": {"x": true}}'],
)
def test_a_malformed_results_file_is_refused_and_the_readme_kept(tmp_path, capsys, content):
    readme = tmp_path / "README.md"
    readme.write_text(README, encoding="utf-8")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "alpha.json").write_text(content, encoding="utf-8")

    args = ["--readme", str(readme), "--results", str(tmp_path / "results")]

    assert readme_tables.main(args) == 2
    assert "alpha.json" in capsys.readouterr().err
    assert readme.read_text(encoding="utf-8") == README


def test_an_unclosed_block_is_refused(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("<!-- figures:alpha -->\nno end\n", encoding="utf-8")
    (tmp_path / "results").mkdir()

    args = ["--readme", str(readme), "--results", str(tmp_path / "results")]
    assert readme_tables.main(args) == 2
    assert "closing marker" in capsys.readouterr().err


def test_a_bench_can_ask_for_pivot_tables_filled_from_its_figures(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(README, encoding="utf-8")
    tables = [
        {
            "title": "C = 4,096",
            "rows": ["scroll", "truncate"],
            "columns": ["f1", "recall"],
            "key": "c4096_{row}_{column}",
        }
    ]
    figures = {"c4096_scroll_f1": 0.269, "c4096_scroll_recall": 0.6, "c4096_truncate_f1": 0.227}
    _result(tmp_path / "results", "alpha", figures, details={"readme_tables": tables})

    args = ["--readme", str(readme), "--results", str(tmp_path / "results")]
    assert readme_tables.main(args) == 0
    text = readme.read_text(encoding="utf-8")

    assert "**C = 4,096**" in text
    assert "| | f1 | recall |" in text
    assert "| scroll | 0.269 | 0.6 |" in text
    # A cell the figures lack is shown as missing, never invented.
    assert "| truncate | 0.227 | – |" in text
    assert "`c4096_scroll_f1`" not in text


def test_a_pivot_table_without_row_and_column_in_its_key_is_refused(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(README, encoding="utf-8")
    bad = [{"title": "t", "rows": ["a"], "columns": ["b"], "key": "fixed"}]
    _result(tmp_path / "results", "alpha", {"fixed": 1.0}, details={"readme_tables": bad})

    args = ["--readme", str(readme), "--results", str(tmp_path / "results")]
    assert readme_tables.main(args) == 2
    assert "must name {row} and {column}" in capsys.readouterr().err
    assert readme.read_text(encoding="utf-8") == README
