"""``PolicyModel``: a deterministic, rule-based baseline. It is not a language model.

It needs no network and answers the same way for the same conversation. It drives the
same tools an LLM would, which makes it useful for the demo, for tests and for benchmarks
of everything around the model:

1. A user message with a fenced ```python block: run the block with ``repl_exec``, then
   report what it printed.
2. Any other user message: write an ``ms`` program (one search per named entity and per
   key-term group with small k, a date filter when the question names a time, one
   ``ms.expand`` of the best hits' neighbourhood, a print of a compact projection) and run
   it with ``recall_history_python``.
3. Given the printed projection: find the sentence that best matches the question's terms,
   among what the cells printed and what the messages in its view already show (questions
   and its own earlier replies are not evidence), and answer short: an ISO date for "when",
   yes or no, or the clause that follows the question's terms in it; the citation (seq,
   date, speaker) goes in the headline. Abstain with the abstention phrase it was built
   with (default ``prompts.ABSTENTION``) when no sentence shares enough of the question's
   specific terms. If the program failed, retry once with one plain search.
4. No recall tool (or nothing to search for): answer from the view's messages alone.

Every reply ends with a headline line ``⟦task | status: …; next: … | anchors: …⟧``.
The rules are plain functions in ``RULES``, tried in order; the first that answers wins.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

from .. import headlines
from ..errors import ConfigError
from ..index import SEAM_BANNER
from ..prompts import ABSTENTION, RECALL_TOOL, REPL_TOOL, TOOL_NAMES
from ..store.fts_query import STOP_WORDS, query_terms
from ..tokens import CharRatioCounter, TokenCounter
from ..view import DIGEST_HEADER
from .base import ModelReply, ToolCall, Usage, message_text

__all__ = [
    "POLICY_NAME",
    "RULES",
    "PolicyModel",
    "Question",
    "Turn",
    "analyse_question",
    "format_headline",
    "recall_program",
]

POLICY_NAME = "scroll-policy-baseline"
DEFAULT_CONTEXT_SIZE = 32_768

SEARCH_K = 5  # per query: the rubric's "start with k=5"
BEST_HITS = 3  # hits whose neighbourhood is expanded
MORE_HITS = 5  # further hits printed as snippets, not expanded
TEXT_CHARS = 300  # each printed line's text is cut here
MAX_QUERIES = 4
# The share of a question's specific terms a sentence must share to be evidence; below it the
# policy abstains. Half is a round default, fitted to no data set. A bench that scores the
# model on a data set chooses its own share on that set's dev split and passes it in
# (``shared_specific``): bench/e2e.py does so for LoCoMo (``--tune``).
SHARED_SPECIFIC = 0.5

_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_EVIDENCE = re.compile(
    r"^(?P<mark>[*+=-])\[(?P<seq>-?\d+)\] (?P<date>\S+) (?P<who>[^:\n]{1,80}): (?P<text>.*)$",
    re.MULTILINE,
)
# A view message line that starts with its time: "[2023-05-08 13:56] Ann: text" (speaker
# optional), the way many chat transcripts stamp their lines.
_DATED_LINE = re.compile(
    r"^\[(?P<date>\d{4}-\d{2}-\d{2})[^\]\n]*\]\s*(?:(?P<who>[A-Z][^:\n]{0,40}): )?(?P<text>.*)$"
)
VIEW_MARK = "="  # evidence lines read from the view's messages (no seq: they count back)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_ISO_DAY = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_MONTH_DAY_YEAR = re.compile(
    rf"\b({_MONTH})\.? (\d{{1,2}})(?:st|nd|rd|th)?,? (\d{{4}})\b", re.IGNORECASE
)
_DAY_MONTH_YEAR = re.compile(
    rf"\b(\d{{1,2}})(?:st|nd|rd|th)? (?:of )?({_MONTH})\.?,? (\d{{4}})\b", re.IGNORECASE
)
_MONTH_YEAR = re.compile(rf"\b({_MONTH})\.?,? (?:of )?(\d{{4}})\b", re.IGNORECASE)
_YEAR = re.compile(r"\b(19\d{2}|20\d{2})\b")
_QUOTED = re.compile(r"[\"“”]([^\"“”]{2,60})[\"“”]")
_CAPITALISED = re.compile(r"\b[A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*)*")

# Words that say "this is a question about our history" rather than what it is about.
_NOISE = frozenset(
    """
    remember recall mention mentioned conversation conversations chat chats talk talked
    discuss discussed know ever earlier previously before ago last time first
    """.split()
)
_NOT_ENTITIES = (
    frozenset(
        """
    i what when where who whom whose which why how did do does is are was were can could
    would should will have has had tell please the a an in on at my our your
    """.split()
    )
    | set(_MONTHS)
    | {d.lower() for d in calendar.day_name}
)
# Common enough that sharing one of them says little about relevance.
_GENERIC = frozenset(
    """
    name named time thing things kind type like likes favorite favourite people person day
    days week weeks month months year years go goes going went make made take took give gave
    want wanted really think thought feel felt new old good best one two get use used way
    lot something anything someone many much long often
    """.split()
)


@dataclass(frozen=True)
class Question:
    """What the policy reads out of a question."""

    text: str
    entities: tuple[str, ...]
    terms: tuple[str, ...]  # key terms, entities and noise removed, lowercase
    since: str | None = None  # the named time as a half-open day range [since, until)
    until: str | None = None

    @property
    def specific(self) -> tuple[str, ...]:
        """Key terms that carry the question: the ones an answer must share."""
        return tuple(t for t in self.terms if t not in _GENERIC and len(t) >= 3)

    @property
    def last_day(self) -> str | None:
        if self.until is None:
            return None
        return (date.fromisoformat(self.until) - timedelta(days=1)).isoformat()


def analyse_question(text: str) -> Question:
    """Entities (capitalised names, quoted phrases), key terms and a named time range."""
    text = " ".join(text.split())
    since, until, without_dates = _time_range(text)
    entities: dict[str, None] = {}
    for phrase in _QUOTED.findall(without_dates):
        entities.setdefault(phrase.strip(), None)
    for match in _CAPITALISED.finditer(_QUOTED.sub(" ", without_dates)):
        words = [w for w in match.group(0).split() if w.lower() not in _NOT_ENTITIES]
        phrase = re.sub(r"['’]s$", "", " ".join(words))
        if phrase:
            entities.setdefault(phrase, None)
    entity_words = {w for e in entities for w in query_terms(e)}
    terms = [
        t
        for t in query_terms(without_dates)
        if t not in entity_words and t not in _NOISE and t not in STOP_WORDS and not t.isdigit()
    ]
    return Question(text, tuple(entities), tuple(terms), since, until)


def _time_range(text: str) -> tuple[str | None, str | None, str]:
    """The first named day, month or year as [since, until), and the text without it."""

    def day(y: int, m: int, d: int) -> tuple[str, str] | None:
        try:
            first = date(y, m, d)
        except ValueError:
            return None
        return first.isoformat(), (first + timedelta(days=1)).isoformat()

    patterns: list[tuple[re.Pattern[str], Callable[[re.Match[str]], tuple[str, str] | None]]] = [
        (_ISO_DAY, lambda m: day(int(m[1]), int(m[2]), int(m[3]))),
        (_MONTH_DAY_YEAR, lambda m: day(int(m[3]), _MONTHS[m[1].lower()], int(m[2]))),
        (_DAY_MONTH_YEAR, lambda m: day(int(m[3]), _MONTHS[m[2].lower()], int(m[1]))),
        (_MONTH_YEAR, lambda m: _month(int(m[2]), _MONTHS[m[1].lower()])),
        (_YEAR, lambda m: (f"{m[1]}-01-01", f"{int(m[1]) + 1}-01-01")),
    ]
    for pattern, to_range in patterns:
        found = pattern.search(text)
        if found is None:
            continue
        span = to_range(found)
        if span is not None:
            return span[0], span[1], text[: found.start()] + " " + text[found.end() :]
    return None, None, text


def _month(year: int, month: int) -> tuple[str, str]:
    following = date(year + (month == 12), month % 12 + 1, 1)
    return date(year, month, 1).isoformat(), following.isoformat()


# -- step 1: the program -----------------------------------------------------------------


def recall_program(question: Question) -> str:
    """A real ``ms`` program for ``question``; only its final projection is printed."""
    key = " ".join(question.terms)
    queries: list[str] = [f"{entity} {key}".strip() for entity in question.entities]
    if key:
        queries.append(key)
    queries = list(dict.fromkeys(queries))[:MAX_QUERIES] or [question.text]
    lines = [
        f"# {POLICY_NAME}: recall for one question (a rule-based baseline, not an LLM)",
        f"question = {question.text!r}",
        f"terms = {_program_terms(question)!r}",
        f"since, until = {question.since!r}, {question.until!r}",
        "score, found = {}, {}",
        "# one search per entity and one for the key terms, small k, merged by rank; a short",
        "# reply of its own would outrank the turns it came from, so replies are skipped",
        f"for query in {queries!r}:",
        f"    for rank, hit in enumerate(ms.search(query, k={SEARCH_K}, since=since, "
        "until=until)):",
        "        if hit.role == 'assistant':",
        "            continue  # its own replies are not evidence: they would take the slots",
        "        score[hit.seq] = score.get(hit.seq, 0.0) + 1.0 / (rank + 2)",
        "        found[hit.seq] = hit",
    ]
    if question.since is not None:
        lines += [
            "# the named time, deterministically: every event of those days, scored by terms",
            "agents = sorted({s.agent_id for s in ms.sessions()})",
            "in_range = ms.sql_query(",
            '    "SELECT seq, content FROM events WHERE substr(created_at,1,10) BETWEEN ? AND ? "',
            '    "AND searchable = 1 AND agent_id = ? ORDER BY seq",',
            f"    [since, {question.last_day!r}, agents[0] if agents else ''],",
            ")",
            "for seq, content in in_range['rows']:",
            "    overlap = sum(term in (content or '').lower() for term in terms)",
            "    if overlap and (content or '').strip() != question:",
            "        score[seq] = score.get(seq, 0.0) + 0.2 * overlap",
        ]
    lines += [
        "ranked = sorted(score, key=lambda seq: (-score[seq], seq))",
        f"best = ranked[:{BEST_HITS}]",
        "# expand each best hit with its neighbours once; overlapping windows are merged",
        "spans = []",
        "for seq in sorted(best):",
        "    if spans and seq - 1 <= spans[-1][1] + 1:",
        "        spans[-1][1] = seq + 1",
        "    else:",
        "        spans.append([max(1, seq - 1), seq + 1])",
        "shown = {e.seq: e for lo, hi in spans for e in ms.expand(lo, hi)}",
        "sessions = {shown[seq].session_id for seq in best if seq in shown}",
        "",
        "def line(mark, seq, at, who, text):",
        "    # one compact line: seq, day, speaker, text without headlines, cut short",
        "    text = ' '.join(str(text or '').split('⟦')[0].split())",
        f"    return f'{{mark}}[{{seq}}] {{at[:10]}} {{who}}: {{text[:{TEXT_CHARS}]}}'",
        "",
        "window = f' within [{since}, {until})' if since else ''",
        f"print(f'# {{len(score)}} candidate events from {len(queries)} searches{{window}}')",
        "for seq in sorted(shown):",
        "    e = shown[seq]",
        "    # the recall tool's own cells and printouts are not evidence, only earlier lookups",
        f"    if e.name == {RECALL_TOOL!r}:",
        "        continue",
        "    if e.session_id in sessions and (e.content or '').strip() != question:",
        "        mark = '*' if seq in best else '+'",
        "        print(line(mark, seq, e.created_at, e.name or e.role or e.kind, e.content))",
        f"for seq in ranked[{BEST_HITS}:{BEST_HITS + MORE_HITS}]:",
        "    if seq in found and seq not in shown:",
        "        h = found[seq]",
        "        snippet = h.snippet.replace('[', '').replace(']', '')",
        "        print(line('-', seq, h.created_at, h.name or h.role or h.kind, snippet))",
    ]
    return "\n".join(lines) + "\n"


def _program_terms(question: Question) -> list[str]:
    words = [*question.terms, *(w for e in question.entities for w in query_terms(e))]
    return list(dict.fromkeys(words))


def plain_search_program(question: Question) -> str:
    """The fallback after a failed program: one search, printed the same way."""
    return (
        f"# {POLICY_NAME}: fallback, one plain search\n"
        f"for h in ms.search({question.text!r}, k=10):\n"
        "    text = ' '.join(h.snippet.replace('[', '').replace(']', '').split())\n"
        "    who = h.name or h.role or h.kind\n"
        f"    print('-[' + str(h.seq) + '] ' + h.created_at[:10] + ' ' + who + ': ' + "
        f"text[:{TEXT_CHARS}])\n"
    )


# -- step 2: the answer ------------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    seq: int
    date: str
    who: str
    sentence: str
    score: float
    hit: bool


def find_evidence(
    question: Question, printed: str, share: float = SHARED_SPECIFIC
) -> list[Evidence]:
    """Printed sentences relevant to the question, best first (empty: nothing relevant).

    ``printed`` is evidence lines: what the cells printed and what ``view_evidence`` read off
    the view. A sentence is relevant when it shares at least ``share`` of the question's
    specific terms. Questions are not evidence, nor are this baseline's own earlier replies
    (lines by ``assistant``: it answers from what was said, not from what it said about it).
    """
    specific = question.specific
    needed = math.ceil(share * len(specific))
    entities = [e.lower() for e in question.entities]
    found: list[Evidence] = []
    for m in _EVIDENCE.finditer(printed):
        text = m["text"].strip()
        who = m["who"].strip()
        if not text or text == question.text or who == "assistant":
            continue
        for sentence in _SENTENCE.split(text):
            if sentence.rstrip().endswith("?"):
                continue
            words = {w.casefold() for w in _WORD.findall(sentence)}
            shared = [t for t in question.terms if _mentions(words, t)]
            sharp = [t for t in shared if t in specific]
            named = [e for e in entities if e in sentence.lower() or e == who.lower()]
            if specific and len(sharp) < needed:
                continue
            if not specific and not (shared or named):
                continue
            score = 3 * len(sharp) + len(shared) + 2 * len(named) + (m["mark"] == "*")
            found.append(
                Evidence(int(m["seq"]), m["date"], who, sentence.strip(), score, m["mark"] == "*")
            )
    # Higher score first; among equals the later event, since later statements update earlier.
    found.sort(key=lambda e: (-e.score, -e.seq))
    return found


def _mentions(words: set[str], term: str) -> bool:
    stem = term if len(term) <= 4 else term[: max(4, len(term) - 3)]
    return term in words or any(w.startswith(stem) for w in words)


def choose_evidence(evidence: list[Evidence]) -> list[Evidence]:
    """The best sentence, plus a second from another event when it scores nearly as well.
    A sentence the cells printed and the view shows too counts once, as printed."""
    if not evidence:
        return []
    printed = {e.sentence for e in evidence if e.seq > 0}
    evidence = [e for e in evidence if e.seq > 0 or e.sentence not in printed]
    best = evidence[0]
    for other in evidence[1:]:
        if other.seq != best.seq and other.score >= best.score - 1:
            return [best, other]
    return [best]


def compose_answer(question: Question, chosen: list[Evidence], abstention: str = ABSTENTION) -> str:
    """A short answer from the best evidence, or the exact abstention phrase.

    The citation (seq, date, speaker) goes in the headline (``cite``), so the answer itself
    is only what was asked: an ISO date for "when", yes or no for a yes/no question,
    otherwise the words of the best sentence that follow the question's terms in it (the
    sentences whole when they are a tool's output or the question asks two things).
    """
    if not chosen:
        return abstention
    best = chosen[0]
    asks = question.text.lower()
    if best.who in TOOL_NAMES or _TWO_ASKS.search(asks):
        # A tool's output (a log line, a config row) or a question asking two things: a
        # phrase cannot carry it, so the sentences themselves are the answer.
        return " ".join(e.sentence for e in chosen)
    if asks.startswith(("when", "what date", "what day", "what year", "what month")):
        return when_phrase(best.sentence, best.date)
    if asks.split(" ", 1)[0] in _YES_NO:
        return "No" if _NEGATION.search(best.sentence) else "Yes"
    return answer_phrase(question, best.sentence)


def cite(chosen: list[Evidence]) -> str:
    """Where the answer comes from, for the headline: ``seq N (date, speaker)``, or ``view``
    for a sentence read off the view's messages."""
    return "; ".join(
        f"{f'seq {e.seq}' if e.seq > 0 else 'view'} ({e.date}, {e.who})" for e in chosen
    )


_TWO_ASKS = re.compile(r",? and (?:who|what|which|when|where|how)\b")
_YES_NO = frozenset("is are was were do does did has have had can could would will should".split())
_NEGATION = re.compile(r"\b(?:no|not|never|n't|don't|didn't|doesn't|isn't|wasn't)\b", re.I)
_RELATIVE = re.compile(
    r"\b(?:(yesterday)|last (week|weekend|month|year|"
    + "|".join(d.lower() for d in calendar.day_name)
    + r")|(\d{1,2}|two|three|a few) (days|weeks|months|years) ago)\b",
    re.IGNORECASE,
)
_CLAUSE_END = re.compile(r"[,.;:!?()\"“”]| - | – | but | because | so | which | when ")
_FILLER = frozenset(
    """
    a an the my our your his her their its this that these those is are was were be been am
    of to for in on at by with from about as it i me we you he she they just really so very
    called named some any also too like and or
    """.split()
)
MAX_ANSWER_WORDS = 8
NAME_ASKED = re.compile(r"^who\b|\bname\b|\bcalled\b", re.IGNORECASE)


def when_phrase(sentence: str, day: str) -> str:
    """The time the sentence names, as ISO 8601 (a day, a month ``YYYY-MM`` or a year),
    anchored on the day it was said; a relative time is resolved against that day."""
    try:
        said = date.fromisoformat(day[:10])
    except ValueError:
        named = _named_time(sentence)
        return named if named is not None else sentence
    found = _RELATIVE.search(sentence)
    if found is not None:
        if found[1]:
            return (said - timedelta(days=1)).isoformat()
        unit = (found[2] or "").lower()
        if unit == "year":
            return str(said.year - 1)
        if unit == "month":
            previous = said.replace(day=1) - timedelta(days=1)
            return f"{previous.year}-{previous.month:02d}"
        if unit:
            return f"the {unit} before {said.isoformat()}"
        return f"{found[3]} {found[4]} ago, before {said.isoformat()}"
    named = _named_time(sentence)
    return named if named is not None else said.isoformat()


def _named_time(sentence: str) -> str | None:
    """A month or a year the sentence names, as ISO 8601, or None."""
    month = _MONTH_YEAR.search(sentence)
    if month is not None:
        return f"{int(month[2])}-{_MONTHS[month[1].lower()]:02d}"
    year = _YEAR.search(sentence)
    return year.group(0) if year is not None else None


def answer_phrase(question: Question, sentence: str) -> str:
    """The clause of ``sentence`` that follows the last of the question's words in it, or,
    when nothing follows, the sentence's words that the question does not already say."""
    asked = {w.casefold() for w in _WORD.findall(question.text)}
    keys = [t for t in asked if len(t) >= 3 and t not in _FILLER and t not in STOP_WORDS]
    words = list(re.finditer(r"[\w'’-]+", sentence))
    last = -1
    for i, w in enumerate(words):
        if any(_mentions({w.group(0).casefold()}, t) for t in keys):
            last = i
    if last >= 0:
        rest = sentence[words[last].end() :]
        kept = _trim(_CLAUSE_END.split(rest, maxsplit=1)[0].split())
        name = _CAPITALISED.match(" ".join(kept))
        if name and NAME_ASKED.search(question.text) and name.group(0) != "I":
            return name.group(0)  # "what is the name", "who": the name that follows
        if kept:
            return " ".join(kept[:MAX_ANSWER_WORDS])
    new = [w.group(0) for w in words if w.group(0).casefold() not in asked | _FILLER]
    return " ".join(new[:MAX_ANSWER_WORDS]) or sentence


def _trim(words: list[str]) -> list[str]:
    while words and words[0].casefold() in _FILLER:
        words = words[1:]
    while words and words[-1].casefold() in _FILLER:
        words = words[:-1]
    return words


# -- the headline ------------------------------------------------------------------------


def format_headline(task: str, status: str, next_action: str, anchors: list[str]) -> str:
    """The headline line, in the one canonical form of ``headlines``, with each field cut to
    a length a glance can take in. With no anchors, the task's own words stand in."""

    def cut(text: str, limit: int) -> str:
        text = " ".join(text.split())
        return text if len(text) <= limit else text[: limit - 1] + "…"

    kept = [cut(a, 40) for a in dict.fromkeys(a.strip() for a in anchors) if a]
    return headlines.format_headline(
        cut(task, 80), cut(status, 100), cut(next_action, 80), kept[:6] or [cut(task, 40)]
    )


# -- the turn and the rules --------------------------------------------------------------


def live_request(text: str) -> str:
    """The user's request without the archive the working view puts in front of it.

    When the live conversation starts with the request, the view joins the index, the seam
    banner and the namespace digest to it; the request is what follows them.
    """
    if SEAM_BANNER in text:
        text = text.rsplit(SEAM_BANNER, 1)[1]
    elif text.startswith(DIGEST_HEADER):
        text = text.partition("\n\n")[2]
    return text.strip()


def view_evidence(messages: list[dict[str, Any]], request: int) -> str:
    """What the view shows before the live request (``messages[request]``), as evidence lines.

    Earlier tool output keeps its own lines (and their seqs). Every other line of a user or
    tool message becomes one line in the printed-evidence form with mark ``=`` and a negative
    seq counting back from the request (the newest is -1, so among equals the newer wins).
    Its date is the line's leading ``[YYYY-MM-DD …]`` stamp when it has one (``-``
    otherwise); its speaker is the stamp's ``Name:`` or the message's ``name`` or role. Not
    evidence: the system prompt, the model's own replies, and the archive in front of the
    live conversation (the index of its own headlines and its kernel variables' digest).
    """
    kept: list[tuple[str, str, str]] = []
    printouts: list[str] = []
    for message in messages[:request]:
        role = str(message.get("role") or "")
        if role in ("system", "assistant"):
            continue
        text = message_text(message)
        if SEAM_BANNER in text or text.startswith(DIGEST_HEADER):
            text = live_request(text)
        if role == "tool":
            printouts += [line for line in text.splitlines() if _EVIDENCE.match(line)]
            text = "\n".join(line for line in text.splitlines() if not _EVIDENCE.match(line))
        who = str(message.get("name") or role)
        for raw in text.splitlines():
            line = raw.strip()
            if not line:
                continue
            dated = _DATED_LINE.match(line)
            if dated is not None:
                kept.append((dated["date"], (dated["who"] or who).strip(), dated["text"]))
            else:
                kept.append(("-", who, line))
    lines = [
        f"{VIEW_MARK}[{i - len(kept)}] {day} {who}: {text}"
        for i, (day, who, text) in enumerate(kept)
    ]
    return "\n".join([*printouts, *lines])


@dataclass
class Turn:
    """The live turn as the policy sees it: the latest user message and what followed."""

    messages: list[dict[str, Any]]
    tools: frozenset[str]
    user_text: str = ""
    calls: list[ToolCall] = field(default_factory=list)  # tool calls made since the user spoke
    results: dict[str, str] = field(default_factory=dict)  # tool_call_id -> tool output
    view: str = ""  # what the view showed before the request, as evidence lines
    abstention: str = ABSTENTION
    shared: float = SHARED_SPECIFIC

    @classmethod
    def read(cls, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Turn:
        names = frozenset(
            str(t.get("function", {}).get("name")) for t in tools if isinstance(t, dict)
        )
        turn = cls(messages, names)
        start = None
        for i in range(len(messages) - 1, -1, -1):
            if messages[i].get("role") == "user":
                start = i
                break
        if start is None:
            return turn
        turn.user_text = live_request(message_text(messages[start]))
        turn.view = view_evidence(messages, start)
        for message in messages[start + 1 :]:
            if message.get("role") == "assistant":
                for raw in message.get("tool_calls") or []:
                    function = raw.get("function", {})
                    arguments = function.get("arguments") or "{}"
                    try:
                        decoded = json.loads(arguments) if isinstance(arguments, str) else {}
                    except json.JSONDecodeError:
                        decoded = {}
                    turn.calls.append(
                        ToolCall(str(raw.get("id")), str(function.get("name")), decoded)
                    )
            elif message.get("role") == "tool":
                turn.results[str(message.get("tool_call_id"))] = message_text(message)
        return turn

    @property
    def last_call(self) -> ToolCall | None:
        return self.calls[-1] if self.calls else None

    @property
    def last_output(self) -> str | None:
        call = self.last_call
        return None if call is None else self.results.get(call.id)


@dataclass(frozen=True)
class Action:
    """What a rule decided: text, and at most one tool call (name, code)."""

    text: str
    headline: str
    tool: str | None = None
    code: str | None = None


Rule = Callable[[Turn], Action | None]


def run_user_code(turn: Turn) -> Action | None:
    """A fenced python block in the request: run it as given."""
    found = _FENCE.search(turn.user_text)
    if found is None or turn.calls or REPL_TOOL not in turn.tools:
        return None
    code = found.group(1)
    return Action(
        "Running the code from your message.",
        format_headline(
            _cell_task(turn.user_text), "running", "report its output", _code_anchors(code)
        ),
        REPL_TOOL,
        code,
    )


def decline_task_code(turn: Turn) -> Action | None:
    """A fenced python block in a run that may not run task code: say so, run nothing."""
    if _FENCE.search(turn.user_text) is None or turn.calls:
        return None
    return Action(
        "Not running the code from your message: this run may not execute task code "
        "(that needs the run_task_code permission).",
        format_headline(_cell_task(turn.user_text), "code not run", "await the next request", []),
    )


def report_code_output(turn: Turn) -> Action | None:
    """After running the user's cell: report what it printed."""
    call = turn.last_call
    output = turn.last_output
    if call is None or call.name != REPL_TOOL or output is None:
        return None
    if _FENCE.search(turn.user_text) is None:
        return None  # repl_exec stood in for recall: answer_from_output handles it
    lines = output.strip().splitlines()
    shown = "\n".join(lines[:20]) + (
        f"\n… ({len(lines) - 20} more lines)" if len(lines) > 20 else ""
    )
    failed = _looks_failed(output)
    text = ("The cell failed:\n" if failed else "The cell printed:\n") + (shown or "(nothing)")
    status = "cell failed" if failed else f"cell ran, {len(lines)} lines printed"
    # Anchors are what a later search would need: the identifiers the output carried (ids,
    # versions, error names) before the names the code used.
    anchors = [*_output_anchors(output), *_code_anchors(str(call.arguments.get("code", "")))]
    return Action(
        text,
        format_headline(_cell_task(turn.user_text), status, "await the next request", anchors),
    )


def recall_first(turn: Turn) -> Action | None:
    """A question and no recall yet: write and run the ms program."""
    if turn.calls or not turn.user_text:
        return None
    tool = _recall_tool(turn)
    question = analyse_question(turn.user_text)
    if tool is None or not (question.terms or question.entities or question.since):
        return None
    anchors = [*question.entities, *question.terms]
    if question.since:
        anchors.append(f"{question.since}..{question.last_day}")
    return Action(
        f"Searching the Event Log: {len(question.entities)} entities, "
        f"{len(question.terms)} key terms" + (", one date range." if question.since else "."),
        format_headline(
            _task(question), "searching the log", "answer from the printed evidence", anchors
        ),
        tool,
        recall_program(question),
    )


def retry_after_failure(turn: Turn) -> Action | None:
    """The program failed: one retry with a single plain search."""
    output = turn.last_output
    if output is None or len(turn.calls) != 1 or not _looks_failed(output):
        return None
    if _EVIDENCE.search(output) or turn.last_call is None:
        return None
    if turn.last_call.name not in (RECALL_TOOL, REPL_TOOL) or _FENCE.search(turn.user_text):
        return None
    question = analyse_question(turn.user_text)
    return Action(
        "The recall program failed; retrying with one plain search.",
        format_headline(
            _task(question),
            "program failed, retrying",
            "answer from the printed evidence",
            list(question.terms),
        ),
        turn.last_call.name,
        plain_search_program(question),
    )


def answer_from_output(turn: Turn) -> Action | None:
    """Answer from what the recall cells printed and what the view shows, or abstain."""
    if not turn.calls or any(c.id not in turn.results for c in turn.calls):
        return None
    return _answer(turn, [turn.results[c.id] for c in turn.calls])


def answer_from_view(turn: Turn) -> Action | None:
    """No recall tool, or nothing to search for: answer from the view's messages alone."""
    if turn.calls or not turn.user_text:
        return None
    return _answer(turn, [])


def _answer(turn: Turn, printed: list[str]) -> Action:
    question = analyse_question(turn.user_text)
    lines = "\n".join([*printed, turn.view])
    evidence = choose_evidence(find_evidence(question, lines, turn.shared))
    text = compose_answer(question, evidence, turn.abstention)
    status = "answered from " + cite(evidence) if evidence else "abstained, nothing relevant"
    anchors = [
        *(f"seq {e.seq}" for e in evidence if e.seq > 0),
        *question.entities,
        *question.terms,
    ]
    return Action(text, format_headline(_task(question), status, "await the next request", anchors))


def abstain(turn: Turn) -> Action:
    """No request to answer."""
    return Action(
        turn.abstention,
        format_headline(
            _task(analyse_question(turn.user_text)) if turn.user_text else "no request",
            "abstained, no searchable terms or no recall tool",
            "await the next request",
            [],
        ),
    )


RULES: tuple[Rule, ...] = (
    run_user_code,
    report_code_output,
    recall_first,
    retry_after_failure,
    answer_from_output,
    answer_from_view,
)


def _recall_tool(turn: Turn) -> str | None:
    if RECALL_TOOL in turn.tools:
        return RECALL_TOOL
    if REPL_TOOL in turn.tools:
        return REPL_TOOL  # same kernel, ms is bound there too
    return None


def _task(question: Question) -> str:
    return "answer: " + question.text


def _looks_failed(output: str) -> bool:
    return bool(
        re.search(
            r"Traceback \(most recent call last\)|^\W*(?:\w*Error|error)\b", output, re.M | re.I
        )
    )


def _code_anchors(code: str) -> list[str]:
    """Names a cell defines or calls, and the string literals it passes."""
    names = re.findall(r"\b(?:def|class)\s+(\w+)|^(\w+)\s*=", code, re.M)
    calls = re.findall(r"\b((?:\w+\.)*\w+)\(", code)
    literals = re.findall(r"['\"]([\w.:/-]{2,40})['\"]", code)
    found = [a or b for a, b in names] + [c for c in calls if c not in _BUILTIN_CALLS] + literals
    return list(dict.fromkeys(found))[:6] or [REPL_TOOL]


# Calls too common to help anyone find a cell again.
_BUILTIN_CALLS = frozenset({"print", "len", "range", "sorted", "list", "dict", "set", "str"})
# Tokens worth finding again in a cell's output: ids and versions (letters with digits,
# e.g. CFG-2291, v2.41.0) and CamelCase names (e.g. PoolTimeoutError).
_OUTPUT_TOKEN = re.compile(
    r"\b(?:[A-Za-z]+[-_.]?\d[\w.-]*|v\d+(?:\.\d+)+|[A-Z][a-z]+(?:[A-Z][a-z]+)+)\b"
)


_HEX_ID = re.compile(r"[0-9a-f]{6,}")


def _output_anchors(output: str, limit: int = 4) -> list[str]:
    """The most frequent id-, version- and CamelCase-like tokens of a cell's output; random
    hex ids (trace ids, hashes) and short path bits (v1) would only add noise."""
    counts: dict[str, int] = {}
    for raw in _OUTPUT_TOKEN.findall(output):
        token = raw.rstrip(".-")
        if len(token) < 4 or _HEX_ID.fullmatch(token):
            continue
        counts[token] = counts.get(token, 0) + 1
    return sorted(counts, key=lambda t: (-counts[t], t))[:limit]


def _cell_task(user_text: str) -> str:
    """What the user asked for, in the words before the code block."""
    before = _FENCE.split(user_text, maxsplit=1)[0]
    words = " ".join(before.split())
    return words[:80] if words else "run the user's cell"


class PolicyModel:
    """The deterministic baseline ``ChatModel``; see the module docstring.

    Its name says what it is (``scroll-policy-baseline``), and so does ``baseline``.
    ``task_code=False`` declines to execute fenced code from the user's message.
    """

    baseline = True

    def __init__(
        self,
        *,
        context_size: int = DEFAULT_CONTEXT_SIZE,
        rules: tuple[Rule, ...] = RULES,
        token_counter: TokenCounter | None = None,
        task_code: bool = True,
        abstention: str = ABSTENTION,
        shared_specific: float = SHARED_SPECIFIC,
    ) -> None:
        if not abstention.strip():
            raise ConfigError("the abstention phrase must not be empty")
        if not 0.0 < shared_specific <= 1.0:
            raise ConfigError(f"shared_specific must be in (0, 1], got {shared_specific!r}")
        self.name = POLICY_NAME
        self.context_size = context_size
        self.rules = rules if task_code else (decline_task_code, *rules)
        self.task_code = task_code
        self.abstention = abstention
        self.shared_specific = shared_specific
        self._tokens = token_counter or CharRatioCounter()

    def __repr__(self) -> str:
        return f"PolicyModel({self.name!r}, rule-based baseline, not an LLM)"

    def decide(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Action:
        turn = Turn.read(messages, tools)
        turn.abstention, turn.shared = self.abstention, self.shared_specific
        for rule in self.rules:
            action = rule(turn)
            if action is not None:
                return action
        return abstain(turn)

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        action = self.decide(messages, tools)
        content = f"{action.text}\n{action.headline}"
        calls: tuple[ToolCall, ...] = ()
        if action.tool is not None and action.code is not None:
            calls = (ToolCall(_call_id(messages, action.code), action.tool, {"code": action.code}),)
        prompt = "\n".join(message_text(m) for m in messages)
        return ModelReply(
            content=content,
            tool_calls=calls,
            usage=Usage(
                input_tokens=self._tokens.count(prompt),
                output_tokens=self._tokens.count(content + (action.code or "")),
            ),
            finish_reason="tool_calls" if calls else "stop",
            model=self.name,
        )


def _call_id(messages: list[dict[str, Any]], code: str) -> str:
    # Deterministic, and distinct for distinct conversations: a hash of what was seen.
    digest = hashlib.sha256()
    for message in messages:
        digest.update(json.dumps(message, sort_keys=True, default=str).encode())
    digest.update(code.encode())
    return "call_policy_" + digest.hexdigest()[:16]
