"""Issue 31, finding 4: an agent's search scores depend on its own events only.

BM25's statistics (documents, average length, documents holding each term) were counted over
the whole log, so the score of an agent's own event for "kerberos ansible" moved with the
number of other agents' events holding "kerberos": an agent could confirm a guessed word in
another agent's memory. Here another agent's content is added, changed (new events that
say otherwise) and grown, and the agent's scores, ranking and features must stay identical
to the last digit, through ``log.search`` and through ``ms.search``'s scoped reader, on both
backends.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scroll_core import SearchTuning
from scroll_core.store.search import SearchFilters, search_features
from scroll_core.store.sqlite_bm25 import doc_length, doc_lengths, query_tokens, scoped_bm25
from scroll_core.store.sqlite_search import SQLITE

ME, OTHER = "alice", "mallory"
QUERY = "kerberos ansible"
OWN = (
    "the kerberos ticket for the ansible run expired",
    "ansible inventory lists three hosts",
    "rotate the kerberos keytab on friday",
    "lunch was soup",
    "ansible ansible ansible playbook for kerberos realms",
)


def _add(log, agent, texts, session):
    return [
        log.append(
            session_id=session,
            agent_id=agent,
            kind="chat_turn",
            role="user",
            name=agent,
            content=text,
            created_at=f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
        )
        for i, text in enumerate(texts)
    ]


def _dialect(log):
    if log.backend == "postgres":
        from scroll_core.store.pg_search import PG_DIALECT

        return PG_DIALECT
    return SQLITE


def _seen(log, tuning):
    """What the agent can observe of its own memory: hits (seq, score) through the log and
    through a scoped reader, and the ranker's features."""
    log.search_tuning = tuning
    by_log = [(h.seq, h.score) for h in log.search(QUERY, 10, agent_id=ME)]
    reader = _scoped_reader(log)
    try:
        scoped = [(h.seq, h.score, h.snippet) for h in reader.search(QUERY, 10)]
    finally:
        reader.close()
    features = search_features(
        log._reader(), QUERY, 10, SearchFilters(agent_id=ME), tuning, _dialect(log), log.term_stats
    )
    return by_log, scoped, features


def _scoped_reader(log):
    """``ms``'s reader on the log's backend, for the one agent."""
    if log.backend == "postgres":
        from scroll_core.store.pg_scoped import PgScopedReader

        return PgScopedReader(log, [ME])
    from scroll_core.store.sqlite_scoped import ScopedReader

    return ScopedReader(log, [ME])


TUNINGS = {
    "shipped": SearchTuning(),
    "log_rarity": SearchTuning(term_rarity="log"),
    "trees": SearchTuning(ranker_trees="shipped"),
    "hand": replace(SearchTuning(), ranker_weights=()),
}


@pytest.mark.parametrize("tuning", sorted(TUNINGS))
def test_other_agents_content_never_moves_an_agents_scores(store, tuning):
    log = store
    _add(log, ME, OWN, "mine")
    before = _seen(log, TUNINGS[tuning])
    assert before[0], "the agent's own events match"
    # One other event with the guessed word, then a hundred, then the other agent "changes"
    # its mind (the log is append-only: new events that say otherwise, with longer text).
    _add(log, OTHER, ["kerberos"], "theirs")
    assert _seen(log, TUNINGS[tuning]) == before
    _add(log, OTHER, [f"kerberos note {i}" for i in range(100)], "theirs-2")
    assert _seen(log, TUNINGS[tuning]) == before
    _add(log, OTHER, ["no kerberos after all " + "padding " * 200, "ansible " * 50], "theirs-3")
    assert _seen(log, TUNINGS[tuning]) == before


def test_a_search_naming_several_agents_counts_each_of_them(store):
    log = store
    _add(log, ME, OWN, "mine")
    _add(log, OTHER, ["kerberos everywhere", "kerberos again"], "theirs")
    alone = [(h.seq, h.score) for h in log.search(QUERY, 10, agent_id=ME)]
    both = [(h.seq, h.score) for h in log.search(QUERY, 10, agent_id=[ME, OTHER])]
    # Two more documents hold "kerberos" in the pair's statistics: it is rarer alone.
    mine = dict(both)
    assert {seq for seq, _ in alone} <= set(mine)
    first = alone[0][0]
    assert mine[first] != dict(alone)[first]
    # And the pair's scores equal the whole log's when the pair is the whole log.
    assert both == [(h.seq, h.score) for h in log.search(QUERY, 10, agent_id=[OTHER, ME, ME])]


def test_scoped_bm25_equals_fts5s_own_on_a_log_of_one_agent(tmp_path):
    """With one agent, its statistics are the whole index's: the scoped ranking is FTS5's
    ``bm25()``, to the last digit with the shipped column weights (powers of two, so a
    frequency summed per column equals FTS5's sum one occurrence at a time), and within
    rounding with any others. A term FTS5 splits into a phrase (U+19B0 is a letter to
    Python, a separator to unicode61) takes the offset-by-offset path and agrees too."""
    from scroll_core import EventLog

    with EventLog(tmp_path / "one.sqlite3") as log:
        _add(log, ME, (*OWN, "met a\u19b0b at the kerberos desk, a b a\u19b0b"), "mine")
        log.append(
            session_id="mine", agent_id=ME, kind="chat_turn", content="Kerberos kérberos",
            headline="ansible and kerberos", name="ops",
        )  # fmt: skip
        db = log._reader()
        queries = (
            ["kerberos", "ansible"],
            ["ansible"],
            ["keytab", "kerberos", "soup"],
            ["a\u19b0b", "kerberos"],
        )
        for weights in ((1.0, 2.0, 0.5), (0.3, 1.7, 0.1)):
            tuning = SearchTuning(rank_weights=weights)
            for terms in queries:
                # The SQL ranking itself (a search of a one-agent log is handed to FTS5
                # on the strength of this equality, ``sqlite_search._scoped``).
                scoped = scoped_bm25(db, terms, 10, SearchFilters(agent_id=ME), tuning)
                whole = SQLITE.candidates(db, terms, 10, SearchFilters(), tuning)
                assert SQLITE.candidates(db, terms, 10, SearchFilters(agent_id=ME), tuning) == (
                    scoped
                )
                assert scoped, terms
                assert list(scoped) == list(whole)
                if weights == (1.0, 2.0, 0.5):
                    assert list(scoped.values()) == list(whole.values())
                else:
                    assert list(scoped.values()) == pytest.approx(list(whole.values()), rel=1e-12)


def test_query_tokens_are_fts5s_and_doc_length_reads_its_varints():
    assert query_tokens("hiking") == ("hike",)
    assert query_tokens("Kérberos") == ("kerbero",)
    assert query_tokens("") == ()
    assert doc_length(None) == 0
    assert doc_length(bytes([5, 0, 1])) == 6
    assert doc_length(bytes([0x81, 0x00, 2])) == 130
    # Summed over many: the one-byte sizes joined, or each alone once one is not.
    one_byte = [bytes([5, 0, 1]), bytes([127, 3, 0])]
    assert doc_lengths(one_byte) == 6 + 130
    assert doc_lengths([*one_byte, bytes([0x81, 0x00, 2])]) == 6 + 130 + 130
    assert doc_lengths([*one_byte, None]) == 136
    assert doc_lengths([]) == 0


def test_an_existing_sqlite_log_is_upgraded_and_ranks_per_agent(tmp_path):
    """A log made before ``m003_fts_instances`` opens, migrates, and then ranks per agent."""
    import sqlite3

    from scroll_core import EventLog
    from scroll_core.store import sqlite_schema

    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path, isolation_level=None)
    saved = sqlite_schema.MIGRATIONS[:]
    try:
        sqlite_schema.MIGRATIONS[:] = saved[:2]
        sqlite_schema.migrate(db)
    finally:
        sqlite_schema.MIGRATIONS[:] = saved
    for text in OWN:
        db.execute(
            "INSERT INTO events (session_id, agent_id, kind, content, created_at, tokens) "
            "VALUES ('old', ?, 'chat_turn', ?, '2026-01-01T00:00:00Z', 3)",
            (ME, text),
        )
    db.close()
    with EventLog(path) as log:
        assert log.fts_check() == len(OWN)
        before = [(h.seq, h.score) for h in log.search(QUERY, 5, agent_id=ME)]
        assert {1, 2, 3, 5} <= {seq for seq, _ in before}
        _add(log, OTHER, ["kerberos"] * 3, "theirs")
        assert [(h.seq, h.score) for h in log.search(QUERY, 5, agent_id=ME)] == before


def test_sqlite_agent_totals_follow_the_appends_and_refuse_tampering(tmp_path):
    """``events_fts_agent_totals`` (SQLite) counts each agent's indexed events and tokens in
    the appending transaction: a batch of two agents with a repeated dedup key and an
    unsearchable event, and events a plain INSERT added (no totals kept) are all counted
    as a recount of the index counts them; direct writes to the totals are refused."""
    import sqlite3

    from scroll_core import EventLog
    from scroll_core.store.sqlite_bm25 import TOTALS, agent_totals, totals_problems

    path = tmp_path / "totals.sqlite3"
    with EventLog(path) as log:
        batch = [
            {"session_id": "a", "agent_id": ME, "kind": "chat_turn", "content": "one two three"},
            {"session_id": "b", "agent_id": OTHER, "kind": "chat_turn", "content": "four five"},
            {"session_id": "a", "agent_id": ME, "kind": "note", "content": "x y", "dedup_key": "k"},
            {"session_id": "a", "agent_id": ME, "kind": "note", "content": "x y", "dedup_key": "k"},
            {
                "session_id": "a", "agent_id": ME, "kind": "chat_turn", "content": "hidden words",
                "searchable": False,
            },
        ]  # fmt: skip
        log.append_many(batch)
        log.append_many(batch)  # every row a repeat or new but identical
        db = log._reader()
        assert agent_totals(db, [ME]) == (3, 8)
        assert agent_totals(db, [OTHER]) == (2, 4)
        assert agent_totals(db, [ME, OTHER, ME]) == (5, 12)
        before = [(h.seq, h.score) for h in log.search("two five", 5, agent_id=ME)]
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute(
        "INSERT INTO events (session_id, agent_id, kind, content, created_at, tokens) "
        "VALUES ('c', ?, 'chat_turn', 'six seven eight', '2026-01-01T00:00:00Z', 3)",
        (OTHER,),
    )
    for sql in (
        f"UPDATE {TOTALS} SET tokens = tokens + 1",
        f"UPDATE {TOTALS} SET docs = docs + 1, last_seq = (SELECT max(seq) FROM events)",
        f"DELETE FROM {TOTALS}",
        f"INSERT INTO {TOTALS} VALUES ('forged', 1, 0, (SELECT max(seq) FROM events))",
        f"INSERT OR REPLACE INTO {TOTALS} VALUES (?, 0, 0, (SELECT max(seq) FROM events))",
    ):
        with pytest.raises(sqlite3.IntegrityError, match="only follows appended events"):
            raw.execute(sql, (ME,) if "?" in sql else ())
    raw.close()
    with EventLog(path) as log:
        db = log._reader()
        assert agent_totals(db, [OTHER]) == (3, 7)  # counted forward past its row
        assert totals_problems(db) == 0
        assert log.fts_check() == 6
        assert [(h.seq, h.score) for h in log.search("two five", 5, agent_id=ME)] == before
        log.append(session_id="c", agent_id=OTHER, kind="chat_turn", content="nine")
        assert agent_totals(db, [OTHER]) == (4, 8)
        assert db.execute(
            f"SELECT docs, tokens FROM {TOTALS} WHERE agent_id = ?", (OTHER,)
        ).fetchone() == (4, 8)


def test_an_existing_postgres_log_is_upgraded_and_ranks_per_agent(postgres_server):
    """A PostgreSQL log made before ``m004_fts_agent_stats`` migrates: the per-agent tables
    are filled from its index (``fts_check`` agrees), the whole-log ones are gone, and its
    searches rank per agent from then on."""
    import psycopg
    from conftest import fresh_pg_database

    from scroll_core.store import pg_schema
    from scroll_core.store.pg_log import PgEventLog

    with fresh_pg_database(postgres_server.url, "template1") as url:
        saved = pg_schema.MIGRATIONS[:]
        try:
            pg_schema.MIGRATIONS[:] = saved[:3]
            with psycopg.connect(url, autocommit=True) as db:
                pg_schema.migrate(db)
                for agent, text in ((ME, "kerberos from before"), (OTHER, "kerberos kerberos")):
                    db.execute(
                        "INSERT INTO events (session_id, agent_id, kind, content, created_at, "
                        "tokens) VALUES (%s, %s, 'chat_turn', %s, '2026-01-01T00:00:00Z', 3)",
                        (f"s-{agent}", agent, text),
                    )
        finally:
            pg_schema.MIGRATIONS[:] = saved
        with PgEventLog(url) as log:
            assert log.fts_check() == 2
            with psycopg.connect(url) as db:
                assert db.execute("SELECT to_regclass('fts_terms')").fetchone() == (None,)
                assert db.execute(
                    "SELECT agent_id, docs, tokens FROM fts_agent_totals ORDER BY agent_id"
                ).fetchall() == [(ME, 1, 3), (OTHER, 1, 2)]
            before = [(h.seq, h.score) for h in log.search("kerberos", 5, agent_id=ME)]
            assert [seq for seq, _ in before] == [1]
            _add(log, OTHER, ["kerberos"] * 3, "theirs")
            assert [(h.seq, h.score) for h in log.search("kerberos", 5, agent_id=ME)] == before
            assert log.fts_check() == 5


WORDS = ("kerberos", "ansible", "keytab", "realm", "soup", "friday", "hosts", "ticket")


@settings(max_examples=12, deadline=None)
@given(
    others=st.lists(
        st.tuples(
            st.sampled_from(("bob", "carol")),
            st.lists(st.sampled_from(WORDS), min_size=1, max_size=40).map(" ".join),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_no_mix_of_other_agents_events_moves_the_agents_ranking(tmp_path_factory, others):
    """Any other agents' events, in any number and length, leave every score of the
    agent's own search as it was (SQLite; the parametrized test above covers PostgreSQL)."""
    from scroll_core import EventLog

    with EventLog(tmp_path_factory.mktemp("mix") / "log.sqlite3") as log:
        _add(log, ME, OWN, "mine")
        before = {
            q: [(h.seq, h.score) for h in log.search(q, 10, agent_id=ME)]
            for q in (QUERY, "keytab friday", "ticket realm hosts")
        }
        for i, (agent, text) in enumerate(others):
            log.append(session_id=f"o{i}", agent_id=agent, kind="chat_turn", content=text)
        for q, hits in before.items():
            assert [(h.seq, h.score) for h in log.search(q, 10, agent_id=ME)] == hits


def test_batch_totals_from_the_index_sizes_match_a_recount(tmp_path, monkeypatch):
    """An append of one agent's batch takes its BM25 totals from what the index's averages
    record gained (``record_totals`` with ``before``); other appends read the events back.
    Either way the totals are a recount's: batches of one agent and of two, unsearchable
    events, repeated dedup keys, events of 128 tokens and more (two-byte sizes), another
    agent's appends in between, and an event put in by a writer that keeps no totals."""
    import random
    import sqlite3

    from scroll_core import EventLog
    from scroll_core.store import sqlite_bm25

    reads: list[str] = []
    forward = sqlite_bm25._forward

    def counted(db, agent, after):  # type: ignore[no-untyped-def]
        reads.append(agent)
        return forward(db, agent, after)

    rng = random.Random(7)
    words = ["alpha", "beta", "gamma", "delta", "épsilon", "zeta"]
    path = tmp_path / "log.sqlite3"
    read_back = []
    with EventLog(path) as log:
        for batch in range(14):
            agents = ["a"] if batch % 3 else ["a", "b"]
            events = [
                {
                    "session_id": f"s{batch % 4}",
                    "kind": "context_msg",
                    "agent_id": rng.choice(agents),
                    "content": " ".join(rng.choices(words, k=rng.choice([3, 40, 300]))),
                    "headline": rng.choice([None, "a headline"]),
                    "searchable": rng.random() < 0.8,
                    "dedup_key": rng.choice([None, f"k{rng.randint(0, 150)}"]),
                }
                for _ in range(rng.choice([10, 70, 130]))
            ]
            reads.clear()
            monkeypatch.setattr(sqlite_bm25, "_forward", counted)
            log.append_many(events)
            monkeypatch.setattr(sqlite_bm25, "_forward", forward)
            read_back.append((len(events), len(set(agents)), bool(reads)))
            if batch == 6:  # a writer that keeps no totals
                raw = sqlite3.connect(path)
                raw.execute(
                    "INSERT INTO events (session_id, agent_id, kind, content, created_at, "
                    "tokens) VALUES ('s9', 'a', 'k', 'gamma delta', '2026-01-01', 2)"
                )
                raw.commit()
                raw.close()
            assert log.fts_check() > 0  # (and no agent's totals differ from a recount)
        db = log._reader()
        sizes = [sz for (sz,) in db.execute("SELECT sz FROM events_fts_docsize")]
        assert sqlite_bm25.index_sizes(db) == (len(sizes), sqlite_bm25.doc_lengths(sizes))
        assert any(size[0] & 0x80 for size in sizes)  # some content of 128 tokens or more
    # Large one-agent batches took the index's sizes; small or two-agent ones read back.
    assert any(n >= 64 and agents == 1 and not read for n, agents, read in read_back)
    assert all(read for n, agents, read in read_back if n < 64 or agents > 1)
