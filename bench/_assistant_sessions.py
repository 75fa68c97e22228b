"""Scripted long assistant conversations with planted facts: a retrieval set not shaped
like LoCoMo.

LoCoMo is two friends chatting in short turns, the evidence a turn or two from words that
match the question. A user's history with an assistant looks otherwise: long requests, much
longer answers, many sessions on the same few topics, and the facts a later question needs
(who the user is, what they prefer, what changed) dropped in passing inside a request about
something else. This generator writes such histories from a fixed seed, in LongMemEval's
file shape, so the real LongMemEval importer builds the log (``scroll_core/ingest``).

Per conversation (one LongMemEval item, one Scroll session): ``SESSIONS`` sessions, each a
topic of ``TOPICS`` with ``TURNS`` user/assistant exchanges; the assistant's answers are
several paragraphs drawn from the topic's sentences. Planted into user turns of chosen
sessions, each from a small bank of slot values:

- ``fact``: a personal fact stated once (a pet's breed, a sister's job); the question asks
  for it in other words.
- ``update``: a fact stated, then changed in a later session (moved city, new car); the
  question asks for the current value; both statements are evidence.
- ``preference``: a preference or constraint (a diet, an allergy); the question asks for
  advice that should follow it without naming it.
- ``instruction``: a standing instruction to the assistant; the question is a request it
  governs.
- ``multi_session``: the same kind of thing mentioned in three sessions (instruments,
  trips); the question asks for all of them.
- ``ordering``: two events in different sessions; the question asks which came first.
- ``assistant``: a list the assistant gave; the question asks for one item of it (the
  evidence is the assistant's turn).

The assistant's reply to a planted turn echoes it in passing, as assistants do, but only
the turn that states the fact is evidence. Questions are kept beside the items under
``probes`` (the importer reads no questions). Conversations at even positions are the dev
part, odd positions the held-out part; the rule and the seed were fixed before any search
was measured on them, and the held-out part's figures are never read while choosing a
setting (``bench/_safe_tune.py``).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CONVERSATIONS", "SEED", "Probe", "generate", "probes", "split_of", "write"]

SEED = 34
CONVERSATIONS = 24
SESSIONS = 14
TURNS = (3, 6)  # exchanges per session, inclusive

TOPICS: dict[str, dict[str, list[str]]] = {
    "cooking": {
        "asks": [
            "Can you help me plan a few dinners for the week that are quick to make after work?",
            "I want to get better at baking bread at home, where should I start?",
            "What is a good way to meal prep lunches so they still taste fresh on Thursday?",
            "How do I make a soup that is filling without being heavy?",
            "Could you give me a shopping list for a week of simple home cooking?",
        ],
        "says": [
            "Start with one large batch of a grain such as rice or farro and reuse it.",
            "Roasting vegetables on a single tray saves time and washing up.",
            "A sharp knife and a heavy pan matter more than any gadget.",
            "Season in layers: a little salt early, then taste and adjust at the end.",
            "Soups freeze well in flat bags, which also thaw quickly.",
            "Keep dressings and sauces in separate jars so salads do not go soggy.",
            "Bread dough needs time more than effort; a slow cold rise builds flavour.",
            "Weigh flour rather than using cups for more consistent results.",
            "A squeeze of lemon or a splash of vinegar brightens most stews.",
            "Legumes such as lentils cook fast and add protein to almost any dish.",
            "Plan one dinner that produces leftovers for the next day's lunch.",
            "Fresh herbs keep longer wrapped in a damp towel in the fridge.",
        ],
    },
    "travel": {
        "asks": [
            "I'm planning a trip next spring, how do I find cheaper flights?",
            "What should I pack for a ten day trip with only a carry-on bag?",
            "How do I deal with jet lag when flying east?",
            "Can you suggest how to split a week between two cities by train?",
            "What travel insurance details should I check before booking?",
        ],
        "says": [
            "Booking flights six to eight weeks ahead is often cheapest for short routes.",
            "Set fare alerts for a few nearby airports rather than a single one.",
            "Roll clothes instead of folding them and pack layers rather than bulky items.",
            "A small bag of chargers and adapters saves a lot of trouble on arrival.",
            "Get daylight in the morning at your destination to reset your body clock.",
            "Trains between city centres are often faster than flying once security is counted.",
            "Check whether the policy covers cancellations for illness and missed connections.",
            "Keep digital copies of your passport and bookings in two places.",
            "Museums are quieter early on weekday mornings.",
            "Local transit passes usually pay off after three or four rides a day.",
            "Leave one unplanned afternoon in every city for rest or discoveries.",
            "Notify your bank before travelling so cards are not blocked.",
        ],
    },
    "fitness": {
        "asks": [
            "Can you put together a beginner strength routine I can do three times a week?",
            "How should I train for my first longer running race?",
            "What is a sensible way to stretch after workouts?",
            "How do I stay motivated to exercise during the winter?",
            "Is it better to do cardio before or after weights?",
        ],
        "says": [
            "Compound lifts such as squats, rows and presses give the most return for time.",
            "Increase the load a little each week but keep form as the priority.",
            "Most of your running should be at an easy conversational pace.",
            "Add distance gradually, around ten percent per week at most.",
            "Rest days are when the body adapts, so schedule them deliberately.",
            "Hold static stretches for about thirty seconds without bouncing.",
            "A training partner or class makes it much easier to keep showing up.",
            "Sleep and protein intake affect recovery as much as the workout itself.",
            "Warm up for five to ten minutes before heavier sets.",
            "Track workouts in a notebook so progress is visible.",
            "If strength is the goal, lift first and do cardio afterwards.",
            "Short indoor sessions are better than skipping a week entirely.",
        ],
    },
    "money": {
        "asks": [
            "How do I set up a monthly budget that I will actually stick to?",
            "What is a reasonable emergency fund and where should I keep it?",
            "Can you explain the difference between index funds and actively managed funds?",
            "How should I prioritise paying off debt versus saving?",
            "What are some ways to cut recurring subscriptions?",
        ],
        "says": [
            "List fixed costs first, then set limits for the flexible categories.",
            "Automate a transfer to savings on the day your salary arrives.",
            "Three to six months of essential expenses is a common emergency fund target.",
            "Keep the emergency fund in an easily accessible savings account.",
            "Index funds track a market and usually charge much lower fees.",
            "Pay off high interest debt before investing beyond any employer match.",
            "Review bank statements for subscriptions you no longer use.",
            "Round numbers make a budget easier to remember and follow.",
            "A separate account for irregular expenses smooths out the year.",
            "Fees compound just like returns, so small percentages matter.",
            "Revisit the budget after a month and adjust limits that were unrealistic.",
            "Keep a short note of why each goal matters to you.",
        ],
    },
    "code": {
        "asks": [
            "How should I structure a small Python project so it stays easy to test?",
            "Can you explain how to write a good commit message?",
            "What is the best way to learn SQL joins properly?",
            "How do I debug a script that works locally but fails on the server?",
            "Could you review how I should name functions and variables?",
        ],
        "says": [
            "Keep the package code separate from scripts and put tests in their own folder.",
            "Small functions with clear inputs and outputs are the easiest to test.",
            "A commit message should say why the change was made, not only what changed.",
            "Practise joins on two small tables where you can predict every row.",
            "Check the environment first: versions, paths and environment variables.",
            "Log the inputs at the point of failure before changing any code.",
            "Names should describe what a value holds rather than how it was computed.",
            "Run the formatter and linter before every commit to keep diffs small.",
            "Reproduce a bug with a failing test before fixing it.",
            "An index on the join column often turns a slow query into a fast one.",
            "Pin dependency versions so the server installs what you tested.",
            "Read the full traceback from the bottom up.",
        ],
    },
    "garden": {
        "asks": [
            "What vegetables are easiest to grow on a small balcony?",
            "How often should I water tomatoes in summer?",
            "Can you help me plan a flower bed that blooms from spring to autumn?",
            "How do I start composting at home?",
            "What should I do in the garden before winter?",
        ],
        "says": [
            "Herbs, lettuce and cherry tomatoes do well in containers.",
            "Water deeply and less often so roots grow downwards.",
            "Morning watering reduces evaporation and leaf disease.",
            "Mix early bulbs, summer perennials and late flowering asters for a long season.",
            "A compost heap needs a balance of green and brown material.",
            "Turn the compost every few weeks to keep it aerobic.",
            "Mulch beds before the first frost to protect roots.",
            "Clean and oil your tools before storing them for winter.",
            "Most vegetables want at least six hours of direct sun.",
            "Use pots with drainage holes and a good quality potting mix.",
            "Deadheading flowers encourages a second flush of blooms.",
            "Plant garlic in autumn for a summer harvest.",
        ],
    },
    "writing": {
        "asks": [
            "Can you help me improve the opening paragraph of a cover letter?",
            "How do I make my emails shorter without sounding rude?",
            "What is a good routine for writing a little every day?",
            "How do I structure a short presentation for my team?",
            "Could you suggest how to give feedback on a colleague's draft?",
        ],
        "says": [
            "Lead with the point, then give the reason and the detail.",
            "Cut words that do not change the meaning of a sentence.",
            "Write at the same time each day, even if only for fifteen minutes.",
            "A presentation needs one message that the audience can repeat afterwards.",
            "Open a cover letter with the specific role and why it fits you.",
            "Specific feedback about a passage helps more than general praise.",
            "Read drafts aloud to catch awkward rhythm.",
            "Bullet points help when a reader must act on several items.",
            "End an email with the one action you need from the reader.",
            "Keep slides sparse and say the detail out loud.",
            "Revise after a break, when you can read the text as a stranger would.",
            "Ask the colleague what kind of feedback they want first.",
        ],
    },
    "home": {
        "asks": [
            "How do I fix a dripping tap myself?",
            "What is the best way to organise a small kitchen?",
            "Can you suggest how to lower my heating bill this winter?",
            "How should I paint a room so the finish looks professional?",
            "What cleaning routine works for a busy week?",
        ],
        "says": [
            "Turn off the water supply and replace the worn washer or cartridge.",
            "Store the things you use daily between hip and shoulder height.",
            "Draught excluders and thick curtains keep a surprising amount of heat in.",
            "Lower the thermostat by one degree and most people never notice.",
            "Sand and clean walls before painting, and always use primer on patches.",
            "Cut in the edges with a brush before rolling the large areas.",
            "Ten minutes of tidying each evening prevents a long weekend clean.",
            "Wall shelves and hooks free up counter space.",
            "Bleed radiators at the start of the heating season.",
            "Keep a small toolbox with a screwdriver set, pliers and tape.",
            "Group cleaning by room so supplies stay in one place.",
            "Check seals around windows and doors for gaps.",
        ],
    },
}

NAMES = ["Maya", "Tom", "Priya", "Lukas", "Ana", "Jonah", "Keiko", "Omar", "Elena", "Sam"]
PETS = [("dog", "beagle"), ("dog", "border collie"), ("cat", "Maine Coon"),
        ("dog", "dachshund"), ("cat", "Siamese"), ("dog", "labrador")]  # fmt: skip
PET_NAMES = ["Biscuit", "Pepper", "Juniper", "Mochi", "Waffles", "Olive", "Ziggy", "Clover"]
JOBS = ["nurse", "architect", "pharmacist", "primary school teacher", "civil engineer",
        "graphic designer", "accountant", "paramedic", "librarian", "data analyst"]  # fmt: skip
CITIES = ["Lisbon", "Denver", "Leeds", "Rotterdam", "Montreal", "Porto", "Austin", "Galway"]
CARS = ["Honda Civic", "Toyota Prius", "Volkswagen Golf", "Subaru Outback", "Kia Niro",
        "Mazda 3", "Tesla Model 3", "Ford Focus"]  # fmt: skip
DIETS = [("vegetarian", "meat or fish"), ("vegan", "any animal products"),
         ("gluten free", "wheat, barley or rye"), ("pescatarian", "meat")]  # fmt: skip
ALLERGIES = ["peanuts", "shellfish", "sesame", "tree nuts"]
INSTRUMENTS = ["ukulele", "cello", "piano", "drums", "violin", "saxophone", "banjo"]
TRIPS = ["Kyoto", "Reykjavik", "Marrakesh", "Vienna", "Cape Town", "Hanoi", "Oaxaca"]
EVENTS = ["ran my first 10k race", "finished the pottery course", "adopted a rescue kitten",
          "passed my driving test", "repainted the spare bedroom", "gave a talk at a meetup",
          "went to my cousin's wedding", "bought a road bike"]  # fmt: skip
UNITS = [
    ("always give temperatures in Celsius",
     "What oven temperature should I roast the chicken at?"),
    ("always use metric units, kilometres and kilograms",
     "How long is the route for a typical half marathon training run?"),
    ("keep your answers to five bullet points or fewer",
     "What should I check before signing a flat lease?"),
    ("always include the type hints when you show me Python code",
     "Show me a function that reads a CSV file and returns the rows."),
]  # fmt: skip
HOTELS = ["Harbour Lodge", "Casa Verde", "The Linden", "Maple House", "Hotel Aurora",
          "Riverside Inn", "The Old Mill", "Blue Door Rooms"]  # fmt: skip


@dataclass(frozen=True)
class Probe:
    """One question about a generated conversation and its evidence turns
    ``(haystack session index, turn index)``."""

    conversation: str
    category: str
    question: str
    evidence: tuple[tuple[int, int], ...]


def _answer(rng: random.Random, topic: str, echo: str = "") -> str:
    """A long assistant answer: two or three paragraphs of the topic's sentences."""
    says = TOPICS[topic]["says"]
    paragraphs = []
    for _ in range(rng.randint(2, 3)):
        paragraphs.append(" ".join(rng.sample(says, rng.randint(3, 5))))
    if rng.random() < 0.5:
        bullets = "\n".join(f"- {s}" for s in rng.sample(says, 3))
        paragraphs.insert(1, "A few concrete steps:\n" + bullets)
    opener = rng.choice(["Good question.", "Happy to help.",
                         "Here is how I would approach it.", "Sure, let's work through it.",
                         "That is a common situation."])  # fmt: skip
    return "\n\n".join([f"{opener} {echo}".strip(), *paragraphs])


def _request(rng: random.Random, topic: str, planted: str = "") -> str:
    """A user turn: a request on the topic, with a planted sentence among its context."""
    ask = rng.choice(TOPICS[topic]["asks"])
    context = rng.sample(TOPICS[topic]["says"], 2)
    lead = rng.choice(["I've been reading about this and", "A friend mentioned that",
                       "Last time I tried, I noticed that", "I keep hearing that"])  # fmt: skip
    parts = [ask, f"{lead} {context[0][0].lower()}{context[0][1:]}"]
    if planted:
        parts.insert(rng.randint(0, 2), planted)
    parts.append(rng.choice(["Thanks in advance.", "Any advice is welcome.",
                             "Please be specific.", ""]))  # fmt: skip
    return " ".join(p for p in parts if p)


def _plants(rng: random.Random, sessions: int) -> list[tuple[str, list[tuple[int, str, str]], str]]:
    """Per planted item: (category, [(session, user sentence, assistant echo)], question).
    The assistant kind is planted separately (its evidence is the answer)."""
    _, breed = rng.choice(PETS)
    pet = rng.choice(PET_NAMES)
    sister = rng.choice(NAMES)
    job = rng.choice(JOBS)
    city_a, city_b = rng.sample(CITIES, 2)
    car_a, car_b = rng.sample(CARS, 2)
    job_a, job_b = rng.sample([j for j in JOBS if j != job], 2)
    diet, avoid = rng.choice(DIETS)
    allergy = rng.choice(ALLERGIES)
    instruments = rng.sample(INSTRUMENTS, 3)
    trips = rng.sample(TRIPS, 3)
    first, second = rng.sample(EVENTS, 2)
    rule, governed = rng.choice(UNITS)
    budget_a, budget_b = rng.sample([400, 650, 900, 1200, 1500, 2000], 2)

    def at(lo: float, hi: float) -> int:
        return rng.randint(int(lo * (sessions - 1)), int(hi * (sessions - 1)))

    def early() -> int:
        return at(0.0, 0.35)

    def late() -> int:
        return at(0.6, 1.0)

    return [
        ("fact", [(at(0, 1), f"Our {breed} {pet} keeps me busy these days.",
                   f"It sounds like {pet} keeps you on your toes.")],
         f"What breed is {pet}?"),
        ("fact", [(at(0, 1), f"My sister {sister} works as a {job}, so she has odd shifts.",
                   "")],
         f"What does {sister} do for a living?"),
        ("update", [(early(), f"Since I moved to {city_a} the commute is much shorter.", ""),
                    (late(), f"We relocated to {city_b} a few weeks ago and I'm still unpacking.",
                     f"Congratulations on settling into {city_b}.")],
         "Which city am I living in now?"),
        ("update", [(early(), f"I drive a {car_a} that is getting old.", ""),
                    (late(), f"I finally traded in my old car for a {car_b}.", "")],
         "What car do I have at the moment?"),
        ("update", [(early(), f"I work as a {job_a}, which leaves me tired in the evenings.", ""),
                    (late(), f"I changed careers last month and now I'm a {job_b}.", "")],
         "What is my current job?"),
        ("update", [(early(), f"My budget for the new sofa is about {budget_a} dollars.", ""),
                    (late(), f"I've decided I can spend up to {budget_b} dollars on the sofa.",
                     "")],
         "How much am I planning to spend on the sofa?"),
        ("preference", [(at(0, 0.7), f"I should mention I'm {diet}, so nothing with {avoid}.",
                         f"Noted, I'll keep everything {diet}.")],
         "Can you suggest a main course I could make for friends this weekend?"),
        ("preference", [(at(0, 0.7), f"I'm allergic to {allergy}, it's quite serious.", "")],
         "What snacks should I pack for a long hike?"),
        ("instruction", [(at(0, 0.5), f"From now on, please {rule}.", "Understood.")],
         governed),
        ("multi_session", [(s, f"I've started learning the {inst} in the evenings.", "")
                           for s, inst in zip(sorted(rng.sample(range(sessions), 3)),
                                              instruments, strict=True)],
         "Which musical instruments have I been learning?"),
        ("multi_session", [(s, f"I just got back from a trip to {trip}.", "")
                           for s, trip in zip(sorted(rng.sample(range(sessions), 3)),
                                              trips, strict=True)],
         "Where have I travelled recently?"),
        ("ordering", [(early(), f"Big news: I {first} on Saturday.", ""),
                      (late(), f"This week I {second}.", "")],
         f"Which happened first: I {first}, or I {second}?"),
    ]  # fmt: skip


def _conversation(rng: random.Random, index: int) -> tuple[dict[str, Any], list[Probe]]:
    cid = f"asst-{index:02d}"
    topics = [rng.choice(list(TOPICS)) for _ in range(SESSIONS)]
    sessions: list[list[dict[str, Any]]] = []
    for topic in topics:
        turns: list[dict[str, Any]] = []
        for _ in range(rng.randint(*TURNS)):
            turns.append({"role": "user", "content": _request(rng, topic)})
            turns.append({"role": "assistant", "content": _answer(rng, topic)})
        sessions.append(turns)
    probes: list[Probe] = []
    taken: set[tuple[int, int]] = set()

    def free_turn(session: int) -> tuple[int, int]:
        """A user turn no plant holds yet, in ``session`` or the nearest session with one."""
        for other in sorted(range(SESSIONS), key=lambda s: (abs(s - session), s)):
            users = [i for i in range(0, len(sessions[other]), 2) if (other, i) not in taken]
            if users:
                turn = rng.choice(users)
                taken.add((other, turn))
                return other, turn
        raise ValueError("more plants than user turns")

    for category, statements, question in _plants(rng, SESSIONS):
        evidence = []
        for wanted, sentence, echo in statements:
            session, turn = free_turn(wanted)
            topic = topics[session]
            sessions[session][turn]["content"] = _request(rng, topic, sentence)
            sessions[session][turn + 1]["content"] = _answer(rng, topic, echo)
            evidence.append((session, turn))
        probes.append(Probe(cid, category, question, tuple(evidence)))
    # assistant: a list of hotels the assistant recommended, asked about later.
    session = next((s for s, t in enumerate(topics) if t == "travel"), rng.randrange(SESSIONS))
    session, turn = free_turn(session)
    city = rng.choice(CITIES)
    hotels = rng.sample(HOTELS, 3)
    sessions[session][turn]["content"] = _request(
        rng, topics[session], f"Where should I stay for three nights in {city}?"
    )
    sessions[session][turn + 1]["content"] = _answer(
        rng,
        topics[session],
        f"For {city} I would look at {hotels[0]}, {hotels[1]} or {hotels[2]}.",
    )
    probes.append(
        Probe(
            cid,
            "assistant",
            f"You suggested some places to stay in {city}; what was the second one?",
            ((session, turn + 1),),
        )
    )
    dates = [f"2024/{1 + s // 3:02d}/{1 + (s * 9) % 27:02d} (Mon) {9 + s % 9:02d}:00"
             for s in range(SESSIONS)]  # fmt: skip
    item = {
        "question_id": cid,
        "question": "",
        "answer": "",
        "haystack_session_ids": [f"{cid}-s{s}" for s in range(SESSIONS)],
        "haystack_dates": dates,
        "haystack_sessions": sessions,
        "probes": [
            {"category": p.category, "question": p.question, "evidence": list(p.evidence)}
            for p in probes
        ],
    }
    return item, probes


def generate(seed: int = SEED, conversations: int = CONVERSATIONS) -> list[dict[str, Any]]:
    """The LongMemEval-shaped items, one per conversation, probes included."""
    rng = random.Random(seed)
    return [_conversation(rng, i)[0] for i in range(conversations)]


def probes(items: list[dict[str, Any]]) -> list[Probe]:
    return [
        Probe(
            item["question_id"],
            p["category"],
            p["question"],
            tuple((int(s), int(t)) for s, t in p["evidence"]),
        )
        for item in items
        for p in item["probes"]
    ]


def split_of(conversation: str) -> str:
    """``"dev"`` for a conversation at an even position, ``"heldout"`` for an odd one."""
    prefix, _, digits = conversation.partition("-")
    try:
        if prefix != "asst":
            raise ValueError
        number = int(digits)
    except ValueError:
        raise ValueError(f"{conversation!r} is not a generated conversation id") from None
    return "dev" if number % 2 == 0 else "heldout"


def write(path: Path, seed: int = SEED, conversations: int = CONVERSATIONS) -> list[Probe]:
    """Write the items to ``path`` (for the importer) and return their probes."""
    items = generate(seed, conversations)
    path.write_text(json.dumps(items))
    return probes(items)
