"""The compiled modules (mypyc, ``scroll_core.native``): in use when built (always under
CI, which builds them with ``make install``), and giving the very scores, hits and sums of
their interpreted sources, which stay the reference and the fallback."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from scroll_core import EventLog, native
from scroll_core.store import fts_query, linear_rank
from scroll_core.store.search import SearchFilters, _read_pool, _term_rarity
from scroll_core.store.sqlite_search import SQLITE
from scroll_core.store.term_match import TermMatcher
from tests.test_search_linear_rank import FILTERS, TUNINGS, queries, seeded

ROOT = Path(__file__).resolve().parent.parent

# Run in a subprocess, the log's path and the tunings' names as arguments: every search's
# hits and every pool's linear scores, floats as hex (exact), as JSON on stdout.
SCORES = """
import json, sys
from scroll_core import EventLog, native
from tests.test_native import scores
print(json.dumps({"compiled": native.in_use(), "scores": scores(sys.argv[1], sys.argv[2:])}))
"""


def scores(path: str, tunings: list[str]) -> dict[str, list]:
    """Per tuning: the hits of every query under every filter, and the linear ranker's
    scores of every pool read, with floats as ``float.hex``."""
    out: dict[str, list] = {}
    with EventLog(path) as log:
        db = log._reader()
        for name in tunings:
            tuning = log.search_tuning = TUNINGS[name]
            found: list = []
            for options in FILTERS:
                for query in [*queries(n=25), *_bench_queries()]:
                    hits = log.search(query, k=10, **options)
                    found.append([[h.seq, h.score.hex(), h.snippet, h.matched] for h in hits])
                    terms = fts_query.query_terms(query)
                    rows, base = _read_pool(db, terms, 10, SearchFilters(**options), tuning, SQLITE)
                    if base:
                        rarity = _term_rarity(db, terms, SearchFilters(), tuning, SQLITE, None)
                        ranked = linear_rank.linear_scores(
                            rows, base, terms, tuning, rarity, tuning.ranker_weights,
                            TermMatcher(terms),
                        )  # fmt: skip
                        found.append(sorted([seq, score.hex()] for seq, score in ranked.items()))
            out[name] = found
    return out


def _bench_queries() -> list[str]:
    rng = random.Random(3)
    return [" ".join(rng.choices(_VOCAB, k=rng.randint(1, 5))) for _ in range(20)]


_VOCAB = [f"w{i:03d}{'x' * (i % 7)}" for i in range(60)]


def _bench_like(log: EventLog) -> None:
    """Long turns of a generated vocabulary over many sessions, as bench/eventlog.py writes:
    the shape of the figures this compilation is for (bounded searches, long turns)."""
    rng = random.Random(11)
    log.append_many(
        [
            {
                "session_id": f"b{i // 40}",
                "kind": "context_msg",
                "role": "user",
                "content": " ".join(rng.choices(_VOCAB, k=rng.randint(20, 60))),
                "headline": "w001 w002" if i % 17 == 0 else None,
            }
            for i in range(600)
        ]
    )


@pytest.mark.skipif(os.environ.get("CI") != "true", reason="CI builds them; here maybe not")
def test_ci_runs_the_compiled_modules():
    assert os.environ.get(native.PURE_ENV) != "1"
    assert native.stale() == [], "compiled modules are stale or absent: run `make install`"
    assert all(native.in_use().values()), native.in_use()


def test_compiled_and_interpreted_give_the_same_scores_to_the_last_bit(tmp_path):
    if not all(native.in_use().values()):
        pytest.skip("the modules are not built here (CI builds them)")
    path = tmp_path / "eventlog.sqlite3"
    with EventLog(path) as log:
        seeded(log)
        _bench_like(log)
    tunings = ["shipped", "log_rarity", "three_neighbours", "every_feature", "unbounded"]
    env = {**os.environ, native.PURE_ENV: "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", SCORES, str(path), *tunings],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    interpreted = json.loads(done.stdout)
    assert not any(interpreted["compiled"].values())
    compiled = scores(str(path), tunings)
    assert sum(len(found) for found in compiled.values()) > 1000
    for name in tunings:
        assert compiled[name] == interpreted["scores"][name], name


def test_the_pure_switch_imports_every_source():
    env = {**os.environ, native.PURE_ENV: "1", "PYTHONPATH": str(ROOT)}
    code = "import json; from scroll_core import native; print(json.dumps(native.in_use()))"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout) == dict.fromkeys(native.COMPILED, False)


def test_a_source_edited_since_the_build_is_stale(tmp_path, monkeypatch):
    import hashlib

    record = tmp_path / "native_build.json"
    hashes = {
        name: hashlib.sha256(native._source(name).read_bytes()).hexdigest()
        for name in native.COMPILED
    }
    record.write_text(json.dumps(hashes))
    monkeypatch.setattr(native, "_RECORD", record)
    assert native.stale() == []
    record.write_text(json.dumps({**hashes, native.COMPILED[1]: "0" * 64}))
    assert native.stale() == [native.COMPILED[1]]
    record.unlink()
    assert native.stale() == list(native.COMPILED)


def test_a_checkout_imported_under_another_name_runs_its_sources():
    # bench/eventlog_ab.py imports a second checkout as ``scroll_core_base``: its modules
    # must be its own sources, never the extensions built for ``scroll_core``.
    code = (
        "import sys; sys.path.insert(0, 'bench'); from eventlog_ab import load_base; "
        "from pathlib import Path; base = load_base(Path('.')); "
        "from scroll_core_base import native, token_pieces, token_sums; "
        "from scroll_core_base.store import ingest_rows, linear_rank, search_bounds, term_match; "
        "assert token_pieces.word_sums is token_sums.word_sums; "
        "print(' '.join(sys.modules[n.replace('scroll_core', 'scroll_core_base', 1)].__file__ "
        "for n in native.COMPILED))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    files = done.stdout.split()
    assert len(files) == len(native.COMPILED) == 5, files
    assert all(f.endswith(".py") for f in files), files


# The append path's compiled loops (``token_sums``, ``ingest_rows``) on seeded inputs, run in
# a subprocess from source: their answers as JSON on stdout.
INGEST = """
import json
from scroll_core import native
from tests.test_native import ingest_answers
print(json.dumps({"compiled": native.in_use(), "answers": ingest_answers()}))
"""


def ingest_answers() -> list:
    """The append loops' answers on seeded texts and rows: ``token_sums``' word sums from
    tables that miss some words, and ``ingest_rows``' JSON check on rows with odd values
    and widths."""
    from scroll_core.store.ingest_rows import exact_json_values
    from scroll_core.token_sums import word_sums

    rng = random.Random(36)
    words = [*_VOCAB, "", "it's", "a,b"]
    first = {w: rng.randint(0, 3) for w in words[::2] if w}
    spaced = {w: rng.randint(0, 3) for w in words[1::3] if w}
    texts = [" ".join(rng.choices(words, k=rng.randint(0, 12))) for _ in range(500)]
    odd = ["s", None, 0, -1, True, 1.5, b"b", 2**63, -(2**63), 2**64, "", ["x"]]
    rows = []
    for _ in range(500):
        width = rng.choice([17, 17, 17, 16, 18])
        rows.append([tuple(rng.choice(odd) for _ in range(width)) for _ in range(3)])
    checks = [exact_json_values(batch, 17) for batch in rows]
    checks += [exact_json_values([("s",) * 16 + (n,)] * 2, 17) for n in (1, 2**63 - 1, 2**63)]
    return [word_sums(texts, first, spaced), checks]


def test_the_ingest_loops_compiled_and_interpreted_agree():
    if not all(native.in_use().values()):
        pytest.skip("the modules are not built here (CI builds them)")
    env = {**os.environ, native.PURE_ENV: "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", INGEST], env=env, cwd=ROOT, capture_output=True, text=True,
        timeout=120, check=True,
    )  # fmt: skip
    interpreted = json.loads(done.stdout)
    assert not any(interpreted["compiled"].values())
    compiled = ingest_answers()
    assert compiled == interpreted["answers"]
    sums, checks = compiled
    assert -1 in sums and any(n > 0 for n in sums)
    assert True in checks and False in checks
