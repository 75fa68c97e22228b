"""Evidence retrieval on LoCoMo through ``EventLog.search``, model-free.

    python bench/retrieval.py --dataset locomo --json
    python bench/retrieval.py --backend both      # SQLite and PostgreSQL side by side

Ingests ``../shared/data/locomo/locomo10.json`` through the importer, then for every QA item
with resolvable evidence asks ``EventLog.search(question, k=10)`` within its conversation.
A hit counts for its own seq only. Reports evidence recall@1/5/10 (share of an item's
evidence turns in the top k, averaged over items) and any-evidence hit@10, overall and by
category. ``variants`` repeats the measurement for each retrieval change in the same run,
so what each one bought is measured rather than remembered.

``--backend postgres`` runs the same on the PostgreSQL Event Log (``--postgres-url`` or
``SCROLL_BENCH_POSTGRES_URL``, else a throwaway server); ``both`` reports the two and the
difference on every row. On PostgreSQL ``plain_fts5_bm25`` is the same reference computed
there: BM25 over content matches only, no neighbours, but with document frequencies over
every column (FTS5's column filter counts content alone). The backends tokenise and stem differently
(snowball English versus FTS5's Porter; PostgreSQL keeps diacritics and also indexes
hyphenated words whole), which is what any difference measures.
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import tempfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from _common import SHARED_DATA, emit

from scroll_core import EventLog
from scroll_core.eventstore import EventStore
from scroll_core.ftsquery import match_expression, query_terms
from scroll_core.ingest import ingest
from scroll_core.search import SearchTuning

CATEGORIES = {1: "multi_hop", 2: "temporal", 3: "open_domain", 4: "single_hop", 5: "adversarial"}
_DIA_ID = re.compile(r"D\d+:\d+")

Search = Callable[[str, str, int], list[int]]


def evidence_ids(raw: list[str]) -> list[str]:
    """Dialog ids of an item; LoCoMo has a few ids joined by ';' or spaces."""
    found: list[str] = []
    for item in raw:
        found.extend(_DIA_ID.findall(item))
    return list(dict.fromkeys(found))


def load_items(path: Path, seq_of: dict[tuple[str, str], int]) -> tuple[list[dict[str, Any]], int]:
    items, unresolved = [], 0
    for sample in json.loads(path.read_text()):
        session = f"locomo:{sample['sample_id']}"
        for qa in sample["qa"]:
            ids = evidence_ids(qa.get("evidence") or [])
            seqs = [seq_of[(session, d)] for d in ids if (session, d) in seq_of]
            unresolved += len(ids) - len(seqs)
            if seqs:
                items.append(
                    {
                        "session": session,
                        "question": qa["question"],
                        "evidence": set(seqs),
                        "category": CATEGORIES.get(qa.get("category"), "unknown"),
                    }
                )
    return items, unresolved


def score(items: list[dict[str, Any]], search: Search) -> dict[str, Any]:
    per_cat: dict[str, list[tuple[float, float, float, float]]] = defaultdict(list)
    for item in items:
        top = search(item["question"], item["session"], 10)
        evidence = item["evidence"]
        recalls = [len(evidence & set(top[:k])) / len(evidence) for k in (1, 5, 10)]
        row = (*recalls, 1.0 if evidence & set(top[:10]) else 0.0)
        per_cat["all"].append(row)
        per_cat[item["category"]].append(row)

    def summary(rows: list[tuple[float, ...]]) -> dict[str, Any]:
        cols = list(zip(*rows, strict=True))
        names = ("recall_at_1", "recall_at_5", "recall_at_10", "hit_at_10")
        out: dict[str, Any] = {
            n: round(sum(c) / len(c), 4) for n, c in zip(names, cols, strict=True)
        }
        out["items"] = len(rows)
        return out

    result = summary(per_cat.pop("all"))
    result["by_category"] = {cat: summary(rows) for cat, rows in sorted(per_cat.items())}
    return result


def plain_fts5(db: sqlite3.Connection) -> Search:
    """The published reference point: BM25 over single turns' content, terms OR-ed after
    stop-word removal, nothing else."""

    def search(question: str, session: str, k: int) -> list[int]:
        terms = query_terms(question)
        if not terms:
            return []
        sql = (
            "SELECT f.rowid FROM events_fts f JOIN events e ON e.seq = f.rowid "
            "WHERE events_fts MATCH ? AND e.session_id = ? ORDER BY bm25(events_fts), f.rowid "
            "LIMIT ?"
        )
        match = "{content} : (" + match_expression(terms) + ")"
        return [r[0] for r in db.execute(sql, (match, session, k))]

    return search


def plain_postgres(log: Any) -> Search:
    """The same reference point on PostgreSQL: BM25 over content matches only (the tsquery
    restricted to content's weight label, as ``{content} :`` restricts FTS5), no
    neighbours, straight from the BM25 SQL."""
    from scroll_core.pglog import PG_DIALECT, _bm25_sql, _tsquery
    from scroll_core.search import SearchFilters

    db = log._reader()

    def search(question: str, session: str, k: int) -> list[int]:
        terms = query_terms(question)
        if not terms:
            return []
        filters = SearchFilters(session_id=session)
        sql = _bm25_sql(filters, PG_DIALECT).replace("%s", "%(session)s", 1)
        query = " | ".join(f"{quoted}:D" for quoted in _tsquery(terms).split(" | "))
        params = {"text": " ".join(terms), "query": query, "limit": k, "session": session}
        params.update(wa=0.0, wc=0.0, wd=1.0)
        return [row[0] for row in db.execute(sql, params).fetchall()]

    return search


def scroll_search(log: EventStore, tuning: SearchTuning) -> Search:
    def search(question: str, session: str, k: int) -> list[int]:
        log.search_tuning = tuning
        return [h.seq for h in log.search(question, k, session_id=session)]

    return search


def variants() -> dict[str, SearchTuning]:
    """Each retrieval change on its own, in the order they were added."""
    default = SearchTuning()
    return {
        # The speaker's name indexed but worth nothing as a match: only bm25's statistics move.
        "name_indexed": replace(default, rank_weights=(1.0, 2.0, 0.0), neighbour_weights=()),
        "name_weighted": replace(default, neighbour_weights=()),
        "neighbours_1": replace(default, neighbour_weights=default.neighbour_weights[:1]),
        "scroll_search": default,
    }


def headline(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k != "by_category"}


def measure(log: EventStore, data: Path) -> dict[str, Any]:
    """Ingest LoCoMo into ``log`` and score every variant on it."""
    ingest(log, "locomo", data, progress=False)
    seq_of = {}
    for summary in log.sessions():
        for event in log.session_events(summary.session_id, limit=None):
            seq_of[(event.session_id, event.metadata["dia_id"])] = event.seq
    items, unresolved = load_items(data, seq_of)
    result = score(items, scroll_search(log, SearchTuning()))
    if isinstance(log, EventLog):
        raw = sqlite3.connect(f"file:{log.path}?mode=ro", uri=True)
        result["variants"] = {"plain_fts5_bm25": headline(score(items, plain_fts5(raw)))}
        raw.close()
    else:
        result["variants"] = {"plain_fts5_bm25": headline(score(items, plain_postgres(log)))}
    for name, tuning in variants().items():
        result["variants"][name] = headline(score(items, scroll_search(log, tuning)))
    result["unresolved_evidence_ids"] = unresolved
    return result


def difference(sqlite: dict[str, Any], postgres: dict[str, Any]) -> dict[str, Any]:
    """PostgreSQL minus SQLite on every numeric figure of every row."""
    rows = {"scroll_search": (headline(sqlite), headline(postgres))}
    for name in sqlite["variants"]:
        rows[name] = (sqlite["variants"][name], postgres["variants"][name])
    return {
        name: {
            key: round(b[key] - a[key], 4)
            for key in a
            if isinstance(a[key], float) and isinstance(b.get(key), float)
        }
        for name, (a, b) in rows.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=["locomo"], default="locomo")
    parser.add_argument("--data", type=Path, default=SHARED_DATA / "locomo" / "locomo10.json")
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="sqlite")
    parser.add_argument("--postgres-url", default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not args.data.is_file():
        parser.error(f"LoCoMo not found at {args.data}")

    results: dict[str, dict[str, Any]] = {}
    if args.backend in ("sqlite", "both"):
        with (
            tempfile.TemporaryDirectory(prefix="scroll-retrieval-") as tmp,
            EventLog(Path(tmp) / "eventlog.sqlite3") as log,
        ):
            results["sqlite"] = measure(log, args.data)
    if args.backend in ("postgres", "both"):
        from _pg import postgres_database

        from scroll_core.pglog import PgEventLog

        with postgres_database(args.postgres_url) as url, PgEventLog(url) as log:
            results["postgres"] = measure(log, args.data)
    if args.backend == "both":
        emit(
            {
                "sqlite": results["sqlite"],
                "postgres": results["postgres"],
                "postgres_minus_sqlite": difference(results["sqlite"], results["postgres"]),
            },
            args.json,
        )
    else:
        emit(results[args.backend], args.json)


if __name__ == "__main__":
    main()
