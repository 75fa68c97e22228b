"""Regenerate the figure tables of README.md and docs/*.md from ``bench/results/*.json``.

    python bench/readme_tables.py [--check] [--pages PAGE ...] [--results bench/results]

Each ``bench/results/<name>.json`` (written by ``make bench``) fills the block between
``<!-- figures:<name> -->`` and ``<!-- /figures:<name> -->`` with a table of its ``figures``
and the command, machine and date that produced them, so no figure in those tables is typed
by hand. A block whose results file does not exist yet says so. The pages searched for blocks
are README.md and every ``docs/*.md`` unless ``--pages`` names others; a block may live in
any one of them, and a block name found twice (in one page or in two) is an error.

A bench with many figures may ask for pivot tables instead of one ``figure | value`` row per
key: ``details.readme_tables`` is a list of ``{"title", "rows", "columns", "key"}``, where
``key`` is a format string over ``{row}`` and ``{column}`` naming a figure (e.g.
``"c4096_test_{row}_{column}"``). Every cell still comes from ``figures``; a key a table names
that ``figures`` lacks is shown as ``–``.

``--check`` rewrites nothing and exits 1 when a page differs from what the results would
give, or when a results file has no block in any page (a figure nobody publishes).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BLOCK = re.compile(
    r"(?P<open><!-- figures:(?P<name>[a-z0-9_]+) -->\n)(?P<body>.*?)"
    r"(?P<close><!-- /figures:(?P=name) -->)",
    re.DOTALL,
)


class TablesError(Exception):
    """A results file or a page is not in the shape this script renders from."""


def format_value(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TablesError(f"figure value {value!r} is not a number")
    if isinstance(value, int):
        return f"{value:,}"
    if value != value:  # NaN
        return "n/a"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return text if text not in ("", "-0") else "0"


def load_result(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TablesError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(data, dict) or not isinstance(data.get("figures"), dict):
        raise TablesError(f'{path}: no top-level "figures" dict')
    for key, value in data["figures"].items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TablesError(f"{path}: figure {key!r} is {value!r}, not a number")
    return data


def render_block(name: str, data: dict[str, Any] | None) -> str:
    if data is None:
        return f"_No results yet: `make bench` writes `bench/results/{name}.json`._\n"
    machine = data.get("machine") or {}
    facts = [f"`{data.get('command', '?')}`"]
    if machine:
        facts.append(
            f"{machine.get('cores', '?')} cores, Python {machine.get('python', '?')}, "
            f"{machine.get('date', '?')}"
        )
        if "load_average_1m" in machine:
            facts.append(f"load average {machine['load_average_1m']} at the end")
    lines = [f"_From `bench/results/{name}.json`: " + "; ".join(facts) + "._"]
    if data.get("quick"):
        lines.append("**Quick smoke run (`--quick`, small sizes): not a published figure.**")
    tables = (data.get("details") or {}).get("readme_tables")
    if tables:
        for table in tables:
            lines += ["", *pivot_table(table, data["figures"])]
        return "\n".join(lines) + "\n"
    lines += ["", "| figure | value |", "| --- | --- |"]
    for key, value in data["figures"].items():
        lines.append(f"| `{key}` | {format_value(value)} |")
    return "\n".join(lines) + "\n"


def pivot_table(table: dict[str, Any], figures: dict[str, Any]) -> list[str]:
    """One titled Markdown table whose cells are ``figures[key.format(row=, column=)]``."""
    try:
        title, rows, columns, key = (table[k] for k in ("title", "rows", "columns", "key"))
    except (KeyError, TypeError) as exc:
        raise TablesError(f"a readme table needs title, rows, columns and key: {exc}") from None
    if "{row}" not in key or "{column}" not in key:
        raise TablesError(f"readme table key {key!r} must name {{row}} and {{column}}")
    out = [f"**{title}**", "", "| | " + " | ".join(map(str, columns)) + " |"]
    out.append("| --- " * (len(columns) + 1) + "|")
    for row in rows:
        cells = []
        for column in columns:
            name = key.format(row=row, column=column)
            cells.append(format_value(figures[name]) if name in figures else "–")
        out.append(f"| {row} | " + " | ".join(cells) + " |")
    return out


def regenerate(page: str, results: dict[str, dict[str, Any]]) -> tuple[str, list[str]]:
    """One page with every block re-rendered, and the names of its blocks in page order."""
    seen: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        seen.append(name)
        return match["open"] + render_block(name, results.get(name)) + match["close"]

    text = BLOCK.sub(replace, page)
    opened = set(re.findall(r"<!-- figures:([a-z0-9_]+) -->", page))
    if opened != set(seen):
        raise TablesError(f"figure blocks without a closing marker: {sorted(opened - set(seen))}")
    return text, seen


def regenerate_pages(
    pages: dict[Path, str], results: dict[str, dict[str, Any]]
) -> tuple[dict[Path, str], list[str]]:
    """Every page re-rendered, and the names of results without a block in any page.

    A block name may appear once across all the pages: two blocks would publish the same
    figures twice, and one of them would be the one nobody remembers to read."""
    holder: dict[str, Path] = {}
    texts: dict[Path, str] = {}
    for path, page in pages.items():
        try:
            texts[path], names = regenerate(page, results)
        except TablesError as exc:
            raise TablesError(f"{path}: {exc}") from None
        for name in names:
            if name in holder:
                where = (
                    f"twice in {path}" if holder[name] == path else f"in {holder[name]} and {path}"
                )
                raise TablesError(f"figure block {name!r} appears {where}")
            holder[name] = path
    return texts, sorted(set(results) - set(holder))


def default_pages(root: Path = REPO) -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def read_results(folder: Path) -> dict[str, dict[str, Any]]:
    return {path.stem: load_result(path) for path in sorted(folder.glob("*.json"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a page is stale")
    parser.add_argument(
        "--pages",
        type=Path,
        nargs="+",
        default=None,
        help="Markdown pages holding the blocks (default: README.md and docs/*.md)",
    )
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args(argv)
    paths = args.pages if args.pages is not None else default_pages()
    try:
        pages = {path: path.read_text(encoding="utf-8") for path in paths}
        texts, unpublished = regenerate_pages(pages, read_results(args.results))
    except (TablesError, OSError) as exc:
        print(f"readme_tables: {exc}", file=sys.stderr)
        return 2
    problems = [f"results without a block in any page: {name}" for name in unpublished]
    stale = [path for path in paths if texts[path] != pages[path]]
    if args.check:
        for path in stale:
            problems.append(f"{path} is out of date: run python bench/readme_tables.py")
        for problem in problems:
            print(f"readme_tables: {problem}", file=sys.stderr)
        return 1 if problems else 0
    for path in stale:
        path.write_text(texts[path], encoding="utf-8")
        print(f"readme_tables: rewrote {path}")
    for problem in problems:
        print(f"readme_tables: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
