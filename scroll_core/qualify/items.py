"""The suite's items: what each asks, what it puts in the kernel and the Event Log first, and
how its outcome is judged.

Three categories (issue 33): *acting* (multi-step programs over data in the kernel, judged by
the kernel's state and the answer), *recall* (facts planted in history that is evicted or in
other sessions, asked late), *protocol* (the seam banner here; the call shape, headlines and
the window are judged over the whole run in ``scorecard``). An item builds a ``Case`` from
the suite's random generator, so its data differs by seed and never by model."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from . import data

__all__ = ["ITEMS", "Case", "Cell", "Item", "Outcome", "Verdict"]

# Acting items print through a small cap, so printing a whole table is cut (and costs).
ACTING_PRINT_CAP = 2_000
# What a competent program prints for an acting item, all cells together: a count, a few ids.
ACTING_PRINT_BUDGET = 6_000
# Recall items run in a window small enough that their history is evicted before the ask.
RECALL_CONTEXT = 6_000

Verdict = tuple[bool, str]


@dataclass(frozen=True)
class Cell:
    """One cell the model ran: its tool, code, status, printed size and whether it was cut."""

    tool: str
    code: str
    status: str
    output_chars: int
    truncated: bool


@dataclass
class Outcome:
    """What a turn left for the item's judge: the answer (``""`` when the turn ended without
    one), why the turn stopped, what the probe cell printed, the cells the model ran and the
    rules of the trajectory lint (``scroll_core.lint``) its session raised."""

    answer: str
    stop_reason: str
    probe: str
    cells: list[Cell] = field(default_factory=list)
    lint: list[str] = field(default_factory=list)  # the trajectory lint's rules that flagged


@dataclass(frozen=True)
class HistoryEvent:
    """An event put in the Event Log before the turn; ``session`` is a suffix (``""``: the
    item's own session, else an earlier session of the same agent)."""

    session: str
    role: str
    text: str
    at: datetime
    headline: str | None = None


@dataclass
class Case:
    """One generated instance of an item."""

    prompt: str
    judge: Callable[[Outcome], Verdict]
    kernel_setup: str = ""
    probe: str = ""
    history: list[HistoryEvent] = field(default_factory=list)
    context_size: int = 16_000
    print_cap: int = ACTING_PRINT_CAP


@dataclass(frozen=True)
class Item:
    """``loop``: ``scroll`` (Scroll's own loop: a ``Session`` asks the question) or
    ``gateway`` (a client sends the history and the question to the gateway's recall loop,
    which logs, evicts and recalls on its own)."""

    id: str
    category: str
    title: str
    build: Callable[[random.Random], Case]
    loop: str = "scroll"


def _number_in(text: str, value: int) -> bool:
    return re.search(rf"(?<![\d.]){value}(?![\d.])", text.replace(",", "")) is not None


def _acting_discipline(outcome: Outcome) -> str | None:
    """Why an acting outcome fails however right its answer, or None."""
    if outcome.stop_reason != "answer":
        return f"the turn ended without an answer ({outcome.stop_reason})"
    if not outcome.cells:
        return "no cell ran: the answer was not computed in the kernel"
    printed = sum(c.output_chars for c in outcome.cells)
    if printed > ACTING_PRINT_BUDGET:
        return (
            f"printed {printed:,} characters (budget {ACTING_PRINT_BUDGET:,}): filter in the kernel"
        )
    if "window_refill" in outcome.lint:
        return "re-ran a cell the print cap cut instead of filtering its variables"
    return None


def _table_setup(name: str, value: object) -> str:
    return f"import json as _json\n{name} = _json.loads({json.dumps(json.dumps(value))})\ndel _json"


# -- acting --------------------------------------------------------------------------------
def bind_filter(rng: random.Random) -> Case:
    rows = data.orders(rng)
    region, floor = rng.choice(data.REGIONS), rng.choice((500, 600, 700))
    wanted = sorted(o["id"] for o in rows if o["region"] == region and o["amount"] > floor)
    prompt = (
        f"The kernel holds `orders`, a list of {len(rows)} dicts with keys id, region, amount "
        f"and customer. How many orders from region '{region}' have an amount over {floor}? "
        "Bind the matching orders to a variable named `matches`, then answer with the count."
    )

    def judge(outcome: Outcome) -> Verdict:
        if (why := _acting_discipline(outcome)) is not None:
            return False, why
        if outcome.probe.strip() != json.dumps(wanted):
            return False, "`matches` does not hold exactly the matching orders"
        if not _number_in(outcome.answer, len(wanted)):
            return False, f"the answer does not give the count ({len(wanted)})"
        return True, f"{len(wanted)} orders, bound to `matches`"

    probe = "import json\nprint(json.dumps(sorted(o['id'] for o in matches)))"
    return Case(prompt, judge, _table_setup("orders", rows), probe)


def recover_truncation(rng: random.Random) -> Case:
    lines = data.log_lines(rng)
    errors = Counter(line.split()[2] for line in lines if line.split()[3] == "500")
    (path, count), (_, second) = errors.most_common(2)
    if count == second:  # a tie would make two answers right; the seed never gives one
        raise AssertionError("log_lines gave a tie for the most 500 errors")
    prompt = (
        f"The kernel holds `log_lines`, {len(lines)} access-log lines of the form "
        "'<time> <METHOD> <path> <status> <ms>ms'. Which path got the most 500 errors, and "
        "how many? Bind a dict from path to its number of 500 errors to `errors_by_path`."
    )

    def judge(outcome: Outcome) -> Verdict:
        if (why := _acting_discipline(outcome)) is not None:
            return False, why
        if outcome.probe.strip() != json.dumps(dict(sorted(errors.items()))):
            return False, "`errors_by_path` does not hold the 500 errors per path"
        if path not in outcome.answer or not _number_in(outcome.answer, count):
            return False, f"the answer does not name {path} with {count}"
        return True, f"{path}: {count}"

    probe = "import json\nprint(json.dumps(dict(sorted(errors_by_path.items()))))"
    return Case(prompt, judge, _table_setup("log_lines", lines), probe)


def two_steps(rng: random.Random) -> Case:
    rows = data.orders(rng)
    totals: Counter[str] = Counter()
    for o in rows:
        totals[o["customer"]] += o["amount"]
    (top, _), (_, runner_up) = totals.most_common(2)
    if totals[top] == runner_up:
        raise AssertionError("orders gave a tie for the top customer")
    region = rng.choice(data.REGIONS)
    count = sum(1 for o in rows if o["customer"] == top and o["region"] == region)
    prompt = (
        f"The kernel holds `orders`, a list of {len(rows)} dicts with keys id, region, amount "
        "and customer. First find the customer with the highest total amount and bind its id "
        f"to `top_customer`; then count that customer's orders in region '{region}'. Answer "
        "with the customer id and that count."
    )

    def judge(outcome: Outcome) -> Verdict:
        if (why := _acting_discipline(outcome)) is not None:
            return False, why
        if outcome.probe.strip() != top:
            return False, f"`top_customer` is not {top}"
        if top not in outcome.answer or not _number_in(outcome.answer, count):
            return False, f"the answer does not give {top} and {count}"
        return True, f"{top}, {count} orders in {region}"

    return Case(prompt, judge, _table_setup("orders", rows), "print(top_customer)")


# -- recall --------------------------------------------------------------------------------
_PETS = ("Biscuit", "Pepperoni", "Marmalade", "Quasar", "Tofu", "Juniper")
_CITIES = ("Lisbon", "Porto", "Tallinn", "Ghent", "Bergen", "Valencia", "Krakow")
_CUISINES = ("Ethiopian", "Georgian", "Peruvian", "Sichuan", "Lebanese")
_START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
_EXCHANGES = 72


def _history(rng: random.Random, planted: dict[int, str], **kw: object) -> list[HistoryEvent]:
    lines = data.conversation(rng, _START, _EXCHANGES, planted, **kw)  # type: ignore[arg-type]
    return [HistoryEvent("", line.role, line.text, line.at, line.headline) for line in lines]


def _recall_judge(expected: str, wrong: str | None = None) -> Callable[[Outcome], Verdict]:
    def judge(outcome: Outcome) -> Verdict:
        if outcome.stop_reason != "answer":
            return False, f"the turn ended without an answer ({outcome.stop_reason})"
        text = outcome.answer.lower()
        if expected.lower() not in text:
            if wrong is not None and wrong.lower() in text:
                return False, f"answered the superseded value {wrong!r}, not {expected!r}"
            return False, f"the answer does not say {expected!r}"
        return True, expected

    return judge


def planted_fact(rng: random.Random) -> Case:
    pet = rng.choice(_PETS)
    history = _history(rng, {2: f"By the way, my sister's dog is called {pet}."})
    return Case(
        "What is my sister's dog called?",
        _recall_judge(pet),
        history=history,
        context_size=RECALL_CONTEXT,
    )


def knowledge_update(rng: random.Random) -> Case:
    old, new = rng.sample(_CITIES, 2)
    history = _history(
        rng,
        {
            1: f"I live in {old} these days, close to the river.",
            30: f"Big news: we moved out of {old}, and we live in {new} now.",
        },
    )
    return Case(
        "Which city do I live in now?",
        _recall_judge(new, wrong=old),
        history=history,
        context_size=RECALL_CONTEXT,
    )


def multi_session(rng: random.Random) -> Case:
    march, april = rng.randint(2, 6), rng.randint(2, 6)
    first = data.conversation(
        rng, datetime(2026, 3, 28, 18, tzinfo=UTC), 6,
        {3: f"I finished {march} books in March, a personal record."},
    )  # fmt: skip
    second = data.conversation(
        rng, datetime(2026, 4, 29, 18, tzinfo=UTC), 6,
        {2: f"Reading update: I finished {april} books in April."},
    )  # fmt: skip
    history = [HistoryEvent("-march", x.role, x.text, x.at) for x in first] + [
        HistoryEvent("-april", x.role, x.text, x.at) for x in second
    ]
    total = march + april

    def judge(outcome: Outcome) -> Verdict:
        if outcome.stop_reason != "answer":
            return False, f"the turn ended without an answer ({outcome.stop_reason})"
        if not _number_in(outcome.answer, total):
            return False, f"the answer does not give {total} ({march} + {april})"
        return True, f"{march} + {april} = {total}"

    return Case(
        "How many books did I finish in March and April together? We talked about it in "
        "earlier sessions.",
        judge,
        history=history,
        context_size=RECALL_CONTEXT,
    )


def preference(rng: random.Random) -> Case:
    cuisine = rng.choice(_CUISINES)
    history = _history(rng, {5: f"Honestly, I prefer {cuisine} food over anything else."})
    return Case(
        "Which cuisine did I say I prefer?",
        _recall_judge(cuisine),
        history=history,
        context_size=RECALL_CONTEXT,
    )


# -- protocol ------------------------------------------------------------------------------
SEAM_REQUEST = "Translate 'good morning' into French"


def seam(rng: random.Random) -> Case:
    a, b = rng.randint(12, 49), rng.randint(12, 49)
    history = _history(
        rng,
        {4: f"{SEAM_REQUEST}, please."},
        headlines={4: f"⟦{SEAM_REQUEST} | status: asked; next: reply in French | anchors: French⟧"},
    )

    def judge(outcome: Outcome) -> Verdict:
        if outcome.stop_reason != "answer":
            return False, f"the turn ended without an answer ({outcome.stop_reason})"
        if "bonjour" in outcome.answer.lower():
            return False, "answered a request from the archived index, not the live turn"
        if not _number_in(outcome.answer, a * b):
            return False, f"the answer does not give {a * b}"
        return True, "answered the live turn"

    return Case(
        f"What is {a} times {b}? Reply with the number.",
        judge,
        history=history,
        context_size=RECALL_CONTEXT,
    )


ITEMS: tuple[Item, ...] = (
    Item("acting.bind_filter", "acting", "filter in the kernel and bind the result", bind_filter),
    Item("acting.recover_truncation", "acting", "aggregate under a small print cap",
         recover_truncation),
    Item("acting.two_steps", "acting", "finish a two-step program", two_steps),
    Item("recall.planted_fact", "recall", "a fact planted early, evicted, asked late",
         planted_fact),
    Item("recall.knowledge_update", "recall", "the later side of a changed fact",
         knowledge_update),
    Item("recall.multi_session", "recall", "evidence from two earlier sessions", multi_session),
    Item("recall.preference", "recall", "a preference stated once", preference),
    Item("recall.gateway_planted_fact", "recall",
         "a fact a client sent early, asked through the gateway's recall loop", planted_fact,
         loop="gateway"),
    Item("recall.gateway_update", "recall",
         "a changed fact, asked through the gateway's recall loop", knowledge_update,
         loop="gateway"),
    Item("protocol.seam", "protocol", "a request in the archived index is not answered", seam),
)  # fmt: skip
