"""Trajectory lint: each rule over sessions recorded by Scroll's own loop (a scripted model,
a real kernel, the Event Log), one that shows the failure and one that does not."""

from __future__ import annotations

import pytest
from agent_fakes import ScriptedModel, recall, repl, reply

from scroll_core.agent import Session
from scroll_core.kernel import Kernel, KernelConfig
from scroll_core.lint import lint_session, recorded_cells
from scroll_core.profile import Profile

S = "lint-1"
TABLE = "rows = [f'row {i:04d} ' + 'x' * 20 for i in range(400)]\nprint(rows)"


@pytest.fixture(scope="module")
def kernel():
    with Kernel(KernelConfig(sandbox="process", grace_s=0.5)) as k:
        yield k


def _run(log, kernel, *replies, history: int = 0):
    if history:
        log.append_many(
            {"session_id": S, "kind": "context_msg", "role": "user", "content": f"note {i}"}
            for i in range(history)
        )
    model = ScriptedModel(*replies)
    profile = Profile(context_size=model.context_size, print_cap=500)
    with Session(log, model, session_id=S, kernel=kernel, profile=profile) as agent:
        result = agent.ask("How many rows are there?")
    assert result.ok
    return lint_session(log, S)


def test_window_refill_flags_the_same_query_run_again_after_the_cap_cut_it(log, kernel):
    flags = _run(
        log, kernel,
        reply("Look.", repl(TABLE, "c1")),
        reply("Again.", repl(TABLE, "c2")),
        reply("400 rows."),
    )  # fmt: skip
    cells = recorded_cells(log, S)
    assert [c.truncated for c in cells] == [True, True]
    (flag,) = [f for f in flags if f.rule == "window_refill"]
    assert flag.cell_seq == cells[1].call_seq
    assert set(flag.seqs) == {cells[0].call_seq, cells[0].result_seq, cells[1].call_seq,
                              cells[1].result_seq}  # fmt: skip
    assert "variables persist" in flag.explanation


def test_window_refill_leaves_alone_a_cell_that_filters_the_variable(log, kernel):
    flags = _run(
        log, kernel,
        reply("Look.", repl(TABLE, "c1")),
        reply("Count.", repl("print(len(rows), rows[:2])", "c2")),
        reply("400 rows."),
    )  # fmt: skip
    assert recorded_cells(log, S)[0].truncated
    assert flags == []


def test_re_reading_flags_a_span_expanded_three_times(log, kernel):
    read = "print([e.content for e in ms.expand(2, 4)])"
    flags = _run(
        log, kernel,
        reply("Read.", recall(read, "r1")),
        reply("Read again.", recall(read, "r2")),
        reply("And again.", recall(read, "r3")),
        reply("Done."),
        history=8,
    )  # fmt: skip
    cells = recorded_cells(log, S)
    (flag,) = flags
    assert flag.rule == "re_reading" and flag.seqs == tuple(c.call_seq for c in cells)
    assert flag.cell_seq == cells[2].call_seq
    assert "seqs 2-4 expanded 3 times" in flag.explanation


def test_re_reading_leaves_alone_different_spans_and_a_second_read(log, kernel):
    flags = _run(
        log, kernel,
        reply("Read.", recall("print([e.seq for e in ms.expand(2, 4)])", "r1")),
        reply("Next.", recall("print([e.seq for e in ms.expand(5, 7)])", "r2")),
        reply("Once more.", recall("print([e.seq for e in ms.expand(2, 4)])", "r3")),
        reply("Done."),
        history=8,
    )  # fmt: skip
    assert flags == []


@pytest.mark.django_db
def test_the_command_prints_each_flag_and_a_count_per_rule(console_log, kernel):
    from io import StringIO

    from django.core.management import CommandError, call_command

    _run(
        console_log, kernel,
        reply("Look.", repl(TABLE, "c1")),
        reply("Again.", repl(TABLE, "c2")),
        reply("400 rows."),
    )  # fmt: skip
    out = StringIO()
    call_command("scroll_lint", S, stdout=out)
    text = out.getvalue()
    assert f"{S} seq " in text and "[window_refill]" in text
    assert text.strip().endswith(
        "1 session(s): window_refill 1, re_reading 0, head_and_tail 0, undercounting_filter 0, "
        "no_disconfirming_query 0, archive_answered 0"
    )
    with pytest.raises(CommandError, match="no such session"):
        call_command("scroll_lint", "nope", stdout=StringIO())


@pytest.mark.django_db
def test_the_session_page_loads_the_flags_with_their_seqs(console_log, kernel, admin_client):
    from django.urls import reverse

    _run(
        console_log, kernel,
        reply("Look.", repl(TABLE, "c1")),
        reply("Again.", repl(TABLE, "c2")),
        reply("400 rows."),
    )  # fmt: skip
    page = admin_client.get(reverse("session", args=[S])).content.decode()
    url = reverse("session_lint", args=[S])
    assert f'hx-get="{url}"' in page and f'href="{url}"' in page
    fragment = admin_client.get(url).content.decode()
    cells = recorded_cells(console_log, S)
    assert 'class="lint-flag rule-window_refill"' in fragment
    assert (
        f'href="{reverse("event", args=[cells[1].call_seq])}">seq {cells[1].call_seq}' in fragment
    )
    assert admin_client.get(reverse("session_lint", args=["nope"])).status_code == 404


def _earlier_session(log, n: int = 40) -> list[int]:
    return log.append_many(
        {"session_id": "earlier", "kind": "context_msg", "role": "user", "content": f"day {i}"}
        for i in range(n)
    )


def test_head_and_tail_flags_a_read_of_only_both_ends_of_a_long_session(log, kernel):
    seqs = _earlier_session(log)
    ends = (
        f"print([e.seq for e in ms.expand({seqs[0]}, {seqs[2]})"
        f" + ms.expand({seqs[-3]}, {seqs[-1]})])"
    )
    flags = _run(log, kernel, reply("Skim.", recall(ends, "r1")), reply("Done."))
    (flag,) = flags
    assert flag.rule == "head_and_tail"
    assert flag.seqs[1:] == (*seqs[:3], *seqs[-3:])
    assert "first 3 and last 3 of the 40 events of session 'earlier'" in flag.explanation


def test_head_and_tail_leaves_alone_a_read_that_reaches_the_middle(log, kernel):
    seqs = _earlier_session(log)
    cell = (
        f"print([e.seq for e in ms.expand({seqs[0]}, {seqs[2]}) + ms.expand({seqs[19]}, {seqs[21]})"
        f" + ms.expand({seqs[-3]}, {seqs[-1]})])"
    )
    assert _run(log, kernel, reply("Read.", recall(cell, "r1")), reply("Done.")) == []
    # A short session is all head and tail: nothing to miss.
    short = _earlier_session(log, 12)
    skim = (
        f"print([e.seq for e in ms.expand({short[0]}, {short[1]})"
        f" + ms.expand({short[-2]}, {short[-1]})])"
    )
    assert _run(log, kernel, reply("Skim.", recall(skim, "r2")), reply("Ok.")) == []
