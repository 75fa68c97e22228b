"""The figure tables of README.md and docs/*.md are generated from bench/results/ and cannot
drift from them."""

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


def test_the_committed_pages_match_the_committed_results(capsys):
    assert readme_tables.main(["--check"]) == 0, capsys.readouterr().err


def test_by_default_the_pages_are_the_readme_and_every_docs_page(tmp_path):
    (tmp_path / "docs").mkdir()
    for name in ("b.md", "a.md", "notes.txt"):
        (tmp_path / "docs" / name).write_text("", encoding="utf-8")

    pages = readme_tables.default_pages(tmp_path)

    assert pages == [tmp_path / "README.md", tmp_path / "docs" / "a.md", tmp_path / "docs" / "b.md"]
    assert REPO / "README.md" in readme_tables.default_pages()


def test_it_writes_every_figure_between_the_markers_and_keeps_the_prose(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(README, encoding="utf-8")
    _result(tmp_path / "results", "alpha", {"ratio": 0.8251, "events": 100000, "p50_ms": 1234.6})

    args = ["--pages", str(readme), "--results", str(tmp_path / "results")]
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
    args = ["--pages", str(readme), "--results", str(tmp_path / "results")]
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

    readme_tables.main(["--pages", str(readme), "--results", str(tmp_path / "results")])

    assert "Quick smoke run" in readme.read_text(encoding="utf-8")


def test_a_result_no_block_publishes_fails_the_check(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(README, encoding="utf-8")
    _result(tmp_path / "results", "alpha", {"ratio": 0.8})
    _result(tmp_path / "results", "beta", {"ratio": 0.9})
    args = ["--pages", str(readme), "--results", str(tmp_path / "results")]

    assert readme_tables.main(args) == 1
    assert readme_tables.main([*args, "--check"]) == 1
    assert "beta" in capsys.readouterr().err


def test_a_block_with_no_results_yet_says_so(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(README, encoding="utf-8")
    (tmp_path / "results").mkdir()

    readme_tables.main(["--pages", str(readme), "--results", str(tmp_path / "results")])

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

    args = ["--pages", str(readme), "--results", str(tmp_path / "results")]

    assert readme_tables.main(args) == 2
    assert "alpha.json" in capsys.readouterr().err
    assert readme.read_text(encoding="utf-8") == README


def test_an_unclosed_block_is_refused(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("<!-- figures:alpha -->\nno end\n", encoding="utf-8")
    (tmp_path / "results").mkdir()

    args = ["--pages", str(readme), "--results", str(tmp_path / "results")]
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

    args = ["--pages", str(readme), "--results", str(tmp_path / "results")]
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

    args = ["--pages", str(readme), "--results", str(tmp_path / "results")]
    assert readme_tables.main(args) == 2
    assert "must name {row} and {column}" in capsys.readouterr().err
    assert readme.read_text(encoding="utf-8") == README


def _pages(tmp_path: Path, **texts: str) -> list[str]:
    """``--pages`` arguments for pages written under tmp_path (``README`` -> README.md)."""
    (tmp_path / "docs").mkdir(exist_ok=True)
    paths = []
    for name, text in texts.items():
        path = tmp_path / "README.md" if name == "README" else tmp_path / "docs" / f"{name}.md"
        path.write_text(text, encoding="utf-8")
        paths.append(str(path))
    return ["--pages", *paths]


def test_a_block_is_written_in_whichever_page_holds_it(tmp_path):
    figures_page = "# Figures\n\n<!-- figures:beta -->\nold\n<!-- /figures:beta -->\n"
    pages = _pages(tmp_path, README=README, figures=figures_page, other="# Nothing here\n")
    _result(tmp_path / "results", "alpha", {"ratio": 0.8})
    _result(tmp_path / "results", "beta", {"events": 1000000})
    args = [*pages, "--results", str(tmp_path / "results")]

    assert readme_tables.main(args) == 0

    readme = (tmp_path / "README.md").read_text(encoding="utf-8")
    docs_page = (tmp_path / "docs" / "figures.md").read_text(encoding="utf-8")
    assert "| `ratio` | 0.8 |" in readme and "events" not in readme
    assert "| `events` | 1,000,000 |" in docs_page and "old" not in docs_page
    assert (tmp_path / "docs" / "other.md").read_text(encoding="utf-8") == "# Nothing here\n"
    assert readme_tables.main([*args, "--check"]) == 0

    _result(tmp_path / "results", "beta", {"events": 2000000})
    assert readme_tables.main([*args, "--check"]) == 1


def test_a_stale_docs_page_is_named_by_the_check(tmp_path, capsys):
    figures_page = "<!-- figures:beta -->\nold\n<!-- /figures:beta -->\n"
    pages = _pages(tmp_path, README="# Scroll\n", figures=figures_page)
    _result(tmp_path / "results", "beta", {"ratio": 0.9})

    assert readme_tables.main([*pages, "--results", str(tmp_path / "results"), "--check"]) == 1
    err = capsys.readouterr().err
    assert "figures.md is out of date" in err and "README.md" not in err


def test_a_result_with_a_block_in_no_page_fails(tmp_path, capsys):
    pages = _pages(tmp_path, README=README, figures="# Figures\n\nNo blocks.\n")
    _result(tmp_path / "results", "alpha", {"ratio": 0.8})
    _result(tmp_path / "results", "gamma", {"ratio": 0.9})
    args = [*pages, "--results", str(tmp_path / "results")]

    assert readme_tables.main([*args, "--check"]) == 1
    assert "results without a block in any page: gamma" in capsys.readouterr().err
    assert readme_tables.main(args) == 1
    assert "gamma" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["two pages", "one page"])
def test_a_block_name_that_appears_twice_is_refused(tmp_path, capsys, where):
    block = "<!-- figures:alpha -->\nx\n<!-- /figures:alpha -->\n"
    if where == "two pages":
        pages = _pages(tmp_path, README=README, figures=block)
    else:
        pages = _pages(tmp_path, README="# Scroll\n", figures=block + "\nProse.\n\n" + block)
    _result(tmp_path / "results", "alpha", {"ratio": 0.8})
    before = {path: Path(path).read_text(encoding="utf-8") for path in pages[1:]}

    assert readme_tables.main([*pages, "--results", str(tmp_path / "results")]) == 2

    err = capsys.readouterr().err
    assert "'alpha' appears" in err and "figures.md" in err
    if where == "two pages":
        assert "README.md" in err
    else:
        assert "twice in" in err
    # Nothing is rewritten when the pages are refused.
    assert {path: Path(path).read_text(encoding="utf-8") for path in pages[1:]} == before


# The README's five headlines are typed prose, not a generated block: each names figures of
# a committed results file, and this keeps them equal to it (a new run changes the docs
# pages' tables; the headline must follow).
HEADLINES = {
    "retrieval": ["scroll_test_recall_at_10", "plain_test_recall_at_10"],
    "e2e": [
        "c4096_test_scroll_answer_f1",
        "c4096_test_truncate_answer_f1",
        "c4096_test_summarise_answer_f1",
        "c4096_test_scroll_evidence_reachable",
        "c4096_test_truncate_evidence_reachable",
    ],
    "gateway": ["noevict_c1_added_p50_ms", "locomo_upstream_tokens_ratio"],
    "kernel": ["tiers.bwrap.exec_roundtrip_p50_ms", "tiers.bwrap.first_cell_warm_ms"],
    "compress": ["compress_evict_ms_large", "compress_evict_ms_small"],
}


@pytest.mark.parametrize("name", sorted(HEADLINES))
def test_the_readme_headlines_quote_the_committed_results(name):
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    figures_section = readme.split("\n## Figures\n", 1)[1].split("\n## ", 1)[0]
    # The headline is the bullet linking to its bench's heading (#kernel-python-benchkernelpy-...).
    bullets = [b for b in figures_section.split("\n- ") if f"-bench{name}py-" in b]
    assert len(bullets) == 1, f"no single README headline links to bench/{name}.py's table"
    figures = readme_tables.load_result(REPO / "bench" / "results" / f"{name}.json")["figures"]
    for key in HEADLINES[name]:
        value = readme_tables.format_value(figures[key])
        assert value in bullets[0], f"README headline for {name}: {key} = {value} is not quoted"
