"""Trajectory lint, the rules over a session's turns: each over sessions recorded by Scroll's own
loop (a scripted model, a real kernel, the Event Log), one that shows the failure and ones
that do not."""

from __future__ import annotations

import pytest
from agent_fakes import ScriptedModel, recall, reply

from scroll_core.agent import Session
from scroll_core.kernel import Kernel, KernelConfig
from scroll_core.lint import lint_session, recorded_turns
from scroll_core.profile import Profile

S = "turns-1"


@pytest.fixture(scope="module")
def kernel():
    with Kernel(KernelConfig(sandbox="process", grace_s=0.5)) as k:
        yield k


def _history(log, rows: list[tuple[str, str]]) -> list[int]:
    """Events of an earlier session of the same agent: (day, text) each."""
    return log.append_many(
        {
            "session_id": "earlier",
            "agent_id": "main",
            "kind": "context_msg",
            "role": "user",
            "name": "Ann",
            "content": text,
            "created_at": f"{day}T10:00:00+00:00",
        }
        for day, text in rows
    )


def _ask(log, kernel, turns: list[tuple[str, list]]) -> list:
    """Ask each question in one session, the model answering from its script."""
    script = [r for _, replies in turns for r in replies]
    model = ScriptedModel(*script, context_size=16_000)
    profile = Profile(context_size=model.context_size)
    with Session(log, model, session_id=S, agent_id="main", kernel=kernel, profile=profile) as a:
        for question, _ in turns:
            assert a.ask(question).ok
    return lint_session(log, S)


def _rule(flags, rule):
    return [f for f in flags if f.rule == rule]


# -- undercounting filter ------------------------------------------------------------------
def _gardens(log) -> list[int]:
    rows = []
    for month in range(1, 9):
        rows.append((f"2023-{month:02d}-05", f"I planted tomatoes in the garden, batch {month}."))
        rows.append((f"2023-{month:02d}-06", f"The weather was mild on our walk {month}."))
    return _history(log, rows)


FILTERED = (
    "hits = ms.search('planted tomatoes garden', k=6, since='2023-05-01', until='2023-06-01')"
)


def test_undercounting_filter_flags_a_date_filter_that_hid_hits_ranking_as_well(log, kernel):
    seqs = _gardens(log)
    flags = _ask(log, kernel, [(
        "When did I plant tomatoes in the garden?",
        [reply("Search.", recall(f"{FILTERED}\nprint([h.seq for h in hits])")),
         reply("In May 2023.")],
    )])  # fmt: skip
    (flag,) = _rule(flags, "undercounting_filter")
    gardens = set(seqs[0::2])
    turn = recorded_turns(log, S)[0]
    cell = turn.cells[0]
    assert flag.cell_seq == cell.call_seq and flag.seqs[:2] == (cell.call_seq, cell.result_seq)
    hidden = set(flag.seqs[2:])
    assert len(hidden) == 5 and hidden <= gardens - {seqs[8]}  # May's is the one it kept
    # May's planting and the day after it (ranked by its neighbour's match)
    assert "returned 2 of the 6 hits asked for; without its date filter" in flag.explanation
    assert "since='2023-05-01'" in flag.explanation


def test_undercounting_filter_leaves_alone_a_turn_that_read_the_rest(log, kernel):
    _gardens(log)
    wider = "more = ms.search('planted tomatoes garden', k=10)"
    flags = _ask(log, kernel, [(
        "When did I plant tomatoes in the garden?",
        [reply("Search.", recall(f"{FILTERED}\n{wider}\nprint(len(hits), len(more))")),
         reply("Every month from January to August 2023.")],
    )])  # fmt: skip
    assert _rule(flags, "undercounting_filter") == []


def test_undercounting_filter_leaves_alone_a_filter_that_hid_nothing_relevant(log, kernel):
    _gardens(log)
    walk = "hits = ms.search('weather walk', k=12, speaker='Ann')"
    flags = _ask(log, kernel, [(
        "What was the weather like on our walks?",
        [reply("Search.", recall(f"{walk}\nprint([h.seq for h in hits])")), reply("Mild.")],
    )])  # fmt: skip
    assert flags == []


# -- no disconfirming query ----------------------------------------------------------------
def _colours(log) -> list[int]:
    return _history(log, [
        ("2023-01-10", "My favourite colour is blue."),
        ("2023-02-11", "We painted the fence on Saturday."),
        ("2023-06-10", "These days my favourite colour is green."),
        ("2023-06-11", "The fence needs another coat."),
    ])  # fmt: skip


def test_no_disconfirming_query_flags_an_answer_from_old_evidence(log, kernel):
    seqs = _colours(log)
    flags = _ask(log, kernel, [(
        "What is my favourite colour?",
        [reply("Read.", recall(f"print(ms.expand({seqs[0]}).content)")), reply("Blue.")],
    )])  # fmt: skip
    (flag,) = flags
    answer = recorded_turns(log, S)[0].answer
    assert flag.rule == "no_disconfirming_query"
    assert flag.cell_seq == answer.seq and flag.seqs == (seqs[0], seqs[2], answer.seq)
    assert f"rests on seq {seqs[0]} (2023-01-10)" in flag.explanation
    assert "no search of the turn looked after 2023-01-10" in flag.explanation


def test_no_disconfirming_query_leaves_alone_a_search_after_the_evidence(log, kernel):
    seqs = _colours(log)
    check = "print([h.content for h in ms.search('favourite colour', since='2023-01-10')])"
    flags = _ask(log, kernel, [(
        "What is my favourite colour?",
        [reply("Read.", recall(f"print(ms.expand({seqs[0]}).content)")),
         reply("Check for later.", recall(check)), reply("Blue.")],
    )])  # fmt: skip
    assert _rule(flags, "no_disconfirming_query") == []


def test_no_disconfirming_query_leaves_alone_a_value_that_never_changed(log, kernel):
    seqs = _history(log, [("2023-01-10", "My favourite colour is blue."),
                          ("2023-06-11", "The fence needs another coat.")])  # fmt: skip
    flags = _ask(log, kernel, [(
        "What is my favourite colour?",
        [reply("Read.", recall(f"print(ms.expand({seqs[0]}).content)")), reply("Blue.")],
    )])  # fmt: skip
    assert flags == []


# -- archive answered ----------------------------------------------------------------------
TRANSLATE = "Translate 'good morning' into French."
PRODUCT = "What is 23 times 41? Reply with the number."


def test_archive_answered_flags_a_reply_to_an_earlier_request(log, kernel):
    flags = _ask(log, kernel, [
        (TRANSLATE, [reply("Bonjour.")]),
        (PRODUCT, [reply("Translate 'good morning' into French: Bonjour!")]),
    ])  # fmt: skip
    (flag,) = flags
    first, second = recorded_turns(log, S)
    assert flag.rule == "archive_answered" and flag.cell_seq == second.answer.seq
    assert flag.seqs == (first.request.seq, second.request.seq, second.answer.seq)
    assert "shares no term with the live request" in flag.explanation
    assert "4 (translate, good, morning, french)" in flag.explanation


def test_archive_answered_leaves_alone_the_live_answer_and_a_bare_follow_up(log, kernel):
    flags = _ask(log, kernel, [
        (TRANSLATE, [reply("Bonjour.")]),
        (PRODUCT, [reply("943")]),
        ("And then?", [reply("Translate 'good morning' into French gives bonjour.")]),
    ])  # fmt: skip
    assert flags == []
