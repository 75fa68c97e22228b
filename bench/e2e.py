"""End to end on LoCoMo: five arms, same window, same questions, same model.

    python bench/e2e.py --json [--context-size C [C ...]] [--split test|dev|both]
                        [--conversations N] [--questions N] [--sandbox auto|bwrap|process]
    python bench/e2e.py --tune --context-size 4096 --questions 0   # the threshold, on DEV

Defaults are the published run: C = 4096 and 32768, both splits, 60 questions per
conversation evenly spaced over its QA list (``--questions 0``: all of them).

The arms (``_e2e_arms``): ``none`` (the whole history, no Scroll code in its path; a prompt
over the window is refused and counts as a failure), ``truncate`` (the newest turns that
fit), ``summarise`` (the extractive summarise baseline, ``_extractive``, within the budget
Scroll's view spent on evicted history for the same question), ``scroll`` (the agent loop)
and ``scroll-flat`` (the same, with an index that never carries into tiers). The model is
the rule-based ``PolicyModel`` (not an LLM) in every arm, told to abstain in LoCoMo's
wording; it answers from what its view shows and, in Scroll's arms, from what its ``ms``
programs print in a sandboxed kernel.

Conversations come from the fixed dev/test split (``_locomo_split``). The headline is the
test split; dev is printed beside it. The one threshold the model has (the share of a
question's specific terms a sentence must share to be evidence) was chosen with ``--tune``
on dev only.

Scoring is LoCoMo's official rule set (``locomo_scoring``: Porter-stemmed token F1,
category 1 split on commas, category 3 first ``;`` part, category 5 correct only for "no
information available" or "not mentioned"). One normalisation is applied by the bench to
every arm's predictions alike before scoring: ISO dates the model writes (``2023-05-07``,
``2023-05``) are rewritten in LoCoMo's style (``7 May 2023``, ``May 2023``), so the model
carries no data set's date format.

Per arm, overall and by category: answer F1, abstention accuracy on category 5, evidence in
view (evidence turns in the first call's prompt), evidence recall (evidence turns in the
answering call's messages: view or printed), evidence reachable (in view, or for Scroll's
arms addressable: in the log, covered by the view or an index block, returned by
``ms.expand``), tokens billed per question (input tokens of every model call), calls refused,
``ms`` calls per question, evictions during the questions and retrievals per evicted span.
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from _common import SHARED_DATA, emit
from _locomo_split import DEV, TEST, split_of
from locomo_scoring import LOCOMO_ABSTENTION, abstained, answer_f1, locomo_dates

from bench._e2e_arms import (
    ARMS,
    SCROLL_ARMS,
    Conversation,
    Item,
    Outcome,
    run_baseline,
    run_scroll_arm,
)
from scroll_core import EventLog
from scroll_core.ingest import parse
from scroll_core.kernel import KernelConfig, KernelManager
from scroll_core.models import PolicyModel
from scroll_core.models.policy import SHARED_SPECIFIC
from scroll_core.profile import Profile

CATEGORIES = {1: "multi_hop", 2: "temporal", 3: "open_domain", 4: "single_hop", 5: "adversarial"}
TUNE_SHARES = (1 / 3, 1 / 2, 2 / 3, 3 / 4, 1.0)
# The model's one threshold (the share of a question's specific terms a sentence must share
# to be evidence), chosen with --tune on the dev split only, C = 4096, all 1,003 dev
# questions (bench/results/tuning/e2e.json): mean answer F1 over the five arms 0.167, 0.186,
# 0.196, 0.199, 0.200 for the shares above; 1 was best for every arm.
DEV_CHOSEN_SHARE = 1.0
# The published run (bench/results/e2e.json), about 7 minutes on the loaded 2-core machine.
DEFAULT_SIZES = (4096, 32768)
DEFAULT_QUESTIONS = 60
NOTES = {
    "model": "scroll-policy-baseline: rule-based, not an LLM; the same in every arm",
    "scoring": "LoCoMo's official rules (task_eval/evaluation.py), Porter stemming included",
    "answer_normalisation": (
        "every arm alike: ISO dates in predictions rewritten to LoCoMo's style "
        "(2023-05-07 -> 7 May 2023, 2023-05 -> May 2023) before scoring"
    ),
    "abstention": f"the model abstains with LoCoMo's wording: {LOCOMO_ABSTENTION!r}",
    "none": "no Scroll code; a prompt whose tokens plus the output reserve exceed C is refused",
    "truncate": "sliding window: the newest turns that fit beside the prefix and question",
    "summarise": (
        "extractive summarise baseline (entities, numbers, time words, TF-IDF per block); "
        "budget per question = Scroll's index section plus its recall output in the same "
        "question; no Scroll compress in its path"
    ),
    "scroll-flat": "Scroll with the replay lab's flat index (tiers never carry)",
    "baselines_history": (
        "the three baselines ask every question against the history alone (their best case); "
        "Scroll's arms ask in sequence in one session"
    ),
    "threshold": "the evidence share (DEV_CHOSEN_SHARE) chosen with --tune on the dev split only",
    "tokens": "tokens counted by the Event Log's counter for every arm",
    "abstention_credit": (
        "LoCoMo's token F1 gives the abstention phrase a little credit on answerable items "
        "whose gold shares a word with it ('not', 'in'); the same for every arm"
    ),
    "sample": "--questions N takes N items evenly spaced over each conversation's QA list",
}


# ---------------------------------------------------------------------- data
def load(path: Path, ids: Sequence[str]) -> list[Conversation]:
    samples = {str(s["sample_id"]): s for s in json.loads(path.read_text())}
    drafts = parse("locomo", path)
    by_session: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for draft in drafts:
        by_session[str(draft["session_id"])].append(draft)
    missing = [i for i in ids if i not in samples]
    if missing:
        raise SystemExit(f"not in {path}: {', '.join(missing)}")
    return [Conversation.from_sample(samples[i], by_session[f"locomo:{i}"]) for i in ids]


def sample_items(items: Sequence[Item], n: int | None) -> list[Item]:
    """``n`` items evenly spaced over the list (all when ``n`` is None or larger)."""
    if n is None or n >= len(items):
        return list(items)
    if n < 1:
        return []
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


# ---------------------------------------------------------------------- scoring
def score(item: Item, answer: str | None) -> float:
    return answer_f1(locomo_dates(answer) if answer is not None else None, item.gold, item.category)


def row(item: Item, outcome: Outcome, known: set[str]) -> dict[str, Any]:
    ids = [d for d in item.evidence if d in known]

    def share(found: set[str]) -> float | None:
        return len([d for d in ids if d in found]) / len(ids) if ids else None

    return {
        "category": item.category,
        "f1": score(item, outcome.answer),
        "abstained": abstained(outcome.answer),
        "answered": outcome.answer is not None,
        "refused": outcome.refused,
        "evidence_in_view": share(outcome.in_view),
        "evidence_recall": share(outcome.reached),
        "evidence_reachable": share(outcome.in_view | outcome.addressable),
        "tokens_billed": outcome.tokens_billed,
        "prompt_tokens": outcome.prompt_tokens,
        "ms_calls": outcome.ms_calls,
        "evictions": outcome.evictions,
        "retrievals": outcome.retrievals,
        "summary_budget": outcome.summary_budget,
        "summary_tokens": outcome.summary_tokens,
    }


def figures(rows: list[dict[str, Any]], spans: list[tuple[int, int]]) -> dict[str, Any]:
    def part(chosen: list[dict[str, Any]]) -> dict[str, Any]:
        adversarial = [r for r in chosen if r["category"] == 5]
        return {
            "questions": len(chosen),
            "answer_f1": _mean([r["f1"] for r in chosen]),
            "abstention_accuracy": _mean([float(r["abstained"]) for r in adversarial]),
            "abstention_rate_answerable": _mean(
                [float(r["abstained"]) for r in chosen if r["category"] != 5]
            ),
            "evidence_in_view": _mean_of(chosen, "evidence_in_view"),
            "evidence_recall": _mean_of(chosen, "evidence_recall"),
            "evidence_reachable": _mean_of(chosen, "evidence_reachable"),
            "answered": _mean([float(r["answered"]) for r in chosen]),
            "calls_refused": sum(1 for r in chosen if r["refused"]),
            "tokens_billed_per_question": _mean([r["tokens_billed"] for r in chosen]),
            "median_prompt_tokens": _median([r["prompt_tokens"] for r in chosen]),
            "ms_calls_per_question": _mean([r["ms_calls"] for r in chosen]),
            "evictions_during_questions": sum(r["evictions"] for r in chosen),
        }

    out = part(rows)
    budgets = [r["summary_budget"] for r in rows if r["summary_budget"] is not None]
    if budgets:
        out["summary_budget_median"] = _median(budgets)
        out["summary_tokens_max_over_budget"] = max(
            (r["summary_tokens"] or 0) - r["summary_budget"]
            for r in rows
            if r["summary_budget"] is not None
        )
    out.update(_span_figures(rows, spans))
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[CATEGORIES.get(r["category"], "unknown")].append(r)
    out["by_category"] = {name: part(chosen) for name, chosen in sorted(by.items())}
    return out


def _span_figures(rows: Iterable[dict[str, Any]], spans: list[tuple[int, int]]) -> dict[str, Any]:
    spans = sorted(set(spans))
    if not spans:
        return {"evicted_spans": 0, "retrievals_per_evicted_span": None}
    los = [lo for lo, _ in spans]
    hits = [0] * len(spans)
    for r in rows:
        for seqs in r["retrievals"]:
            touched = set()
            for seq in seqs:
                i = bisect.bisect_right(los, seq) - 1
                if i >= 0 and spans[i][0] <= seq <= spans[i][1]:
                    touched.add(i)
            for i in touched:
                hits[i] += 1
    return {
        "evicted_spans": len(spans),
        "retrievals_per_evicted_span": round(sum(hits) / len(spans), 4),
    }


def _mean_of(rows: list[dict[str, Any]], key: str) -> float | None:
    return _mean([r[key] for r in rows if r[key] is not None])


def _mean(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def _median(values: Sequence[float]) -> float | None:
    return float(statistics.median(values)) if values else None


FLAT_KEYS = (
    "answer_f1",
    "abstention_accuracy",
    "evidence_in_view",
    "evidence_recall",
    "evidence_reachable",
    "tokens_billed_per_question",
    "calls_refused",
    "ms_calls_per_question",
    "evictions_during_questions",
)


def flat_figures(windows: dict[str, dict[str, dict[str, Any]]]) -> dict[str, float]:
    """``c{C}_{split}_{arm}_{figure}`` -> float, for the README generator."""
    out: dict[str, float] = {}
    for size, splits in windows.items():
        for split, arms in splits.items():
            for arm, figs in arms.items():
                stem = f"c{size}_{split}_{arm.replace('-', '_')}"
                for key in FLAT_KEYS:
                    if figs.get(key) is not None:
                        out[f"{stem}_{key}"] = float(figs[key])
                for name, part in figs["by_category"].items():
                    if part.get("answer_f1") is not None:
                        out[f"{stem}_f1_{name}"] = float(part["answer_f1"])
    return out


README_COLUMNS = (
    "answer_f1",
    "f1_single_hop",
    "f1_temporal",
    "f1_multi_hop",
    "f1_open_domain",
    "f1_adversarial",
    "evidence_in_view",
    "evidence_recall",
    "evidence_reachable",
    "tokens_billed_per_question",
    "calls_refused",
    "ms_calls_per_question",
    "evictions_during_questions",
)


def readme_tables(windows: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One arm-by-figure table per window and split, read from ``flat_figures`` keys."""
    tables = []
    for size in sorted(windows, key=int):
        splits = windows[size]
        for split in ("test", "dev"):
            if split in splits:
                tables.append(
                    {
                        "title": f"C = {int(size):,}, {split} split",
                        "rows": [arm.replace("-", "_") for arm in ARMS if arm in splits[split]],
                        "columns": list(README_COLUMNS),
                        "key": f"c{size}_{split}_{{row}}_{{column}}",
                    }
                )
    return tables


# ---------------------------------------------------------------------- one window
def run_window(
    conversations: Sequence[Conversation],
    size: int,
    args: argparse.Namespace,
    kernels: KernelManager,
    log: EventLog,
    *,
    share: float = DEV_CHOSEN_SHARE,
    keep_messages: bool = False,
) -> dict[str, dict[str, Any]]:
    """Every arm over ``conversations`` at window ``size``: rows and spans per split and arm
    (and the outcomes when ``keep_messages``)."""
    profile = Profile(context_size=size)
    model = PolicyModel(context_size=size, abstention=LOCOMO_ABSTENTION, shared_specific=share)
    got: dict[str, dict[str, Any]] = defaultdict(
        lambda: {a: {"rows": [], "spans": [], "pairs": []} for a in ARMS}
    )
    started = time.perf_counter()
    for conv in conversations:
        split = split_of(conv.sample_id)
        items = sample_items(conv.items, args.questions)
        known = {t.dia_id for t in conv.turns}
        outcomes: dict[str, list[Outcome]] = {}
        for arm in SCROLL_ARMS:
            outcomes[arm], spans = run_scroll_arm(
                arm, log, conv, items, profile, kernels, model, keep_messages=keep_messages
            )
            got[split][arm]["spans"] += spans
        budgets = [o.evidence_budget for o in outcomes["scroll"]]
        for arm in ("none", "truncate", "summarise"):
            outcomes[arm] = run_baseline(
                arm, conv, items, profile, log.tokens, model, budgets, keep_messages=keep_messages
            )
        for arm in ARMS:
            got[split][arm]["rows"] += [
                row(i, o, known) for i, o in zip(items, outcomes[arm], strict=True)
            ]
            got[split][arm]["pairs"] += list(zip(items, outcomes[arm], strict=True))
        print(
            f"C={size} {conv.sample_id} ({split}): {len(items)} questions x {len(ARMS)} arms, "
            f"{time.perf_counter() - started:.0f}s",
            file=sys.stderr,
        )
    return got


def tune(
    got: dict[str, dict[str, Any]], size: int
) -> tuple[float, dict[str, dict[str, float | None]]]:
    """Re-decide every dev answering call under each candidate share; the share with the best
    mean answer F1 over the five arms wins (ties: the smaller share)."""
    sweep: dict[str, dict[str, float | None]] = {}
    for share in TUNE_SHARES:
        model = PolicyModel(context_size=size, abstention=LOCOMO_ABSTENTION, shared_specific=share)
        per_arm: dict[str, float | None] = {}
        for arm in ARMS:
            scores = []
            for item, outcome in got["dev"][arm]["pairs"]:
                if outcome.final_messages is None or outcome.answer is None:
                    scores.append(score(item, None))
                    continue
                reply = model.complete(outcome.final_messages, outcome.final_tools or [])
                scores.append(score(item, reply.content.rsplit("\n⟦", 1)[0].strip()))
            per_arm[arm] = _mean(scores)
        per_arm["mean_over_arms"] = _mean([v for v in per_arm.values() if v is not None])
        sweep[f"{share:.3f}"] = per_arm
    best = max(TUNE_SHARES, key=lambda s: (sweep[f"{s:.3f}"]["mean_over_arms"] or 0.0, -s))
    return best, sweep


# ---------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dataset", choices=["locomo"], default="locomo")
    parser.add_argument("--data", type=Path, default=SHARED_DATA / "locomo" / "locomo10.json")
    parser.add_argument("--context-size", type=int, nargs="+", default=list(DEFAULT_SIZES))
    parser.add_argument("--split", choices=["test", "dev", "both"], default="both")
    parser.add_argument("--conversations", type=int, default=None, help="per split")
    parser.add_argument(
        "--questions",
        type=int,
        default=DEFAULT_QUESTIONS,
        help="per conversation, evenly spaced (0: all)",
    )
    parser.add_argument("--sandbox", choices=["auto", "bwrap", "process"], default="auto")
    parser.add_argument("--tune", action="store_true", help="choose the threshold on dev")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not args.data.is_file():
        parser.error(f"LoCoMo not found at {args.data}")
    if args.conversations is not None and args.conversations < 1:
        parser.error("--conversations must be at least 1")
    if args.questions < 0:
        parser.error("--questions must not be negative")
    if args.questions == 0:
        args.questions = None
    if any(c < 1024 for c in args.context_size):
        parser.error("--context-size must be at least 1024")
    splits = ["dev"] if args.tune else (["test", "dev"] if args.split == "both" else [args.split])
    ids = [
        i for s in splits for i in (TEST if s == "test" else DEV)[: args.conversations or len(TEST)]
    ]
    conversations = load(args.data, ids)
    started = time.perf_counter()
    windows: dict[str, dict[str, dict[str, Any]]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="scroll-e2e-") as tmp,
        KernelManager(KernelConfig(sandbox=args.sandbox), pool_size=1) as kernels,
    ):
        for size in args.context_size:
            with EventLog(Path(tmp) / f"eventlog-{size}.sqlite3") as log:
                # Tuning runs live at the library's default share and re-decides each
                # answering call under every candidate; the report runs at the chosen one.
                share = SHARED_SPECIFIC if args.tune else DEV_CHOSEN_SHARE
                got = run_window(
                    conversations, size, args, kernels, log, share=share, keep_messages=args.tune
                )
            if args.tune:
                best, sweep = tune(got, size)
                emit(
                    {
                        "context_size": size,
                        "conversations": ids,
                        "questions_per_conversation": args.questions or "all",
                        "chosen_share": best,
                        "sweep": sweep,
                        # Only the choice is a figure; the sweep stays whole in the details.
                        "figures": {"chosen_share": best},
                    },
                    True,
                )
                return
            windows[str(size)] = {
                split: {arm: figures(parts["rows"], parts["spans"]) for arm, parts in arms.items()}
                for split, arms in got.items()
            }
        tier = kernels.tier
    first = windows[str(args.context_size[0])]
    headline_split = "test" if "test" in first else "dev"
    result: dict[str, Any] = {
        "headline": {"context_size": args.context_size[0], "split": headline_split},
        **{arm: first[headline_split][arm] for arm in ARMS},
        "windows": windows,
        "figures": flat_figures(windows),
        "readme_tables": readme_tables(windows),
        "notes": NOTES,
        "setup": {
            "dataset": "locomo",
            "arms": list(ARMS),
            "context_sizes": args.context_size,
            "splits": {s: [i for i in ids if split_of(i) == s] for s in splits},
            "conversations": ids,
            "questions_per_conversation": args.questions or "all",
            "model": "scroll-policy-baseline (rule-based, not an LLM)",
            "shared_specific": DEV_CHOSEN_SHARE,
            "kernel_tier": tier,
            "seconds": round(time.perf_counter() - started, 1),
        },
    }
    emit(result, args.json)


if __name__ == "__main__":
    main()
