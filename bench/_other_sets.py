"""The retrieval sets beside LoCoMo, each with its own plain BM25 measured in the same run.

- ``assistant``: the scripted long assistant conversations of ``bench/_assistant_sessions.py``
  imported by the real LongMemEval importer; each question ranks its own conversation's
  turns (``session_id``); split ``dev`` / ``heldout`` by conversation.
- ``transcripts``: ``bench/_heldout.py``'s questions on the Claude Code and Letta transcripts
  (the ``all_grown`` families), each searched over the whole log as it stood before the
  question (LoCoMo's turns in the same log as distractors); held out as a whole: it is never
  read while choosing a setting.

Plain BM25 is the data set's kind of baseline (``bench/_locomo_baseline.py``'s rules): each
turn's text one row of an FTS5 table (``porter unicode61``), the question's terms OR-ed after
stop-word removal, ``bm25()`` with default weights, ties to the earlier turn; one table per
conversation for ``assistant``, one for the whole log (searched below ``before_seq``) for
``transcripts``. Scroll's rows run the real ``EventStore.search`` on the same questions.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import _assistant_sessions as assistant
from bench._heldout import build_items as build_heldout
from bench._heldout import heldout_log
from scroll_core import EventLog, EventStore, SearchTuning
from scroll_core.ingest import ingest
from scroll_core.store.fts_query import match_expression, query_terms

__all__ = ["SETS", "OtherSet", "SetItem", "assistant_set", "other_sets", "score", "summarise"]

SETS = ("assistant", "transcripts")
METRICS = ("recall_at_1", "recall_at_5", "recall_at_10", "hit_at_10")


@dataclass(frozen=True)
class SetItem:
    split: str
    category: str
    question: str
    evidence: frozenset[int]  # seqs
    scope: str  # the session searched ("" for the whole log)
    before_seq: int | None = None


class PlainSeqIndex:
    """One in-memory FTS5 table of events by seq, searched with plain bm25."""

    def __init__(self, rows: Sequence[tuple[int, str]]) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize='porter unicode61')")
        self.db.executemany("INSERT INTO t(rowid, body) VALUES (?, ?)", rows)

    def search(self, question: str, k: int, before_seq: int | None = None) -> list[int]:
        terms = query_terms(question)
        if not terms:
            return []
        bound = "" if before_seq is None else " AND rowid < ?"
        params: tuple[Any, ...] = (f"body : ({match_expression(terms)})",)
        params += () if before_seq is None else (before_seq,)
        sql = f"SELECT rowid FROM t WHERE t MATCH ?{bound} ORDER BY bm25(t), rowid LIMIT ?"
        return [r[0] for r in self.db.execute(sql, (*params, k))]

    def close(self) -> None:
        self.db.close()


Search = Callable[[SetItem, int], list[int]]


@dataclass
class OtherSet:
    """A set's questions, its Event Log and its plain indexes (by scope)."""

    name: str
    items: list[SetItem]
    log: EventStore
    plain_indexes: dict[str, PlainSeqIndex]

    def plain(self, item: SetItem, k: int) -> list[int]:
        return self.plain_indexes[item.scope].search(item.question, k, item.before_seq)

    def scroll(self, tuning: SearchTuning) -> Search:
        def search(item: SetItem, k: int) -> list[int]:
            self.log.search_tuning = tuning
            hits = self.log.search(
                item.question, k, session_id=item.scope or None, before_seq=item.before_seq
            )
            return [h.seq for h in hits]

        return search

    def close(self) -> None:
        for index in self.plain_indexes.values():
            index.close()


def _searchable(path: Path) -> list[tuple[int, str]]:
    """Every searchable event's (seq, content) of a SQLite Event Log file."""
    db = sqlite3.connect(path)
    try:
        return db.execute(
            "SELECT seq, coalesce(content, '') FROM events WHERE searchable = 1 ORDER BY seq"
        ).fetchall()
    finally:
        db.close()


def assistant_set(workdir: Path, log: EventStore) -> OtherSet:
    """The generated conversations, imported into ``log``."""
    path = workdir / "assistant_sessions.json"
    probes = assistant.write(path)
    ingest(log, "longmemeval", path, progress=False)
    seq_of: dict[tuple[str, int, int], int] = {}
    texts: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for summary in log.sessions():
        for event in log.session_events(summary.session_id, limit=None):
            meta = event.metadata
            cid = meta["question_id"]
            seq_of[(cid, meta["haystack_index"], meta["turn"])] = event.seq
            texts[f"longmemeval:{cid}"].append((event.seq, event.content or ""))
    items = [
        SetItem(
            assistant.split_of(p.conversation),
            p.category,
            p.question,
            frozenset(seq_of[(p.conversation, s, t)] for s, t in p.evidence),
            f"longmemeval:{p.conversation}",
        )
        for p in probes
    ]
    plain = {scope: PlainSeqIndex(rows) for scope, rows in texts.items()}
    return OtherSet("assistant", items, log, plain)


@contextmanager
def other_sets(data: Path, workdir: Path) -> Iterator[list[OtherSet]]:
    """Both sets on SQLite Event Logs under ``workdir``."""
    with EventLog(workdir / "assistant.sqlite3") as log, heldout_log(data, workdir) as held:
        sets = [assistant_set(workdir, log)]
        questions = build_heldout(workdir / "heldout.sqlite3")
        items = [
            SetItem("heldout", q.family, q.question, frozenset({q.evidence}), "", q.before_seq)
            for q in questions
        ]
        plain = PlainSeqIndex(_searchable(workdir / "heldout.sqlite3"))
        sets.append(OtherSet("transcripts", items, held, {"": plain}))
        try:
            yield sets
        finally:
            for s in sets:
                s.close()


Row = tuple[float, float, float, float]


def score(items: Sequence[SetItem], search: Search) -> list[Row]:
    rows: list[Row] = []
    for item in items:
        top = search(item, 10)
        found = [len(item.evidence & set(top[:k])) / len(item.evidence) for k in (1, 5, 10)]
        rows.append((*found, 1.0 if item.evidence & set(top) else 0.0))  # type: ignore[arg-type]
    return rows


def _mean(rows: Sequence[Row]) -> dict[str, Any]:
    if not rows:
        return {m: None for m in METRICS} | {"items": 0}
    cols = list(zip(*rows, strict=True))
    return {m: round(sum(c) / len(c), 4) for m, c in zip(METRICS, cols, strict=True)} | {
        "items": len(rows)
    }


def summarise(items: Sequence[SetItem], rows: Sequence[Row]) -> dict[str, Any]:
    """Means per split, each overall and per category."""
    grouped: dict[str, dict[str, list[Row]]] = defaultdict(lambda: defaultdict(list))
    for item, row in zip(items, rows, strict=True):
        grouped[item.split]["overall"].append(row)
        grouped[item.split][item.category].append(row)
    out: dict[str, Any] = {}
    for split, groups in sorted(grouped.items()):
        summary = _mean(groups.pop("overall"))
        summary["by_category"] = {c: _mean(r) for c, r in sorted(groups.items())}
        out[split] = summary
    return out
