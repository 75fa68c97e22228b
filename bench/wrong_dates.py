"""A day in a LoCoMo question, right and wrong: whether any weighting of the ranker's date
pair holds up when the day a question names is not the day its evidence was logged.

LoCoMo's questions that name a day always name the session day of their evidence, so a fit
on them as asked learns the date pair ("on_day", "in_month") as a filter for the named day
(``RANKER_WEIGHTS_DATES``). Here every question of a split that names a day is also asked
naming another session day of its conversation, the rest of its words unchanged:

- ``near``: the other session day closest to the named one (a date misremembered);
- ``far``: the other session day furthest from it (a question about another time).

Three rankings, each scored by the Event Log's own search on every variant:

- ``shipped``: the search as it ships (the date pair at 0);
- ``dates``: the date pair fitted on the dev questions as asked (row ``dates`` of
  ``bench/retrieval.py``);
- ``dates_hedged``: refitted in this run on the dev questions as asked plus each one's near
  and far copy at half weight: a named day as likely wrong as right and, when wrong, as
  likely near as far. The fit sees the risk the held-out checks judge.

Reported on the test split; deterministic, no timing.

    python bench/wrong_dates.py [--json]
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

from _common import data_and_json, emit, metric_tables

from bench._locomo_baseline import Item
from bench._locomo_split import split_of
from bench._ranker_fit import collect, fit_weights
from bench.heldout_dates import spoken
from bench.retrieval import RANKER_WEIGHTS_8, RANKER_WEIGHTS_DATES, Bench, _padded
from scroll_core import SearchTuning
from scroll_core.store.query_dates import date_mentions

VARIANTS = ("all", "as_asked", "near", "far")
WRONG = ("near", "far")
METRICS = ("recall_at_5", "recall_at_10")
# What the hedged fit holds at 0, as the ``warm_dates`` fit does: all but the date pair.
HELD_AT_ZERO = ("day", "asks", "answers")
# Each wrong copy's weight in the hedged fit against 1 for the question as asked.
WRONG_WEIGHT = 0.5


def ask_on(question: str, day: str) -> str:
    """``question`` with every day it writes out replaced by ``day``."""
    out = question
    for mention in reversed(date_mentions(question)):
        if mention.day is not None:
            out = out[: mention.start] + spoken(day) + out[mention.end :]
    return out


def other_days(named: str, logged: set[str], days: set[str]) -> dict[str, str]:
    """The ``near`` and ``far`` day for a question naming ``named`` whose evidence was
    logged on ``logged``, among its conversation's session ``days``; empty when every day
    is the named one or an evidence day."""
    others = sorted(days - logged - {named})
    if not others:
        return {}
    anchor = date.fromisoformat(named)

    def gap(day: str) -> int:
        return abs((date.fromisoformat(day) - anchor).days)

    return {
        "near": min(others, key=lambda d: (gap(d), d)),
        "far": min(others, key=lambda d: (-gap(d), d)),
    }


class WrongDates:
    """A LoCoMo Event Log and, per split, its questions as asked and the day-naming ones
    asked on another day."""

    def __init__(self, data: Path, workdir: Path) -> None:
        self.bench = Bench(data / "locomo" / "locomo10.json", workdir)
        self.seq_of_key = {key: seq for seq, key in self.bench.keys.items()}
        self.days: dict[str, set[str]] = {}
        self.logged: dict[int, str] = {}
        for summary in self.bench.log.sessions():
            for event in self.bench.log.session_events(summary.session_id, limit=None):
                self.logged[event.seq] = event.created_at[:10]
                self.days.setdefault(summary.session_id, set()).add(event.created_at[:10])

    def seqs(self, item: Item) -> frozenset[int]:
        return frozenset(self.seq_of_key[k] for k in item.evidence if k in self.seq_of_key)

    @staticmethod
    def session(item: Item) -> str:
        return f"locomo:{item.conversation}"

    def variants(self, split: str) -> dict[str, list[Item]]:
        """``all`` the split's questions; ``as_asked`` those that name a day and have another
        session day to name; ``near`` and ``far`` those asked on it."""
        out: dict[str, list[Item]] = {name: [] for name in VARIANTS}
        for item in self.bench.items:
            if split_of(item.conversation) != split:
                continue
            out["all"].append(item)
            named = [m.day for m in date_mentions(item.question) if m.day is not None]
            if not named:
                continue
            logged = {self.logged[seq] for seq in self.seqs(item)}
            chosen = other_days(named[0], logged | set(named), self.days[self.session(item)])
            if not chosen:
                continue
            out["as_asked"].append(item)
            for name in WRONG:
                out[name].append(replace(item, question=ask_on(item.question, chosen[name])))
        return out

    def hedged_weights(self) -> tuple[float, ...]:
        """The date pair fitted on the dev questions as asked plus their wrong copies."""
        dev = self.variants("dev")
        questions = []
        for name, weight in (("all", 1.0), ("near", WRONG_WEIGHT), ("far", WRONG_WEIGHT)):
            tuning = replace(SearchTuning(), ranker_weights=())
            found = collect(self.bench.log, dev[name], self.seqs, tuning, self.session)
            questions += [replace(q, weight=weight) for q in found]
        return fit_weights(questions, _padded(RANKER_WEIGHTS_8), fixed=HELD_AT_ZERO).weights

    def close(self) -> None:
        self.bench.close()


def run(data: Path) -> dict[str, Any]:
    """Figures ``<tuning>.<variant>.<metric>`` on the test split, and the README's tables."""
    with tempfile.TemporaryDirectory() as tmp:
        check = WrongDates(data, Path(tmp))
        try:
            hedged = check.hedged_weights()
            tunings = {
                "shipped": SearchTuning(),
                "dates": replace(SearchTuning(), ranker_weights=RANKER_WEIGHTS_DATES),
                "dates_hedged": replace(SearchTuning(), ranker_weights=hedged),
            }
            test = check.variants("test")
            figures: dict[str, float] = {f"items.{v}": len(test[v]) for v in VARIANTS}
            for name, tuning in tunings.items():
                for variant in VARIANTS:
                    measured = check.bench.measure(tuning, test[variant])
                    for metric in METRICS:
                        figures[f"{name}.{variant}.{metric}"] = measured[metric]
        finally:
            check.close()
    tables = metric_tables(
        "test {metric}: LoCoMo questions as asked and on a wrong day",
        list(VARIANTS),
        list(tunings),
        METRICS,
    )
    return {
        "figures": figures,
        "hedged_weights": list(hedged),
        "readme_tables": tables,
    }


def main(argv: list[str] | None = None) -> None:
    args = data_and_json(__doc__, argv)
    result = run(args.data)
    if args.json:
        emit(result, True)
        return
    figures = result["figures"]
    print(f"hedged weights {tuple(result['hedged_weights'])}")
    for name in ("shipped", "dates", "dates_hedged"):
        for variant in VARIANTS:
            row = "  ".join(f"{m} {figures[f'{name}.{variant}.{m}']:.3f}" for m in METRICS)
            count = int(figures[f"items.{variant}"])
            print(f"{name:<12} {variant:<9} ({count:>4})  {row}")


if __name__ == "__main__":
    main()
