"""LoCoMo's own plain retrieval baseline, and the QA items every retrieval row is scored on.

The data set's reference point (``../shared/data/README.md``: evidence recall@5 0.547,
@10 0.631, any-evidence hit@10 0.683) is plain SQLite FTS5 BM25 over single turns. These
rules reproduce it (``bench/retrieval.py`` prints the difference on every run):

- one FTS5 table per conversation, so a question only ever competes with its own
  conversation's turns (``global_index`` builds the one-table-for-all variant beside it);
- each turn is one row, ``"Speaker: text"``, plus ``" " + blip_caption`` where the turn
  shared an image;
- tokenizer ``porter unicode61`` (plain ``unicode61`` loses about 0.03 recall@5);
- the question's terms are split the way unicode61 splits text, lowercased, stop words
  dropped (``scroll_core.store.fts_query.STOP_WORDS``; with none dropped recall@5 falls to about
  0.50), each term quoted, terms OR-ed;
- ``ORDER BY bm25()`` with default weights, ties to the earlier turn.

Evidence (``evidence_ids``): every ``D<session>:<turn>`` found in an evidence string counts,
so ``"D8:6; D9:17"`` is two ids and ``D:11:26`` or a bare ``D`` is none; an id naming no turn
of its conversation is dropped (three: ``D10:19`` in conv-42, ``D4:36`` in conv-47 and the
zero-padded ``D30:05`` in conv-50, left as written rather than repaired). An item is scored
when at least one id resolves, and its recall is over the ids that resolve. That keeps
1,981 of 1,986 items: the four with empty evidence and conv-50's item whose only id is
``D30:05`` have nothing to find.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scroll_core.store.fts_query import match_expression, query_terms

__all__ = [
    "CATEGORIES",
    "Item",
    "PlainIndex",
    "conversation_turns",
    "evidence_ids",
    "global_index",
    "load_items",
    "load_samples",
    "per_conversation_indexes",
    "turn_document",
]

CATEGORIES = {1: "multi_hop", 2: "temporal", 3: "open_domain", 4: "single_hop", 5: "adversarial"}

_DIA_ID = re.compile(r"D\d+:\d+")
_SESSION_KEY = re.compile(r"session_(\d+)")

# A turn is named by its conversation and its dialog id: ("conv-26", "D1:3").
TurnKey = tuple[str, str]


@dataclass(frozen=True)
class Item:
    """One scored QA item: its question and the evidence turns that resolve."""

    conversation: str
    question: str
    category: str
    evidence: frozenset[TurnKey]


def evidence_ids(raw: Iterable[str]) -> list[str]:
    """Every ``D<n>:<m>`` in an item's evidence strings, in order, without repeats."""
    found: list[str] = []
    for text in raw:
        found.extend(_DIA_ID.findall(text))
    return list(dict.fromkeys(found))


def conversation_turns(sample: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A sample's turns in session order, then turn order."""
    conversation = sample["conversation"]
    numbers = sorted(int(m.group(1)) for k in conversation if (m := _SESSION_KEY.fullmatch(k)))
    for number in numbers:
        yield from conversation[f"session_{number}"]


def turn_document(turn: dict[str, Any]) -> str:
    """The text the baseline indexes for one turn: ``"Speaker: text"`` plus its caption."""
    text = f"{turn['speaker']}: {turn['text']}"
    caption = turn.get("blip_caption")
    return f"{text} {caption}" if caption else text


def load_items(samples: list[dict[str, Any]]) -> tuple[list[Item], dict[str, int]]:
    """The items with at least one resolvable evidence id, and counts of what was dropped."""
    items: list[Item] = []
    dropped = {"items_total": 0, "items_without_evidence": 0, "unresolved_evidence_ids": 0}
    for sample in samples:
        conversation = sample["sample_id"]
        known = {turn["dia_id"] for turn in conversation_turns(sample)}
        for qa in sample["qa"]:
            dropped["items_total"] += 1
            ids = evidence_ids(qa.get("evidence") or [])
            resolved = [d for d in ids if d in known]
            dropped["unresolved_evidence_ids"] += len(ids) - len(resolved)
            if not resolved:
                dropped["items_without_evidence"] += 1
                continue
            items.append(
                Item(
                    conversation=conversation,
                    question=qa["question"],
                    category=CATEGORIES.get(qa.get("category"), "unknown"),
                    evidence=frozenset((conversation, d) for d in resolved),
                )
            )
    return items, dropped


class PlainIndex:
    """An in-memory FTS5 table of turns, one row per turn, searched with plain bm25."""

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.execute(
            "CREATE VIRTUAL TABLE turns USING fts5("
            "conversation UNINDEXED, dia_id UNINDEXED, body, tokenize='porter unicode61')"
        )

    def add(self, conversation: str, turns: Iterable[dict[str, Any]], *, captions: bool) -> None:
        rows = [
            (conversation, t["dia_id"], turn_document(t) if captions else _no_caption(t))
            for t in turns
        ]
        self.db.executemany("INSERT INTO turns(conversation, dia_id, body) VALUES (?, ?, ?)", rows)

    def search(self, question: str, k: int) -> list[TurnKey]:
        terms = query_terms(question)
        if not terms:
            return []
        sql = (
            "SELECT conversation, dia_id FROM turns WHERE turns MATCH ? "
            "ORDER BY bm25(turns), rowid LIMIT ?"
        )
        match = "body : (" + match_expression(terms) + ")"
        return [(c, d) for c, d in self.db.execute(sql, (match, k))]

    def documents(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT body FROM turns ORDER BY rowid")]

    def close(self) -> None:
        self.db.close()


def _no_caption(turn: dict[str, Any]) -> str:
    return f"{turn['speaker']}: {turn['text']}"


def per_conversation_indexes(
    samples: list[dict[str, Any]], *, captions: bool = True
) -> dict[str, PlainIndex]:
    """The data set's baseline: one index per conversation."""
    indexes = {}
    for sample in samples:
        index = PlainIndex()
        index.add(sample["sample_id"], conversation_turns(sample), captions=captions)
        indexes[sample["sample_id"]] = index
    return indexes


def global_index(samples: list[dict[str, Any]], *, captions: bool = True) -> PlainIndex:
    """Every conversation's turns in one table, for comparing with an unfiltered search."""
    index = PlainIndex()
    for sample in samples:
        index.add(sample["sample_id"], conversation_turns(sample), captions=captions)
    return index


def load_samples(path: Path) -> list[dict[str, Any]]:
    samples = json.loads(path.read_text())
    if not isinstance(samples, list):
        raise ValueError(f"{path}: not a LoCoMo file (expected a list of samples)")
    return samples
