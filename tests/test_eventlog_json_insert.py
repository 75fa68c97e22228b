"""The SQLite log's one-statement insert (``json_insert``): rows go in through ``json_each``
only when they come back exactly, and the stored log (events, seqs, session summaries, the
BM25 totals, the full-text index) is the one ``executemany`` row by row makes, repeated
dedup keys and all."""

from __future__ import annotations

import random
import sqlite3
from typing import Any

import pytest

from scroll_core import EventLog
from scroll_core.store.json_insert import JSON_ROWS_SELECT, json_insert_works, json_rows

_TEXTS = ["plain words", "é 漢字 😀", 'q"u\\o\n\t\x01\x7f', "", " 12 ", "null", "\u2028"]


_INTS = [0, -5, 2**40, 2**63 - 1, -(2**63), None]


def _row(rng: random.Random) -> tuple[Any, ...]:
    """A row like the log's: integers (or None) in columns 9, 15 and 16, text elsewhere."""
    return tuple(
        rng.choice(_INTS)
        if i in (9, 15, 16)
        else rng.choice([*_TEXTS, None, rng.choice(_TEXTS) * rng.randint(1, 50)])
        for i in range(17)
    )


def test_rows_come_back_from_json_each_exactly():
    db = sqlite3.connect(":memory:")
    assert json_insert_works(db)
    rng = random.Random(36)
    for _ in range(50):
        rows = [_row(rng) for _ in range(rng.randint(1, 40))]
        text = json_rows(rows)
        assert text is not None
        back = db.execute(JSON_ROWS_SELECT, (text,)).fetchall()
        assert back == rows
        assert [list(map(type, r)) for r in back] == [list(map(type, r)) for r in rows]


@pytest.mark.parametrize(
    "value",
    ["a\x00b", "\ud800", "\ud800 😀", True, 1.5, b"bytes", 2**63, -(2**63) - 1, 7, ["list"]],
)
def test_a_value_json_would_not_give_back_sends_the_rows_row_by_row(value):
    """(7: an integer in a column of text, which the log never writes, is refused too.)"""
    row = ("s",) * 16 + (value,)
    assert json_rows([("s",) * 17, row]) is None
    assert json_rows([("s",) * 16 + (1,), row if type(value) is not int else ("s",) * 17]) is None


def test_rows_of_the_wrong_width_or_none_are_not_json():
    assert json_rows([]) is None
    assert json_rows([("s",) * 16]) is None


class _RowByRowLog(EventLog):
    """The log with the one-statement insert turned off: ``executemany`` for every row."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._json_insert = False


def _events(rng: random.Random, n: int, start: int) -> list[dict[str, Any]]:
    events = []
    for i in range(start, start + n):
        content = " ".join(
            rng.choice(["alpha", "beta", "gamma", "délta", "x\ny"]) for _ in range(6)
        )
        if i == 700:
            content += "\x00"  # SQLite keeps NUL in content: that batch goes row by row
        events.append(
            {
                "session_id": f"s{i % 3}",
                "agent_id": ("main", "helper")[i % 2],
                "kind": "context_msg",
                "content": content,
                "headline": rng.choice([None, "a headline", "ünï"]),
                "metadata": rng.choice([None, {"i": i}]),
                "created_at": f"2026-03-01T10:{i // 60 % 60:02d}:{i % 60:02d}Z",
                "dedup_key": f"k{rng.randint(0, n + start)}",  # repeats, in and across batches
                "searchable": i % 11 != 0,
            }
        )
    return events


def _stored(log: EventLog) -> tuple[Any, ...]:
    db = log._writer
    tables = ("events", "session_stats", "events_fts_agent_totals", "events_fts_docsize")
    matches = db.execute(
        "SELECT rowid FROM events_fts WHERE events_fts MATCH 'alpha OR headline' ORDER BY rowid"
    ).fetchall()
    return (*(db.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in tables), matches)


def test_the_stored_log_is_what_executemany_stores(tmp_path, monkeypatch):
    from scroll_core.store import sqlite_log

    made: list[bool] = []  # per statement: whether it went as JSON (the real json_rows)
    monkeypatch.setattr(
        sqlite_log,
        "json_rows",
        lambda values: made.append(json_rows(values) is not None) or json_rows(values),
    )
    rng = random.Random(20261203)
    # (2,500 events: three statements, repeats in each, against the log and inside it.)
    sizes = ((600, 0), (1, 600), (450, 601), (300, 0), (2500, 1051))
    batches = [_events(rng, n, start) for n, start in sizes]
    results = []
    for cls in (EventLog, _RowByRowLog):
        with cls(tmp_path / f"{cls.__name__}.sqlite3") as log:
            assert log._json_insert is (cls is EventLog)
            seqs = [(list(s), s.inserted) for s in map(log.append_many, batches)]
            assert log.fts_check() > 0
            results.append((seqs, _stored(log)))
    assert results[0] == results[1]
    seqs = results[0][0]
    assert 0 < seqs[3][1] < 300 and seqs[0][1] < 600  # repeats resolved to existing seqs
    assert 1000 < seqs[4][1] < 2500
    assert made.count(False) >= 1 and made.count(True) >= 4  # both ways, NUL row by row


def _exact_by_columns(rows: list[tuple[Any, ...]]) -> bool:
    """The check ``json_rows`` made before ``ingest_rows.exact_json_values``, column by
    column: the reference the one-pass loop must agree with."""
    if any(len(row) != 17 for row in rows):
        return False
    for column in zip(*rows, strict=True):
        types = set(map(type, column))
        if not {str, int, type(None)}.issuperset(types):
            return False
        if int in types:
            if str in types:
                return False
            ints = [value for value in column if value is not None]
            if not -(2**63) <= min(ints) <= max(ints) <= 2**63 - 1:
                return False
    return True


_ODD = ["s", None, 0, 7, True, False, 1.5, b"b", 2**63, -(2**63) - 1, 2**63 - 1, ["x"], ""]


def test_the_one_pass_check_agrees_with_the_column_check():
    from scroll_core.store.ingest_rows import exact_json_values

    rng = random.Random(37)
    seen = {True: 0, False: 0}
    for _ in range(3000):
        rows = [_row(rng) for _ in range(rng.randint(1, 6))]
        for _ in range(rng.choice([0, 0, 1, 2])):  # an odd value somewhere
            r = rng.randrange(len(rows))
            row = list(rows[r])
            row[rng.randrange(17)] = rng.choice(_ODD)
            rows[r] = tuple(row)
        if rng.random() < 0.05:
            rows.append(rows[0][: rng.randint(0, 18)])  # a row of another width
        expected = _exact_by_columns(rows)
        assert exact_json_values(rows, 17) is expected, rows
        seen[expected] += 1
    assert min(seen.values()) > 300  # both answers met often
