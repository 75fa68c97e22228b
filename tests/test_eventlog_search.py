from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scroll_core import InvalidEvent


@pytest.fixture
def log(store):
    """Every search test runs on SQLite and on PostgreSQL."""
    return store


@pytest.fixture
def notes(log):
    rows = [
        ("s1", "context_msg", "Alice went hiking in the Dolomites last June", "2023-06-10"),
        ("s1", "model_turn", "Bob adopted a beagle named Pixel", "2023-07-01"),
        ("s1", "tool_result", "deploy of payments-api failed with exit code 137", "2023-07-02"),
        ("s2", "context_msg", "Alice painted a sunrise over the lake", "2023-08-15"),
        ("s2", "context_msg", "Carol moved to Lisbon for a new job", "2023-09-01"),
    ]
    seqs = [
        log.append(
            session_id=s, kind=k, content=c, created_at=d, agent_id="a" if s == "s1" else "b"
        )
        for s, k, c, d in rows
    ]
    return log, seqs


def test_it_finds_terms_with_bm25_and_reports_seq_and_snippet(notes):
    log, seqs = notes
    hits = log.search("beagle")
    assert hits[0].seq == seqs[1]
    assert hits[0].matched
    assert "[beagle]" in hits[0].snippet
    assert hits[0].score > 0
    assert hits[0].session_id == "s1"
    assert hits[0].created_at.startswith("2023-07-01")


def matched(hits):
    return {h.seq for h in hits if h.matched}


def test_it_ors_terms_so_one_matching_word_is_enough(notes):
    log, seqs = notes
    assert matched(log.search("beagle Lisbon")) == {seqs[1], seqs[4]}


def test_turns_beside_a_match_rank_after_it_as_context(log):
    question = log.append(
        session_id="s", kind="context_msg", content="Which city hosted the summit?"
    )
    reply = log.append(session_id="s", kind="context_msg", content="It was Geneva, in March.")
    log.append(session_id="other", kind="context_msg", content="unrelated words here")
    hits = log.search("summit city")
    assert [h.seq for h in hits] == [question, reply]
    assert [h.matched for h in hits] == [True, False]
    assert hits[1].score < hits[0].score


def test_neighbours_come_only_from_the_same_session(log):
    log.append(session_id="a", kind="context_msg", content="zebra crossing")
    log.append(session_id="b", kind="context_msg", content="next door but another session")
    assert [h.session_id for h in log.search("zebra")] == ["a"]


def test_neighbours_respect_the_filters(log):
    first = log.append(session_id="s", kind="context_msg", content="quokka sighting")
    log.append(session_id="s", kind="tool_result", content="a tool output nearby")
    assert [h.seq for h in log.search("quokka", kind="context_msg")] == [first]


def test_it_stems_words(notes):
    log, seqs = notes
    assert seqs[0] in [h.seq for h in log.search("hike")]


def test_stop_words_do_not_match_every_row(notes):
    log, seqs = notes
    hits = log.search("What did Alice do in the summer?")
    assert matched(hits) == {seqs[0], seqs[3]}


def test_a_query_of_only_stop_words_still_searches_them(log):
    seq = log.append(session_id="s", kind="context_msg", content="to be or not to be")
    assert matched(log.search("not")) == {seq}


def test_ties_go_to_the_older_event(log):
    seqs = [
        log.append(session_id=f"s{i}", kind="context_msg", content="same words here")
        for i in range(4)
    ]
    assert [h.seq for h in log.search("words")] == seqs


def test_more_matching_terms_rank_higher(notes):
    log, seqs = notes
    hits = log.search("Alice Dolomites hiking")
    assert hits[0].seq == seqs[0]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"session_id": "s2"}, [3]),
        ({"agent_id": "a"}, [0]),
        ({"kind": "context_msg"}, [0, 3]),
        ({"kind": ["model_turn", "tool_result"]}, []),
        ({"since": "2023-08-15"}, [3]),
        ({"until": "2023-08-15"}, [0]),
        ({"since": "2023-06-10", "until": "2023-06-11"}, [0]),
    ],
)
def test_filters_narrow_the_hits(notes, kwargs, expected):
    log, seqs = notes
    assert sorted(matched(log.search("Alice", **kwargs))) == [seqs[i] for i in expected]


def test_date_bounds_are_half_open(notes):
    log, seqs = notes
    assert matched(log.search("beagle", since="2023-07-01T00:00:00Z")) == {seqs[1]}
    assert log.search("beagle", until="2023-07-01T00:00:00Z") == []


def test_an_empty_query_with_a_date_bound_lists_that_range(notes):
    log, seqs = notes
    hits = log.search("", since="2023-07-01", until="2023-09-01")
    assert [h.seq for h in hits] == seqs[1:4]
    assert log.search("") == []
    assert log.search("   ?!  ") == []


def test_headlines_are_searchable(log):
    seq = log.append(
        session_id="s", kind="model_turn", content="done", headline="migrate db | anchors: flyway"
    )
    assert [h.seq for h in log.search("flyway")] == [seq]
    assert log.search("flyway")[0].headline == "migrate db | anchors: flyway"


def test_rows_marked_unsearchable_never_match(log):
    log.append(session_id="s", kind="model_turn", content="ms.search('zeppelin')", searchable=False)
    real = log.append(session_id="s", kind="context_msg", content="the zeppelin landed")
    assert [h.seq for h in log.search("zeppelin")] == [real]


@pytest.mark.parametrize(
    "query",
    [
        '"',
        '"unbalanced',
        "AND",
        "a AND OR NOT b",
        "NEAR(alice bob)",
        "content:alice",
        "headline : x",
        "alice*",
        "^alice",
        "(((",
        "{alice bob}",
        "-alice",
        "+",
        "alice\x00bob",
        "🙂 émoji ünïcode 日本語",
        "'; DROP TABLE events; --",
        "x" * 100_000,
        " ".join(f"w{i}" for i in range(20_000)),
    ],
)
def test_any_string_is_a_valid_query(notes, query):
    log, _ = notes
    assert isinstance(log.search(query), list)


def test_a_hostile_query_still_finds_its_words(notes):
    log, seqs = notes
    assert matched(log.search('beagle" OR content:*')) == {seqs[1]}


def test_an_invalid_date_bound_is_a_clear_error(notes):
    log, _ = notes
    with pytest.raises(InvalidEvent, match="invalid date bound"):
        log.search("alice", since="last tuesday")


def test_k_limits_the_hits(log):
    for i in range(30):
        log.append(session_id="s", kind="context_msg", content=f"note {i} about kiwis")
    assert len(log.search("kiwis", k=7)) == 7
    assert log.search("kiwis", k=0) == []


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(query=st.text())
def test_search_never_raises_on_generated_text(notes, query):
    log, _ = notes
    assert isinstance(log.search(query), list)


def test_the_speaker_filter_keeps_only_what_that_name_said(log):
    ann = log.append(session_id="s", kind="context_msg", name="Ann", content="my dog Rex")
    log.append(session_id="s", kind="context_msg", name="Ben", content="my dog is Rex too")
    also = log.append(session_id="t", kind="context_msg", name="Ann", content="Rex barked")
    assert sorted(h.seq for h in log.search("Rex", speaker="Ann")) == [ann, also]
    assert log.search("Rex", speaker=[]) == []
