"""Trajectory lint on recorded sessions: how many flags each rule raises, and how many of those
sit on questions the agent got wrong (a rule that flags right and wrong answers alike is noise).

    python bench/lint.py --json [--conversations N] [--questions N] [--context-size C]
                         [--split test|dev|both] [--sandbox auto|bwrap|process]
    python bench/lint.py --tune --json   # no_disconfirming_query's evidence share, on DEV

Two sets of sessions, each recorded here by Scroll's own loop with the rule-based policy
model (not an LLM), then linted from the Event Log alone (``scroll_core.lint.lint_session``):

- LoCoMo e2e: the ``scroll`` arm of ``bench/e2e.py`` (history streamed into a live session,
  then each question asked in it) on the first N conversations of each split, K questions
  each, evenly spaced (defaults: all five conversations of both splits, 60 questions each as
  ``bench/e2e.py`` publishes, C = 4,096; about two minutes). A question is wrong when its
  answer F1 under LoCoMo's official scoring is below ``WRONG_BELOW``.
- The demo: the replay lab's recorded session (``manage.py scroll_demo``: the incident
  investigation, 6,000-token window), its three recall questions judged against the facts the
  demo's generator wrote (``dashboard/runs/demo_data.py``).

A flag sits on the question whose turn holds its cell (or reply). Per rule: flags, questions
flagged, how many of those were wrong, their share (precision for "wrong"), and that share
over the wrong share of all questions (lift: 1 is noise; the base rate is measured in the
same run). The rules' thresholds are round defaults fitted to no data set, so no split was
used to choose them, except ``no_disconfirming_query``'s evidence share (the share of the
request's terms an event must hold to count as evidence), chosen with ``--tune`` on the dev
split only: the candidate whose flagged questions are most often wrong, among those flagging
at least ``TUNE_MIN_FLAGS`` questions. Test is the headline and dev is beside it.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import SHARED_DATA, emit
from _locomo_split import DEV, TEST
from locomo_scoring import LOCOMO_ABSTENTION

from bench._e2e_arms import run_scroll_arm
from bench.e2e import DEV_CHOSEN_SHARE, load, sample_items, score
from dashboard.runs import demo, demo_data
from scroll_core import EventLog
from scroll_core.agent import Session
from scroll_core.kernel import Kernel, KernelConfig, KernelManager
from scroll_core.lint import (
    RULE_NAMES,
    Flag,
    lint_session,
    no_disconfirming_query,
    recorded_turns,
)
from scroll_core.lint.answers import MIN_SHARE
from scroll_core.models import PolicyModel
from scroll_core.profile import Profile

WRONG_BELOW = 0.5  # answer F1 under which a LoCoMo answer counts as wrong
DEFAULT_CONVERSATIONS = 5
DEFAULT_QUESTIONS = 60
TUNE_SHARES = (0.5, 2 / 3, 0.75, 1.0)
TUNE_MIN_FLAGS = 10
METRICS = ("flags", "questions_flagged", "flagged_wrong", "wrong_share_flagged", "lift")
DEFAULT_SIZE = 4096


def _on_turns(log: EventLog, session_id: str, flags: list[Flag]) -> dict[int, list[str]]:
    """Turn index -> the rules flagged in it."""
    turns = recorded_turns(log, session_id)
    by: dict[int, list[str]] = {}
    for flag in flags:
        for i, turn in enumerate(turns):
            if turn.request.seq < flag.cell_seq <= turn.end_seq:
                by.setdefault(i, []).append(flag.rule)
                break
    return by


def _tally(questions: list[tuple[bool, list[str]]], flags: list[Flag]) -> dict[str, Any]:
    """Per rule: flags, questions flagged, how many wrong; with the base rate."""
    raised = Counter(f.rule for f in flags)
    wrong_all = sum(1 for wrong, _ in questions if wrong)
    base = wrong_all / len(questions) if questions else None
    out: dict[str, Any] = {
        "questions": len(questions),
        "wrong": wrong_all,
        "wrong_share": round(base, 4) if base is not None else None,
    }
    for rule in RULE_NAMES:
        hit = [wrong for wrong, rules in questions if rule in rules]
        bad = sum(hit)
        share = bad / len(hit) if hit else None
        out[rule] = {
            "flags": raised.get(rule, 0),
            "questions_flagged": len(hit),
            "flagged_wrong": bad,
            "wrong_share_flagged": round(share, 4) if share is not None else None,
            "lift": round(share / base, 3) if share is not None and base else None,
        }
    return out


# ---------------------------------------------------------------------- LoCoMo e2e
Visit = Callable[[EventLog, str, list[bool]], None]


def locomo(
    args: argparse.Namespace, tmp: Path, split: str, visit: Visit | None = None
) -> tuple[dict[str, Any], list[Flag]]:
    """Record and lint the scroll arm's sessions of ``split``; ``visit`` is shown each session
    with whether each of its questions was wrong."""
    ids = list(TEST if split == "test" else DEV)[: args.conversations]
    conversations = load(args.data, ids)
    profile = Profile(context_size=args.context_size)
    model = PolicyModel(
        context_size=args.context_size,
        abstention=LOCOMO_ABSTENTION,
        shared_specific=DEV_CHOSEN_SHARE,
    )
    questions: list[tuple[bool, list[str]]] = []
    all_flags: list[Flag] = []
    lint_s = 0.0
    with (
        EventLog(tmp / f"locomo-{split}.sqlite3") as log,
        KernelManager(KernelConfig(sandbox=args.sandbox), pool_size=1) as kernels,
    ):
        for conv in conversations:
            items = sample_items(conv.items, args.questions)
            outcomes, _ = run_scroll_arm("scroll", log, conv, items, profile, kernels, model)
            session_id = f"locomo:{conv.sample_id}:scroll"
            began = time.perf_counter()
            flags = lint_session(log, session_id)
            lint_s += time.perf_counter() - began
            all_flags += flags
            by_turn = _on_turns(log, session_id, flags)
            if len(recorded_turns(log, session_id)) != len(items):
                raise SystemExit(f"{session_id}: turns and questions do not line up")
            wrong = [score(i, o.answer) < WRONG_BELOW for i, o in zip(items, outcomes, strict=True)]
            questions += [(w, by_turn.get(i, [])) for i, w in enumerate(wrong)]
            if visit is not None:
                visit(log, session_id, wrong)
            print(f"{conv.sample_id}: {len(items)} questions, {len(flags)} flags", file=sys.stderr)
    figures = _tally(questions, all_flags)
    figures["lint_seconds"] = round(lint_s, 2)
    return figures, all_flags


# ---------------------------------------------------------------------- the demo
def _demo_key() -> list[list[str]]:
    """What a right answer to each recall question holds, read off the generated day: the
    change that set the pool size and its author, priya.n's deploy, the pool error and the
    size it reported."""
    change = next(line for line in demo_data.config_changes() if "max_connections" in line)
    deploy = next(line for line in demo_data.deploys() if "priya.n" in line)
    error = next(
        line
        for line in demo_data.service_logs("payments-api", "13:30", "14:10")
        if "PoolTimeoutError" in line
    )
    found = [
        [_match(r"CFG-\d+", change), _match(r"by (\S+):", change, 1)],
        [_match(r"v\d+\.\d+\.\d+", deploy)],
        ["PoolTimeoutError", _match(r"size=\d+", error)],
    ]
    return found


def _match(pattern: str, text: str, group: int = 0) -> str:
    found = re.search(pattern, text)
    if found is None:
        raise SystemExit(f"the demo's data changed: {pattern!r} not in {text!r}")
    return found.group(group)


def demo_session(args: argparse.Namespace, tmp: Path) -> tuple[dict[str, Any], list[Flag]]:
    profile = Profile(**demo.DEMO_KNOBS)
    model = PolicyModel(context_size=profile.context_size)
    session_id = "demo"
    answers: list[str] = []
    with (
        EventLog(tmp / "demo.sqlite3") as log,
        Kernel(KernelConfig(sandbox=args.sandbox)) as kernel,
    ):
        kernel.register(demo_data.host_functions())
        with Session(log, model, session_id=session_id, kernel=kernel, profile=profile) as agent:
            for turn in demo.TURNS:
                answers.append(agent.ask(turn).answer or "")
        began = time.perf_counter()
        flags = lint_session(log, session_id)
        lint_s = time.perf_counter() - began
        by_turn = _on_turns(log, session_id, flags)
        turns = recorded_turns(log, session_id)
    if len(turns) != len(demo.TURNS):
        raise SystemExit("demo: turns and the demo's turns do not line up")
    first = len(demo.TURNS) - len(demo.RECALL_QUESTIONS)
    questions = []
    for i, key in enumerate(_demo_key()):
        answer = answers[first + i]
        questions.append((not all(k in answer for k in key), by_turn.get(first + i, [])))
    figures = _tally(questions, flags)
    # The operator's turns (code to run, no question to get wrong) are linted too.
    figures["flags_on_operator_turns"] = sum(
        len(rules) for i, rules in by_turn.items() if i < first
    )
    figures["lint_seconds"] = round(lint_s, 2)
    return figures, flags


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--data", type=Path, default=SHARED_DATA / "locomo" / "locomo10.json")
    parser.add_argument("--conversations", type=int, default=DEFAULT_CONVERSATIONS)
    parser.add_argument("--questions", type=int, default=DEFAULT_QUESTIONS)
    parser.add_argument("--context-size", type=int, default=DEFAULT_SIZE)
    parser.add_argument("--split", choices=["test", "dev", "both"], default="both")
    parser.add_argument("--sandbox", choices=["auto", "bwrap", "process"], default="auto")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--tune", action="store_true", help="choose the evidence share on dev")
    args = parser.parse_args()
    if not args.data.is_file():
        parser.error(f"LoCoMo not found at {args.data}")
    if not 1 <= args.conversations <= len(TEST):
        parser.error(f"--conversations must be between 1 and {len(TEST)}")
    if args.questions < 1:
        parser.error("--questions must be at least 1")
    if args.context_size < 1024:
        parser.error("--context-size must be at least 1024")
    if args.tune:
        emit(tune(args), args.json)
        return
    splits = ["test", "dev"] if args.split == "both" else [args.split]
    started = time.perf_counter()
    parts: dict[str, dict[str, Any]] = {}
    flags: list[Flag] = []
    with tempfile.TemporaryDirectory(prefix="scroll-lint-") as tmp:
        for split in splits:
            parts[f"locomo_{split}"], found = locomo(args, Path(tmp), split)
            flags += found
        parts["demo"], found = demo_session(args, Path(tmp))
        flags += found
    examples = {
        rule: next((f.explanation for f in flags if f.rule == rule), None) for rule in RULE_NAMES
    }
    result = {
        **parts,
        "figures": flat_figures(parts),
        "readme_tables": readme_tables(parts),
        "example_explanations": examples,
        "setup": {
            "model": "scroll-policy-baseline (rule-based, not an LLM)",
            "locomo_conversations": {
                s: list(TEST if s == "test" else DEV)[: args.conversations] for s in splits
            },
            "questions_per_conversation": args.questions,
            "context_size": args.context_size,
            "wrong_below_f1": WRONG_BELOW,
            "seconds": round(time.perf_counter() - started, 1),
        },
    }
    emit(result, args.json)


def tune(args: argparse.Namespace) -> dict[str, Any]:
    """no_disconfirming_query under each candidate share over the dev sessions."""
    hits: dict[float, list[bool]] = {share: [] for share in TUNE_SHARES}
    base: list[bool] = []

    def visit(log: EventLog, session_id: str, wrong: list[bool]) -> None:
        base.extend(wrong)
        turns = recorded_turns(log, session_id)
        for share in TUNE_SHARES:
            flags = no_disconfirming_query(session_id, turns, log, min_share=share)
            flagged = set(_on_turns(log, session_id, flags))
            hits[share] += [w for i, w in enumerate(wrong) if i in flagged]

    with tempfile.TemporaryDirectory(prefix="scroll-lint-tune-") as tmp:
        locomo(args, Path(tmp), "dev", visit)
    rate = sum(base) / len(base)
    sweep = {
        f"{share:.3f}": {
            "questions_flagged": len(flagged),
            "wrong_share_flagged": round(sum(flagged) / len(flagged), 4) if flagged else None,
            "lift": round(sum(flagged) / len(flagged) / rate, 3) if flagged and rate else None,
        }
        for share, flagged in hits.items()
    }
    fit = [s for s in TUNE_SHARES if len(hits[s]) >= TUNE_MIN_FLAGS]
    best = max(fit, key=lambda s: (sum(hits[s]) / len(hits[s]), -s)) if fit else MIN_SHARE
    return {
        "split": "dev",
        "wrong_share": round(rate, 4),
        "sweep": sweep,
        "chosen_share": round(best, 4),
        "figures": {"chosen_share": round(best, 4)},
    }


def flat_figures(parts: dict[str, dict[str, Any]]) -> dict[str, float]:
    """``<set>.<rule>.<metric>`` and ``<set>.<total>`` -> number (a metric with no flagged
    question has no value and no key)."""
    out: dict[str, float] = {}
    for name, part in parts.items():
        for key, value in part.items():
            if isinstance(value, dict):
                for metric, number in value.items():
                    if number is not None:
                        out[f"{name}.{key}.{metric}"] = number
            elif value is not None:
                out[f"{name}.{key}"] = value
    return out


def readme_tables(parts: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    titles = {"locomo_test": "LoCoMo e2e, test split", "locomo_dev": "LoCoMo e2e, dev split",
              "demo": "The demo session (replay lab)"}  # fmt: skip
    return [
        {
            "title": f"{titles[name]}: {part['questions']} questions, {part['wrong']} wrong "
            f"(share {part['wrong_share']})",
            "rows": list(RULE_NAMES),
            "columns": list(METRICS),
            "key": f"{name}.{{row}}.{{column}}",
        }
        for name, part in parts.items()
    ]


if __name__ == "__main__":
    main()
