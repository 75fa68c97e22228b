"""A seeded, tool-heavy coding-agent session in Anthropic Messages form (what Claude Code sends),
for the cost bench (``bench/gateway_cost.py``).

The shapes follow Claude Code: a long system prompt (here this repository's README and design
notes, read in place), eight tools with JSON schemas, turns of an assistant's short text and
``tool_use`` calls (sometimes two or three in parallel) answered by ``tool_result`` blocks. The
contents are honest material, not filler: ``Read`` returns a slice of a real file of this
repository with ``cat -n`` line numbers, ``Grep`` a real search over those files, ``Bash`` real
``git log`` lines or a real listing, ``Edit`` Claude Code's confirmation with a real snippet.
Which file, how many lines and how many steps a task takes come from the seed, so dev and test
sessions (different seeds) are different sessions of the same kind.

``session(seed, requests)`` returns ``Session``: ``system``, ``tools`` and ``steps``, where each
step is the client's new messages before one model call and the assistant message the scripted
upstream answers with (the same in every arm). Each assistant message also carries the headline
a model following Scroll's instruction would write (``headline``); only the Scroll arm's
upstream appends it, and it is counted as that arm's output.
"""

from __future__ import annotations

import random
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Session", "Step", "session"]

REPO = Path(__file__).resolve().parents[1]
_WORD = re.compile(r"\b[a-z_][a-z0-9_]{5,}\b")


@dataclass(frozen=True)
class Step:
    """One model call: the client's new messages (user text or tool results), then the reply."""

    new: list[dict[str, Any]]
    reply: dict[str, Any]
    headline: str


@dataclass
class Session:
    system: str
    tools: list[dict[str, Any]]
    steps: list[Step] = field(default_factory=list)
    tool_results: int = 0
    source: str = ""

    def steps_as_data(self) -> list[dict[str, Any]]:
        return [{"new": st.new, "reply": st.reply, "headline": st.headline} for st in self.steps]

    @classmethod
    def from_data(cls, like: Session, steps: list[dict[str, Any]]) -> Session:
        steps_ = [Step(**st) for st in steps]
        return cls(like.system, like.tools, steps_, like.tool_results, like.source)


def _tool(name: str, doc: str, **props: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": doc,
        "input_schema": {
            "type": "object",
            "properties": {
                k: {"type": v, "description": k.replace("_", " ")} for k, v in props.items()
            },
            "required": list(props)[:1],
        },
    }


TOOLS = [
    _tool(
        "Read",
        "Reads a file from the local filesystem. The file_path parameter must be an absolute "
        "path. By default it reads up to 2000 lines from the beginning; you can specify a line "
        "offset and limit. Results are returned using cat -n format, with line numbers "
        "starting at 1.",
        file_path="string",
        offset="integer",
        limit="integer",
    ),
    _tool(
        "Write",
        "Writes a file to the local filesystem, overwriting the existing file if there is one. "
        "Read the file first if it exists.",
        file_path="string",
        content="string",
    ),
    _tool(
        "Edit",
        "Performs exact string replacements in files. The edit fails if old_string is not "
        "unique in the file; provide more surrounding context or use replace_all.",
        file_path="string",
        old_string="string",
        new_string="string",
        replace_all="boolean",
    ),
    _tool(
        "Bash",
        "Executes a given bash command in a persistent shell session with optional timeout, "
        "ensuring proper handling and security measures. Quote paths with spaces.",
        command="string",
        description="string",
        timeout="number",
    ),
    _tool(
        "Grep",
        "A powerful search tool built on ripgrep. Supports full regex syntax; filter files with "
        "glob or type; output modes content, files_with_matches and count.",
        pattern="string",
        path="string",
        glob="string",
        output_mode="string",
    ),
    _tool(
        "Glob",
        "Fast file pattern matching tool that works with any codebase size; returns matching "
        "file paths sorted by modification time.",
        pattern="string",
        path="string",
    ),
    _tool(
        "TodoWrite",
        "Use this tool to create and manage a structured task list for your current coding "
        "session. It helps you track progress and organize complex tasks.",
        todos="array",
    ),
    _tool(
        "Task",
        "Launch a new agent to handle complex, multi-step tasks autonomously.",
        description="string",
        prompt="string",
        subagent_type="string",
    ),
]

_PROMPTS = (
    "The tests in {test} fail since the last change to {file}; find out why and fix it.",
    "Add a clear error for bad input to the function that parses settings in {file}.",
    "Refactor {file}: the module is too long; split what it holds into two modules.",
    "Why is {file} slow on long sessions? Profile it and cut the work at the source.",
    "Write a test for the behaviour described in the docstring of {file}.",
    "Review the change to {file} and say what could break for callers.",
    "Rename the helper in {file} so its name says what it holds, and update the callers.",
)
_SAYS = (
    "Let me look at {file} first.",
    "I'll check how this is used elsewhere.",
    "Now let me run the tests to see the failure.",
    "That explains it. Let me make the change.",
    "Let me read the rest of the function.",
    "I'll search for the callers.",
    "Let me check the recent history of this file.",
)


# The material is this repository as it stood at one commit, so a session is the same
# whatever changes since (the working tree stands in when a shallow clone lacks it).
PIN = "196237ea6840850a9fb771fab34c1317605ca5dc"
FOLDERS = ("scroll_core", "dashboard", "tests", "docs", "bench")


def _git(*args: str, data: str | None = None) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], input=data, capture_output=True, text=True, check=True
    ).stdout


def _tree() -> tuple[str, dict[str, str]]:
    """Where the material came from, and its files (path -> text) of more than 2,000 bytes."""
    try:
        listing = _git("ls-tree", "-r", "-l", PIN, "--", *FOLDERS, "README.md")
        wanted = []
        for line in listing.splitlines():
            meta, path = line.split("\t", 1)
            size = meta.split()[3]
            if path.endswith((".py", ".md")) and size.isdigit() and int(size) > 2000:
                wanted.append(path)
        wanted.append("README.md")
        out = _git("cat-file", "--batch", data="".join(f"{PIN}:{p}\n" for p in wanted))
        files: dict[str, str] = {}
        at = 0
        raw = out.encode()
        for path in wanted:
            header_end = raw.index(b"\n", at)
            size = int(raw[at:header_end].split()[2])
            files[path] = raw[header_end + 1 : header_end + 1 + size].decode("utf-8", "replace")
            at = header_end + 1 + size + 1
        return f"git {PIN[:12]}", files
    except (OSError, subprocess.CalledProcessError, ValueError, IndexError):
        files = {}
        for folder in FOLDERS:
            for path in sorted((REPO / folder).rglob("*")):
                if path.suffix in (".py", ".md") and path.stat().st_size > 2000:
                    files[str(path.relative_to(REPO))] = path.read_text("utf-8", "replace")
        files["README.md"] = (REPO / "README.md").read_text("utf-8")
        return "working tree", files


def _git_log() -> list[str]:
    try:
        out = _git("log", "--oneline", "-n", "400", PIN)
    except (OSError, subprocess.CalledProcessError):
        return ["(no history)"]
    return out.splitlines() or ["(no history)"]


class _Material:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.source, texts = _tree()
        self.readme = texts.pop("README.md")
        self.files = sorted(Path(p) for p in texts)
        self.lines = {Path(p): text.splitlines() for p, text in texts.items()}
        self.log = _git_log()

    def system(self) -> str:
        return "\n\n".join(
            [
                "You are an interactive CLI tool that helps users with software engineering "
                "tasks. Use the instructions below and the tools available to you to assist "
                "the user.",
                "# Project instructions (CLAUDE.md)",
                self.readme[:6000],
            ]
        )

    def rel(self, path: Path) -> str:
        return str(path)

    def read(self, path: Path) -> tuple[dict[str, Any], str]:
        lines = self.lines[path]
        limit = int(min(len(lines), self.rng.choice((60, 120, 200, 300, 450))))
        offset = self.rng.randrange(0, max(1, len(lines) - limit + 1))
        body = "\n".join(
            f"{offset + i + 1:6d}\t{line}" for i, line in enumerate(lines[offset : offset + limit])
        )
        return {"file_path": f"/repo/{self.rel(path)}", "offset": offset + 1, "limit": limit}, body

    def grep(self, path: Path) -> tuple[dict[str, Any], str]:
        words = _WORD.findall("\n".join(self.lines[path][:200])) or ["import"]
        word = self.rng.choice(words)
        hits: list[str] = []
        for other in self.files:
            for n, line in enumerate(self.lines[other], 1):
                if word in line:
                    hits.append(f"{self.rel(other)}:{n}:{line.strip()[:160]}")
            if len(hits) >= 60:
                break
        return {"pattern": word, "path": "/repo", "output_mode": "content"}, "\n".join(hits[:60])

    def bash(self, path: Path) -> tuple[dict[str, Any], str]:
        if self.rng.random() < 0.5:
            n = self.rng.choice((10, 30, 60))
            start = self.rng.randrange(0, max(1, len(self.log) - n))
            return (
                {
                    "command": f"git log --oneline -n {n} -- {self.rel(path)}",
                    "description": "history",
                },
                "\n".join(self.log[start : start + n]),
            )
        tests = [p for p in self.files if p.name.startswith("test_")] or self.files
        test = self.rng.choice(tests)
        names = re.findall(r"def (test_\w+)", "\n".join(self.lines[test]))
        out = [f"{self.rel(test)}::{name} PASSED" for name in names[:80]]
        out.append(f"{len(out)} passed in {self.rng.uniform(0.5, 9):.2f}s")
        return {"command": f"pytest -q {self.rel(test)} -v", "description": "run tests"}, "\n".join(
            out
        )

    def edit(self, path: Path) -> tuple[dict[str, Any], str]:
        lines = self.lines[path]
        at = self.rng.randrange(0, max(1, len(lines) - 12))
        old = lines[at] if lines else ""
        snippet = "\n".join(
            f"{at + i + 1:6d}\t{line}" for i, line in enumerate(lines[at : at + 12])
        )
        return (
            {
                "file_path": f"/repo/{self.rel(path)}",
                "old_string": old,
                "new_string": old + "  # fixed",
            },
            f"The file /repo/{self.rel(path)} has been updated. Here's the result of running "
            f"`cat -n` on a snippet of the edited file:\n{snippet}",
        )


def session(seed: int, requests: int = 320) -> Session:
    """A session of at least ``requests`` model calls, the same for the same seed."""
    rng = random.Random(seed)
    material = _Material(rng)
    out = Session(system=material.system(), tools=[dict(t) for t in TOOLS])
    out.source = material.source
    kinds = (
        ("Read", material.read, 0.4),
        ("Grep", material.grep, 0.2),
        ("Bash", material.bash, 0.2),
        ("Edit", material.edit, 0.2),
    )
    call = 0
    task = 0
    while len(out.steps) < requests:
        task += 1
        focus = rng.choice(material.files)
        test = rng.choice(
            [p for p in material.files if p.name.startswith("test_")] or material.files
        )
        prompt = rng.choice(_PROMPTS).format(file=material.rel(focus), test=material.rel(test))
        new: list[dict[str, Any]] = [
            {"role": "user", "content": [{"type": "text", "text": prompt}]}
        ]
        steps = min(12, 1 + int(rng.expovariate(1 / 2.5)))
        for n in range(steps):
            parallel = 1 if rng.random() < 0.8 else rng.choice((2, 3))
            text = rng.choice(_SAYS).format(file=material.rel(focus))
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text}]
            results: list[dict[str, Any]] = []
            names: list[str] = []
            for _ in range(parallel):
                call += 1
                name, make, _ = rng.choices(kinds, weights=[k[2] for k in kinds])[0]
                target = focus if rng.random() < 0.6 else rng.choice(material.files)
                args, result = make(target)
                tool_id = f"toolu_{seed:02d}{call:05d}"
                blocks.append({"type": "tool_use", "id": tool_id, "name": name, "input": args})
                results.append({"type": "tool_result", "tool_use_id": tool_id, "content": result})
                names.append(
                    f"{name} {args.get('file_path') or args.get('pattern') or args.get('command')}"
                )
            headline = (
                f"⟦task {task}: {prompt[:60]} | status: step {n + 1} of the task; "
                f"next: {names[0][:60]} | anchors: {material.rel(focus)}⟧"
            )
            out.steps.append(Step(new, {"role": "assistant", "content": blocks}, headline))
            out.tool_results += len(results)
            new = [{"role": "user", "content": results}]
        summary = (
            f"Done: {prompt} I read {material.rel(focus)}, made the change and the tests pass. "
            "The cause was a missing check on the input; the fix adds it with a clear error."
        )
        headline = (
            f"⟦task {task} | status: done, tests pass; next: wait | anchors: {material.rel(focus)}⟧"
        )
        out.steps.append(
            Step(
                new, {"role": "assistant", "content": [{"type": "text", "text": summary}]}, headline
            )
        )
    return out
