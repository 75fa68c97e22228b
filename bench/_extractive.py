"""The extractive summarise baseline: deterministic, no model, no Scroll code.

Each turn is split into sentences. A sentence's salience is what a summary must not lose:
named entities (capitalised words not opening the sentence, "I" aside), numbers and time
words (months, weekdays, "yesterday", "last week", years), each worth 2, plus the mean
TF-IDF of its words, where a document is one block of the conversation (a LoCoMo session).
A summary of the turns before a cut gives each block an equal share of the budget (what a
block does not use passes on to the next) and takes the block's most salient sentences
that fit, shown in conversation order as ``[YYYY-MM-DD HH:MM] Speaker: sentence``; its
token count, header included, never exceeds the budget. The same turns and budget always
give the same summary, and nothing about the questions is known to it.
"""

from __future__ import annotations

import calendar
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["SUMMARY_HEADER", "ExtractiveSummariser", "Sentence", "salience"]

SUMMARY_HEADER = "[extractive summary of the earlier conversation, most salient sentences]"
MESSAGE_OVERHEAD = 4  # per message, as the baselines count it

_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*|\d+(?:[.,:/]\d+)*")
_NUMBER = re.compile(r"\d")
_TIME_WORDS = frozenset(
    {m.lower() for m in calendar.month_name if m}
    | {m.lower() for m in calendar.month_abbr if m}
    | {d.lower() for d in calendar.day_name}
    | {"yesterday", "today", "tomorrow", "tonight", "weekend", "ago", "week", "month", "year"}
)
_STOP = frozenset(
    """
    a an the and or but so to of in on at for with from by as is are was were be been am it
    its this that these those i you he she we they me him her us them my your his our their
    do did does have has had not no yes just really very too also what when where who how
    oh hey hi wow yeah thanks thank
    """.split()
)


class _Counter(Protocol):
    def count(self, text: str) -> int: ...


class _Turn(Protocol):
    @property
    def speaker(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def created_at(self) -> str: ...
    @property
    def block(self) -> int: ...


@dataclass(frozen=True)
class Sentence:
    turn: int  # position of its turn in the conversation
    order: int  # position among all sentences
    block: int
    line: str
    salience: float
    tokens: int


def salience(sentence: str, idf: dict[str, float]) -> float:
    """Named entities, numbers and time words (2 each) plus the mean TF-IDF of its words."""
    words = _WORD.findall(sentence)
    marked = 0
    for i, word in enumerate(words):
        low = word.lower()
        if (
            _NUMBER.search(word)
            or low in _TIME_WORDS
            or (i > 0 and word[0].isupper() and word != "I")
        ):
            marked += 1
    content = [w.lower() for w in words if w.lower() not in _STOP]
    tfidf = sum(idf.get(w, 0.0) for w in content) / len(content) if content else 0.0
    return 2.0 * marked + tfidf


class ExtractiveSummariser:
    """Summaries of a conversation's earlier turns under a token budget; see the module."""

    def __init__(self, turns: Sequence[Any], counter: _Counter) -> None:
        self.counter = counter
        self.turns: Sequence[_Turn] = turns
        split = [[s for s in _SENTENCE.split(" ".join(t.text.split())) if s.strip()] for t in turns]
        df: Counter[str] = Counter()
        blocks = {t.block for t in turns}
        for block in blocks:
            words: set[str] = set()
            for t, parts in zip(turns, split, strict=True):
                if t.block == block:
                    words.update(w.lower() for p in parts for w in _WORD.findall(p))
            df.update(words)
        n = max(1, len(blocks))
        idf = {w: math.log((1 + n) / (1 + c)) + 1.0 for w, c in df.items()}
        self.sentences: list[Sentence] = []
        for position, (t, parts) in enumerate(zip(turns, split, strict=True)):
            stamp = t.created_at[:16].replace("T", " ")
            for part in parts:
                line = f"[{stamp}] {t.speaker}: {part}"
                self.sentences.append(
                    Sentence(
                        position,
                        len(self.sentences),
                        t.block,
                        line,
                        salience(part, idf),
                        counter.count(line) + 1,  # and its newline
                    )
                )
        self._header = counter.count(SUMMARY_HEADER) + MESSAGE_OVERHEAD

    def select(self, cut: int, budget: int) -> list[Sentence]:
        """The sentences of turns before ``cut`` a summary of ``budget`` tokens keeps."""
        room = budget - self._header
        older = [s for s in self.sentences if s.turn < cut]
        if room <= 0 or not older:
            return []
        blocks = sorted({s.block for s in older})
        share, carried, kept = room // len(blocks), 0, []
        for number, block in enumerate(blocks):
            allowance = share + carried + (room % len(blocks) if number == len(blocks) - 1 else 0)
            ranked = sorted(
                (s for s in older if s.block == block), key=lambda s: (-s.salience, s.order)
            )
            used = 0
            for sentence in ranked:
                if used + sentence.tokens <= allowance:
                    kept.append(sentence)
                    used += sentence.tokens
            carried = allowance - used
        kept.sort(key=lambda s: s.order)
        return kept

    def summary(self, cut: int, budget: int) -> str:
        """The summary message's text for the turns before ``cut``, within ``budget`` tokens
        (message overhead included), or ``""`` when nothing fits."""
        kept = self.select(cut, budget)
        while kept:
            text = "\n".join([SUMMARY_HEADER, *(s.line for s in kept)])
            if self.counter.count(text) + MESSAGE_OVERHEAD <= budget:
                return text
            kept.remove(min(kept, key=lambda s: (s.salience, -s.order)))
        return ""
