"""The cost bench's recall probes: a fact only one tool result held, whether a request still
holds it, and whether a search over the Event Log finds it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from _agent_session import Session, Step  # noqa: E402
from _recall_probes import held, probes, recalled  # noqa: E402

from scroll_core.store import EventLog  # noqa: E402

UNIQUE = "    return compute_the_frobnication_total(rows)"
SHARED = "    value = shared_helper_function_name(1)"


def _session() -> Session:
    def result(text: str, n: int) -> dict:
        block = {"type": "tool_result", "tool_use_id": f"t{n}", "content": text}
        return {"role": "user", "content": [block]}

    def reply(text: str) -> dict:
        return {"role": "assistant", "content": [{"type": "text", "text": text}]}

    steps = [
        # The only line whose identifier no other message has: the one probe.
        Step([result(f"1\tdef f():\n2\t{UNIQUE}", 0)], reply("Read it."), "h"),
        Step([result(f"3\t{SHARED}", 1)], reply("shared_helper_function_name again"), "h"),
        Step([result("short", 2)], reply("Done."), "h"),
    ]
    return Session("system", [], steps)


def test_a_probe_is_a_line_with_an_identifier_only_one_tool_result_held():
    asked = probes(_session(), 10)
    assert [(p.identifier, p.line) for p in asked] == [
        ("compute_the_frobnication_total", f"2\t{UNIQUE}")  # its line as the tool showed it
    ]
    with pytest.raises(ValueError, match="at least 1"):
        probes(_session(), 0)


def test_held_looks_in_the_system_prompt_and_every_kind_of_block():
    (probe,) = probes(_session(), 10)
    with_result = {"messages": _session().steps[0].new}
    as_text = {"messages": [{"role": "user", "content": f"see: 2\t{UNIQUE}"}]}
    in_system = {"system": [{"type": "text", "text": f"2\t{UNIQUE}"}], "messages": []}
    summary = {"messages": [{"role": "user", "content": "Summary: we read f()."}]}
    assert held(with_result, probe) and held(as_text, probe) and held(in_system, probe)
    assert not held(summary, probe)


def test_recalled_finds_the_line_only_in_the_agents_own_log(tmp_path):
    (probe,) = probes(_session(), 10)
    path = tmp_path / "eventlog.sqlite3"
    log = EventLog(path)
    log.append(session_id="s", kind="tool_result", content=f"2\t{UNIQUE}", agent_id="mine")
    for i in range(5):
        log.append(session_id="s", kind="context_msg", content=f"other {i}", agent_id="mine")
    log.close()
    assert recalled(path, "mine", [probe]) == [True]
    assert recalled(path, "someone-else", [probe]) == [False]
    assert recalled(path, "mine", []) == []
