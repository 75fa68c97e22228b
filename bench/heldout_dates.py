"""A date in the question, held out: what the ranker's date features do when the day a
question names is the evidence's, and when it is another day.

LoCoMo's questions that name a day always name the day of the session that holds their
evidence, so fitting on its dev split rewards the date features ("on_day", "in_month")
whatever a date in a query means; and no question of the held-out check names a date, so
that check cannot see them either way. This asks the held-out ``words`` questions
(``bench/_heldout.py``: a transcript turn's rarest shared words, from the Claude Code and
Letta transcripts, searched among every LoCoMo turn too) three ways:

- ``plain``: as they are;
- ``right_day``: with " on <the evidence's day>" added ("on 01 April 2025");
- ``other_day``: with " on <another day>" added: the day with the most transcript events
  that is not the evidence's. A question names a day that is not when its answer was
  logged whenever the date is the topic (a deadline, a release) or is misremembered.

Each under the shipped search and under the date pair refitted on dev (row ``dates`` of
``bench/retrieval.py``), in this run. Deterministic; no timing.

    python bench/heldout_dates.py [--json]
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

from _common import data_and_json, emit, metric_tables

from bench._heldout import HeldoutItem, build_items, heldout_log
from bench.retrieval import RANKER_WEIGHTS_DATES
from scroll_core import EventLog, SearchTuning

VARIANTS = ("plain", "right_day", "other_day")


def spoken(day: str) -> str:
    return date.fromisoformat(day).strftime("%d %B %Y")


def variants(log: EventLog, items: list[HeldoutItem]) -> dict[str, list[HeldoutItem]]:
    """The ``words`` items as asked, naming their evidence's day, and naming another."""
    busiest: Counter[str] = Counter()
    for summary in log.sessions():
        if not summary.session_id.startswith("locomo:"):
            for event in log.session_events(summary.session_id, limit=None):
                busiest[event.created_at[:10]] += 1
    by_size = [day for day, _ in busiest.most_common()]
    out: dict[str, list[HeldoutItem]] = {name: [] for name in VARIANTS}
    for item in items:
        if item.family != "words":
            continue
        day = log.get(item.evidence).created_at[:10]
        other = next((d for d in by_size if d != day), None)
        if other is None:
            raise ValueError("the transcripts span one day: no other day to name")
        out["plain"].append(item)
        out["right_day"].append(replace(item, question=f"{item.question} on {spoken(day)}"))
        out["other_day"].append(replace(item, question=f"{item.question} on {spoken(other)}"))
    return out


def score(log: EventLog, items: list[HeldoutItem]) -> dict[str, float]:
    """recall@5, recall@10 and MRR@10 of ``items`` under the log's current tuning."""
    r5 = r10 = mrr = 0.0
    for item in items:
        top = [h.seq for h in log.search(item.question, 10, before_seq=item.before_seq)]
        rank = top.index(item.evidence) + 1 if item.evidence in top else 0
        r5 += 0 < rank <= 5
        r10 += rank > 0
        mrr += 1.0 / rank if rank else 0.0
    n = len(items) or 1
    return {
        "recall_at_5": round(r5 / n, 4),
        "recall_at_10": round(r10 / n, 4),
        "mrr_at_10": round(mrr / n, 4),
    }


METRICS = ("recall_at_5", "recall_at_10", "mrr_at_10")


def run(data: Path) -> dict[str, Any]:
    """Figures ``<tuning>.<variant>.<metric>`` and the README's tables over them."""
    tunings = {
        "shipped": SearchTuning(),
        "dates": replace(SearchTuning(), ranker_weights=RANKER_WEIGHTS_DATES),
    }
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, heldout_log(data, Path(tmp)) as log:
        asked = variants(log, build_items(Path(tmp) / "heldout.sqlite3"))
        figures["items"] = len(asked["plain"])
        for name, tuning in tunings.items():
            log.search_tuning = tuning
            for variant in VARIANTS:
                for metric, value in score(log, asked[variant]).items():
                    figures[f"{name}.{variant}.{metric}"] = value
    tables = metric_tables(
        "{metric} of the held-out `words` questions: shipped, date pair on",
        list(VARIANTS),
        list(tunings),
        METRICS,
    )
    return {"figures": figures, "readme_tables": tables}


def main(argv: list[str] | None = None) -> None:
    args = data_and_json(__doc__, argv)
    result = run(args.data)
    if args.json:
        emit(result, True)
        return
    figures = result["figures"]
    print(f"{figures['items']} held-out `words` questions")
    for name in ("shipped", "dates"):
        for variant in VARIANTS:
            row = "  ".join(f"{m} {figures[f'{name}.{variant}.{m}']:.3f}" for m in METRICS)
            print(f"{name:<8} {variant:<10} {row}")


if __name__ == "__main__":
    main()
