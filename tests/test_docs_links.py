"""Every relative link and image in README.md and docs/*.md points at something that exists.

A link's file must exist in the repository, and a ``#anchor`` must name a heading of the
page it points into, by GitHub's rule for heading ids: the heading's text as rendered
(code and emphasis markers gone, a link's text kept), lowercased, every character that is
not a letter, digit, underscore, hyphen or space dropped, spaces turned into hyphens, and a
repeated id suffixed ``-1``, ``-2``, ... in page order. Links inside code (fenced blocks and
inline spans) are text, not links, and are not checked; nor are links with a scheme
(``https:``, ``mailto:``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

FENCE = re.compile(r"^(?P<fence>`{3,}|~{3,}).*?^(?P=fence)[ \t]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(?<!`)(?P<ticks>`+)(?!`).+?(?<!`)(?P=ticks)(?!`)", re.DOTALL)
LINK = re.compile(r"!?\[(?P<text>[^\]]*)\]\((?P<target><[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\)")
REFERENCE = re.compile(r"^ {0,3}\[(?P<text>[^\]]+)\]:\s*(?P<target>\S+)", re.MULTILINE)
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(?P<text>.*?)(?:[ \t]+#+)?[ \t]*$", re.MULTILINE)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def pages(root: Path = REPO) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _without_code(text: str) -> str:
    """The page with fenced blocks and inline code spans blanked (line count kept)."""
    text = FENCE.sub(lambda m: "\n" * m.group().count("\n"), text)
    return CODE_SPAN.sub(lambda m: " " * len(m.group()), text)


def slug(heading: str) -> str:
    """GitHub's id for a heading's Markdown text (before duplicate suffixes)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"(?<!\w)_+|_+(?!\w)", "", text)  # _emphasis_, not snake_case
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading id of a Markdown page, duplicates suffixed as GitHub does."""
    seen: dict[str, int] = {}
    ids = set()
    without_fences = FENCE.sub("", page.read_text(encoding="utf-8"))
    for match in HEADING.finditer(without_fences):
        base = slug(match["text"])
        count = seen.get(base, 0)
        seen[base] = count + 1
        ids.add(base if count == 0 else f"{base}-{count}")
    return ids


def links(page: Path) -> list[tuple[str, str]]:
    """``(as written, target)`` for every link and image of a page outside code."""
    text = _without_code(page.read_text(encoding="utf-8"))
    found = [(m.group(), m["target"].strip("<>")) for m in LINK.finditer(text)]
    found += [(m.group(), m["target"].strip("<>")) for m in REFERENCE.finditer(text)]
    return found


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    """One message per relative link of ``page`` that points at nothing, naming page and link."""
    problems = []
    try:
        name = page.relative_to(root)
    except ValueError:
        name = page
    for written, target in links(page):
        if SCHEME.match(target):
            continue
        path_part, _, anchor = target.partition("#")
        goal = (page.parent / path_part).resolve() if path_part else page.resolve()
        written = " ".join(written.split())
        if not goal.is_relative_to(root.resolve()):
            problems.append(f"{name}: {written} points outside the repository")
        elif not goal.exists():
            problems.append(f"{name}: {written} points at {path_part}, which does not exist")
        elif anchor:
            if goal.suffix != ".md":
                problems.append(f"{name}: {written} has an anchor into a non-Markdown file")
            elif anchor not in anchors(goal):
                problems.append(f"{name}: {written}: no heading with id #{anchor} in {goal.name}")
    return problems


@pytest.mark.parametrize("page", pages(), ids=lambda page: str(page.relative_to(REPO)))
def test_every_relative_link_points_at_a_file_and_heading_that_exist(page):
    assert page.exists()
    problems = broken_links(page)
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_readme_links_into_the_docs_and_shows_a_screenshot():
    targets = [target for _, target in links(REPO / "README.md")]
    assert "docs/index.md" in targets
    assert any(target.startswith("docs/screenshots/") for target in targets)
    # Every docs page is reachable from the index.
    index = {target.partition("#")[0] for _, target in links(REPO / "docs" / "index.md")}
    assert {page.name for page in pages()[1:]} - {"index.md"} <= index


def test_the_check_catches_a_broken_file_or_anchor_and_names_page_and_link(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text(
        "# Other\n\n## Gateway's shared limits: `python bench/gateway_shared.py --json`\n\n"
        "## Notes\n\n## Notes\n",
        encoding="utf-8",
    )
    (tmp_path / "pic.png").write_bytes(b"")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "# Page\n\n## Local *heading*\n\n"
        "[fine](other.md)\n"
        "[fine anchor](other.md#gateways-shared-limits-python-benchgateway_sharedpy---json)\n"
        "[second notes](other.md#notes-1) [own](#local-heading) ![img](../pic.png)\n"
        "[external](https://example.com/missing) `[in code](missing.md)`\n\n"
        "```md\n[in a fence](missing.md)\n```\n\n"
        "[no file](missing.md) [no heading](other.md#nowhere) ![no image](gone.png)\n"
        "[own typo](#local-headin) [split\ntext](other.md#notes-2)\n",
        encoding="utf-8",
    )

    problems = broken_links(page, root=tmp_path)

    assert problems == [
        "docs/page.md: [no file](missing.md) points at missing.md, which does not exist",
        "docs/page.md: [no heading](other.md#nowhere): no heading with id #nowhere in other.md",
        "docs/page.md: ![no image](gone.png) points at gone.png, which does not exist",
        "docs/page.md: [own typo](#local-headin): no heading with id #local-headin in page.md",
        "docs/page.md: [split text](other.md#notes-2): no heading with id #notes-2 in other.md",
    ]


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        ("Runs in workers", "runs-in-workers"),
        ("Usage, errors, telemetry", "usage-errors-telemetry"),
        (
            "Kernel: `python bench/kernel.py --json [--quick]`",
            "kernel-python-benchkernelpy---json---quick",
        ),
        ("Gateway's shared limits", "gateways-shared-limits"),
        ("The `scroll_fts` _command_", "the-scroll_fts-command"),
        ("See [the docs](docs/index.md)", "see-the-docs"),
    ],
)
def test_heading_ids_follow_githubs_rule(heading, expected):
    assert slug(heading) == expected
