"""Regenerate the README's figure tables from ``bench/results/*.json``.

    python bench/readme_tables.py [--check] [--readme README.md] [--results bench/results]

Each ``bench/results/<name>.json`` (written by ``make bench``) fills the block between
``<!-- figures:<name> -->`` and ``<!-- /figures:<name> -->`` in the README with a table of
its ``figures`` and the command, machine and date that produced them, so no figure in those
tables is typed by hand. A block whose results file does not exist yet says so.

A bench with many figures may ask for pivot tables instead of one ``figure | value`` row per
key: ``details.readme_tables`` is a list of ``{"title", "rows", "columns", "key"}``, where
``key`` is a format string over ``{row}`` and ``{column}`` naming a figure (e.g.
``"c4096_test_{row}_{column}"``). Every cell still comes from ``figures``; a key a table names
that ``figures`` lacks is shown as ``–``.

``--check`` rewrites nothing and exits 1 when the README differs from what the results
would give, or when a results file has no block in the README (a figure nobody publishes).
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
    """A results file or the README is not in the shape this script renders from."""


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


def regenerate(readme: str, results: dict[str, dict[str, Any]]) -> tuple[str, list[str]]:
    """The README with every block re-rendered, and the names of results without a block."""
    seen: set[str] = set()

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        seen.add(name)
        return match["open"] + render_block(name, results.get(name)) + match["close"]

    text = BLOCK.sub(replace, readme)
    opened = set(re.findall(r"<!-- figures:([a-z0-9_]+) -->", readme))
    if opened != seen:
        raise TablesError(f"figure blocks without a closing marker: {sorted(opened - seen)}")
    return text, sorted(set(results) - seen)


def read_results(folder: Path) -> dict[str, dict[str, Any]]:
    return {path.stem: load_result(path) for path in sorted(folder.glob("*.json"))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the README is stale")
    parser.add_argument("--readme", type=Path, default=REPO / "README.md")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args(argv)
    try:
        readme = args.readme.read_text(encoding="utf-8")
        text, unpublished = regenerate(readme, read_results(args.results))
    except TablesError as exc:
        print(f"readme_tables: {exc}", file=sys.stderr)
        return 2
    problems = [f"results without a README block: {name}" for name in unpublished]
    if args.check:
        if text != readme:
            problems.append(f"{args.readme} is out of date: run python bench/readme_tables.py")
        for problem in problems:
            print(f"readme_tables: {problem}", file=sys.stderr)
        return 1 if problems else 0
    if text != readme:
        args.readme.write_text(text, encoding="utf-8")
        print(f"readme_tables: rewrote {args.readme}")
    for problem in problems:
        print(f"readme_tables: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
