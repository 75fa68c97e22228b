"""What ``ms.search`` lets a model program narrow by, and what each hit tells it, asked from
inside a real kernel."""

from __future__ import annotations

import pytest

from scroll_core import EventLog
from scroll_core.kernel import Kernel, KernelConfig
from scroll_core.kernel.ms import SEARCH_DOC, MsCapability

# Two sessions of a two-person chat, interleaved in the log so that a session's neighbours
# are not simply seq +/- 1. (seq, session, speaker, day, text)
TURNS = [
    (1, "chat-1", "Ana", "2023-05-01", "I adopted a dog named Rex"),
    (2, "chat-2", "Ana", "2023-06-10", "Rex learned to swim at the lake"),
    (3, "chat-1", "Ben", "2023-05-01", "A dog is great company, what breed is Rex?"),
    (4, "chat-1", "Ana", "2023-05-01", "Rex is a beagle"),
    (5, "chat-2", "Ben", "2023-06-10", "Swimming dogs are the best"),
    (6, "chat-2", "Ana", "2023-06-10", "next week the dog show"),
]


@pytest.fixture(scope="module")
def ms(tmp_path_factory):
    path = tmp_path_factory.mktemp("surface") / "eventlog.sqlite3"
    with EventLog(path) as log:
        for seq, session, speaker, day, text in TURNS:
            got = log.append(
                session_id=session,
                kind="context_msg",
                role="user",
                name=speaker,
                content=text,
                created_at=f"{day}T12:00:{seq:02d}Z",
            )
            assert got == seq
        log.append(
            session_id="chat-2",
            kind="tool_result",
            name="calendar",
            content="dog show on 2023-06-17",
            created_at="2023-06-10T12:01:00Z",
        )
        cap = MsCapability(log, agent_id="main", session_id="chat-2")
        yield cap
        cap.close()


@pytest.fixture(scope="module")
def kernel(ms):
    with Kernel(KernelConfig(sandbox="process"), host_functions=ms.functions()) as k:
        yield k


def run(kernel, code):
    result = kernel.execute(code)
    assert result.status == "ok", (result.error, result.stdout)
    return result.stdout.strip()


def seqs(kernel, call):
    return run(kernel, f"print(sorted(h.seq for h in {call}))")


def test_speaker_filter_keeps_only_that_speakers_turns(kernel):
    assert seqs(kernel, "ms.search('dog Rex', speaker='Ben')") == "[3, 5]"
    assert seqs(kernel, "ms.search('dog Rex', speaker=['Ben', 'calendar'])") == "[3, 5, 7]"
    assert seqs(kernel, "ms.search('dog Rex', speaker='Nobody')") == "[]"


def test_kind_and_session_and_date_range_filters_combine(kernel):
    assert seqs(kernel, "ms.search('dog', kind='tool_result')") == "[7]"
    assert seqs(kernel, "ms.search('Rex dog', session='chat-1', speaker='Ana')") == "[1, 4]"
    # until is exclusive: the May session only.
    assert seqs(kernel, "ms.search('Rex', since='2023-05-01', until='2023-06-10')") == "[1, 3, 4]"
    assert seqs(kernel, "ms.search('Rex', since='2023-06-10')") == "[2]"


def test_hits_carry_session_date_and_the_seqs_of_the_turns_beside_them(kernel):
    out = run(
        kernel,
        "for h in ms.search('beagle', neighbours=1):\n"
        "    print(h.seq, h.session_id, h.date, list(h.neighbours))",
    )
    # Turn 4 is the last of chat-1: its neighbour is 3, not the chat-2 turn at seq 5.
    assert out.splitlines()[0] == "4 chat-1 2023-05-01 [3]"
    out = run(
        kernel, "h = ms.search('swim lake', k=1, neighbours=2)[0]\nprint(h.seq, h.neighbours)"
    )
    assert out == "2 [5, 6]"
    out = run(kernel, "h = ms.search('adopted', k=1, neighbours=2)[0]\nprint(h.seq, h.neighbours)")
    assert out == "1 [3, 4]"
    out = run(kernel, "print(ms.search('adopted', k=1, neighbours=0)[0].neighbours)")
    assert out == "[]"


def test_neighbours_leave_out_the_active_turn(kernel, ms):
    ms.begin_turn(6)
    try:
        out = run(kernel, "h = ms.search('swimming', k=1)[0]\nprint(h.seq, h.neighbours)")
    finally:
        ms.begin_turn(None)
    assert out == "5 [2]"


@pytest.mark.parametrize(
    ("call", "error"),
    [
        ("ms.search('dog', neighbours=9)", "neighbours must be between 0 and 5"),
        ("ms.search('dog', neighbours='1')", "neighbours must be an int"),
        ("ms.search('dog', speaker=5)", "speaker must be a str or a list of str"),
        ("ms.search('dog', kind=['x', 1])", "kind must be a str or a list of str"),
    ],
)
def test_bad_filters_are_a_clear_error(kernel, call, error):
    result = kernel.execute(call)
    assert result.status == "error"
    assert error in str(result.error)


def test_schema_documents_every_filter_and_hit_field(kernel):
    out = run(
        kernel,
        "doc = ms.schema()['search']\n"
        "print(sorted(doc['filters']))\n"
        "print(sorted(doc['hit_fields']))",
    )
    filters, fields = out.splitlines()
    for name in ("session", "kind", "speaker", "since", "until", "on"):
        assert repr(name) in filters
    for name in ("session_id", "date", "neighbours"):
        assert repr(name) in fields
    assert filters == str(sorted(SEARCH_DOC["filters"]))
