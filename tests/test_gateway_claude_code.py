"""A real Claude Code through the gateway: the CLI (npm's ``@anthropic-ai/claude-code``, which
``.ci/run`` installs under ``.agents/``) in print mode, pointed at the gateway by the two
environment variables the README gives, its upstream the scripted one in either format.
Claude Code, not our reading of the Messages API, decides whether such an agent can route
through Scroll: the CLI of late 2026 sends a ``system``-role message inside ``messages``
(its environment section), which the gateway refused with a 400 until it read that role.

Its compaction (``/compact``, and auto-compact, whose threshold its own
``CLAUDE_AUTOCOMPACT_PCT_OVERRIDE`` lowers here) is the client's own: it asks the model for a
summary, then starts over from it. The gateway records that as
a rewrite, and one whose new history carries the summary it gave as a client compaction,
which the session page links to the seqs it replaced; what the summary dropped is recalled.

Nothing leaves loopback: the CLI's non-essential traffic (telemetry, update checks) is
switched off, its home is a temporary folder, and every model call goes to the gateway."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from django.urls import reverse
from gateway_clients import agent_cli, logged_messages, make_key
from gateway_upstream import (
    HEADLINE,
    Reply,
    a_message,
    a_text,
    a_tool_use,
    completion,
    text,
    tool_call,
)

from scroll_core.prompts import RECALL_TOOL
from scroll_core.store import EventLog

# What this checks is the real CLI's wire protocol through the gateway, which the console's
# database and channel layer cannot change: it runs on the embedded pass only
# (tests/conftest.py, same_on_every_backend); the gateway on PostgreSQL and Redis is the
# other gateway tests'.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.same_on_every_backend]


def _run(
    gateway: str, key: str, home: Path, *args: str, session: str = "", **settings: str
) -> dict:
    env = {
        **settings,
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": gateway,
        "ANTHROPIC_API_KEY": key,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    if session:  # the README's session name that survives /compact
        env["ANTHROPIC_CUSTOM_HEADERS"] = f"X-Scroll-Session: {session}"
    done = subprocess.run(
        [agent_cli("claude", "@anthropic-ai/claude-code"), "-p", *args, "--output-format", "json"],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    return json.loads(done.stdout)


def _session(console_log: EventLog) -> str:
    sessions = [s.session_id for s in console_log.sessions() if s.session_id.startswith("gw:")]
    assert len(sessions) == 1, sessions
    return sessions[0]


def _key(upstream) -> str:
    return make_key(
        upstream,
        agent="claude-code",
        upstream_format="anthropic",
        upstream_base_url=upstream.root,
        model_map={"*": "claude-upstream"},
    )


def test_claude_code_reads_a_file_through_the_gateway_and_continues(
    gateway, upstream, console_log, tmp_path
):
    notes = tmp_path / "notes.txt"
    notes.write_text("The deploy window is Thursday 14:00.\n")
    upstream.then(
        a_message(
            [
                {"type": "text", "text": f"Reading the notes.\n{HEADLINE}"},
                a_tool_use("Read", {"file_path": str(notes)}, "toolu_1"),
            ]
        ),
        a_text("The deploy window is Thursday at 14:00."),
        a_text("You asked when the deploy window is."),
    )
    key = _key(upstream)

    first = _run(gateway, key, tmp_path, "When is the deploy window? See notes.txt.",
                 "--allowedTools", "Read")  # fmt: skip
    assert first["is_error"] is False and first["result"].startswith(
        "The deploy window is Thursday at 14:00."
    )
    # The CLI ran the tool itself and sent its result back: the upstream's second request
    # ends in that tool_result, holding the file's text.
    assert upstream.paths[:2] == ["/v1/messages", "/v1/messages"]
    last_turn = upstream.requests[1]["messages"][-1]
    results = [b for b in last_turn["content"] if b.get("type") == "tool_result"]
    assert results and results[0]["tool_use_id"] == "toolu_1"
    assert "Thursday 14:00" in json.dumps(results[0]["content"])
    # Its environment section, a system-role message in ``messages``, reached the upstream
    # folded into a user turn (the role the Messages API has always taken).
    sent = json.dumps(upstream.requests[0]["messages"])
    assert "[system] # Environment" in sent
    session = _session(console_log)
    logged = logged_messages(console_log, session)
    assert [role for role, _ in logged].count("tool") == 1
    first_logged = logged

    # --continue resends the whole conversation with a new prompt: the log appends only the
    # new prompt and the reply, rewriting nothing.
    again = _run(gateway, key, tmp_path, "What did I ask?", "--continue")
    assert again["result"].startswith("You asked when the deploy window is.")
    assert _session(console_log) == session
    logged = logged_messages(console_log, session)
    assert logged[: len(first_logged)] == first_logged
    added = logged[len(first_logged) :]
    assert [role for role, _ in added][-1] == "assistant"
    assert any(role == "user" and "What did I ask?" in text for role, text in added)
    assert not any("Thursday 14:00" in text for _, text in added)  # the file was not resent
    asked = [text for role, text in logged if role == "user" and "deploy window?" in text]
    assert len(asked) == 1


def test_claude_code_through_an_openai_format_upstream(gateway, upstream, console_log, tmp_path):
    """Claude Code in front of a Chat Completions server (vLLM, Ollama, ...): its Read call
    and result travel as an OpenAI tool call and tool message, and its environment section
    as a tagged user message, which chat templates that take a system message only first
    accept."""
    notes = tmp_path / "notes.txt"
    notes.write_text("The deploy window is Thursday 14:00.\n")
    upstream.then(
        completion(
            f"Reading the notes.\n{HEADLINE}",
            [tool_call("Read", {"file_path": str(notes)}, "call_1")],
        ),
        text("The deploy window is Thursday at 14:00."),
    )
    key = make_key(upstream, agent="claude-code", model_map={"*": "upstream-model"})

    done = _run(gateway, key, tmp_path, "When is the deploy window? See notes.txt.",
                "--allowedTools", "Read")  # fmt: skip
    assert done["result"].startswith("The deploy window is Thursday at 14:00.")
    assert upstream.paths[:2] == ["/v1/chat/completions"] * 2
    sent = upstream.requests[1]["messages"]
    assert [m["role"] for m in sent].count("system") == 1 and sent[0]["role"] == "system"
    assert any(m["role"] == "user" and "[system] # Environment" in m["content"] for m in sent)
    call, result = sent[-2], sent[-1]
    assert call["tool_calls"][0]["function"]["name"] == "Read"
    assert result["role"] == "tool" and result["tool_call_id"] == "call_1"
    assert "Thursday 14:00" in result["content"]
    assert [role for role, _ in logged_messages(console_log, _session(console_log))].count(
        "tool"
    ) == 1


def test_claude_code_compacts_and_a_recall_finds_what_the_summary_dropped(
    gateway, upstream, console_log, tmp_path, admin_client
):
    key = _key(upstream)
    summary = "1. The user greeted the assistant and asked it to keep a code in mind."
    code = "print([ms.expand(h.seq).content[-200:] for h in ms.search('vault code', k=3)])"

    def recalled(body: dict) -> Reply:
        printout = json.dumps(body["messages"][-1])
        assert "4711" in printout, printout
        return a_text("The vault code is 4711.")

    upstream.then(
        a_text("Noted."),
        a_text(f"<analysis>Short chat.</analysis>\n<summary>{summary}</summary>"),
        a_message([a_tool_use(RECALL_TOOL, {"code": code}, "toolu_r")]),
        recalled,
    )
    _run(gateway, key, tmp_path, "Remember: the vault code is 4711.", session="cc")
    _run(gateway, key, tmp_path, "--continue", "/compact", session="cc")
    calls = len(upstream.requests)
    done = _run(gateway, key, tmp_path, "--continue", "What is the vault code?", session="cc")
    assert done["result"].endswith("The vault code is 4711.")
    # The client's compaction: the summary, not the history, went up with the question.
    sent = json.dumps(upstream.requests[calls]["messages"])
    assert summary in sent and "4711" not in sent
    events = console_log.session_events("gw:claude-code:cc", limit=None)
    [marker] = [e for e in events if e.metadata.get("gw") == "rewrite"]
    assert marker.metadata["compaction"] == "client"
    said = next(e for e in events if e.seq == marker.metadata["summary"])
    assert said.role == "assistant" and summary in said.content
    lo, hi = marker.metadata["dropped"]
    assert any(lo <= e.seq <= hi and "4711" in e.content for e in events)
    page = admin_client.get(reverse("session", args=["gw:claude-code:cc"])).content.decode()
    assert f'data-replaced="{lo}-{hi}" data-summary="{said.seq}"' in page


def test_claude_code_auto_compacts_and_a_recall_finds_what_the_summary_dropped(
    gateway, upstream, console_log, tmp_path
):
    """Auto-compact, its threshold lowered by Claude Code's own setting: the usage the first
    reply reports is past it, so the next prompt first gets a summary, then goes up with it."""
    key = _key(upstream)
    summary = "1. The user greeted the assistant and asked it to keep a code in mind."
    code = "print([ms.expand(h.seq).content[-200:] for h in ms.search('vault code', k=3)])"

    def recalled(body: dict) -> Reply:
        printout = json.dumps(body["messages"][-1])
        assert "4711" in printout, printout
        return a_text("The vault code is 4711.")

    upstream.then(
        a_text("Noted."),
        a_text("It is sunny.", prompt=20000),  # past 1% of the window: Claude Code compacts next
        a_text(f"<analysis>Short chat.</analysis>\n<summary>{summary}</summary>"),
        a_message([a_tool_use(RECALL_TOOL, {"code": code}, "toolu_r")]),
        recalled,
    )
    low = {"CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "1"}  # of its model's window (1M tokens)
    _run(gateway, key, tmp_path, "Remember: the vault code is 4711.", session="cc", **low)
    _run(gateway, key, tmp_path, "--continue", "How is the weather?", session="cc", **low)
    calls = len(upstream.requests)
    done = _run(gateway, key, tmp_path, "--continue", "What is the vault code?", session="cc",
                **low)  # fmt: skip
    assert done["result"].endswith("The vault code is 4711.")
    # Claude Code compacted on its own before the question: it asked for the summary, then
    # sent the question with the summary in place of the first exchange.
    assert "<summary>" in json.dumps(upstream.requests[calls]["messages"][-1])
    sent = json.dumps(upstream.requests[calls + 1]["messages"])
    assert summary in sent and "What is the vault code?" in sent and "4711" not in sent
    events = console_log.session_events("gw:claude-code:cc", limit=None)
    [marker] = [e for e in events if e.metadata.get("gw") == "rewrite"]
    assert marker.metadata["compaction"] == "client"
    said = next(e for e in events if e.seq == marker.metadata["summary"])
    assert said.role == "assistant" and summary in said.content
    lo, hi = marker.metadata["dropped"]
    assert any(lo <= e.seq <= hi and "4711" in e.content for e in events)
