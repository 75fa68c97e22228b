"""A real Codex through the gateway: OpenAI's CLI (npm's ``@openai/codex``, which ``.ci/run``
installs under ``.agents/``) in ``codex exec`` mode, its model provider the gateway's
Responses API (``wire_api = "responses"`` in its config), its upstream the scripted Chat
Completions one. Codex runs a shell command with its own ``exec_command`` tool and sends the
output back; ``codex exec resume --last`` resends the whole conversation with a new prompt,
which must land in the same session and append only what is new.

A long session compacts: with its provider named ``OpenAI`` (what makes Codex 0.169.0 ask
the server to compact; any other name makes it summarise on its own, which the gateway
records as a rewrite) and its auto-compact limit lowered, Codex sends its history with a
``compaction_trigger`` item, gets the gateway's compaction item, and continues from it;
the question after it is answered by recalling a fact from before the compaction.

Nothing leaves loopback: the CLI's home is a temporary folder and its only provider is the
gateway. Its command runs outside Codex's own sandbox (``danger-full-access``): that sandbox
needs helper binaries Codex will not make under a temporary folder, and what is tested here
is the gateway, not Codex's sandbox."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from gateway_clients import agent_cli, logged_messages, make_key, run_cli_events
from gateway_upstream import HEADLINE, Reply, completion, text, tool_call

from dashboard.runs.models import TuningProfile
from scroll_core.prompts import RECALL_TOOL
from scroll_core.store import EventLog

# What this checks is the real CLI's wire protocol through the gateway, which the console's
# database and channel layer cannot change: it runs on the embedded pass only
# (tests/conftest.py, same_on_every_backend); the gateway on PostgreSQL and Redis is the
# other gateway tests'.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.same_on_every_backend]

CONFIG = """\
model = "gpt-test"
model_provider = "scroll"

[model_providers.scroll]
name = "Scroll"
base_url = "{gateway}/v1"
env_key = "SCROLL_API_KEY"
wire_api = "responses"
"""


# Remote compaction: Codex takes the server's path for a provider named OpenAI; it compacts
# before a turn once the usage it was told passes this limit.
COMPACTING = """\
model = "gpt-test"
model_provider = "scroll"
model_auto_compact_token_limit = 3000

[model_providers.scroll]
name = "OpenAI"
base_url = "{gateway}/v1"
env_key = "SCROLL_API_KEY"
wire_api = "responses"
"""


def _run(home: Path, work: Path, key: str, *args: str) -> list[dict]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "CODEX_HOME": str(home / ".codex"),
        "SCROLL_API_KEY": key,
    }
    command = [agent_cli("codex", "@openai/codex"), "exec", "--skip-git-repo-check", "--json"]
    return run_cli_events([*command, "--sandbox", "danger-full-access", *args], env, work, 120)


def _said(events: list[dict]) -> list[str]:
    return [
        e["item"]["text"]
        for e in events
        if e.get("type") == "item.completed" and e["item"].get("type") == "agent_message"
    ]


def _session(console_log: EventLog) -> str:
    sessions = [s.session_id for s in console_log.sessions() if s.session_id.startswith("gw:")]
    assert len(sessions) == 1, sessions
    return sessions[0]


def test_codex_runs_a_command_through_the_gateway_and_resumes(
    gateway, upstream, console_log, tmp_path
):
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".codex").mkdir(parents=True)
    work.mkdir()
    (home / ".codex" / "config.toml").write_text(CONFIG.format(gateway=gateway))
    (work / "notes.txt").write_text("The deploy window is Thursday 14:00.\n")
    upstream.then(
        completion(
            f"Reading the notes.\n{HEADLINE}",
            [tool_call("exec_command", {"cmd": "cat notes.txt"}, "call_1")],
        ),
        text("The deploy window is Thursday at 14:00."),
        text("You asked when the deploy window is."),
    )
    key = make_key(upstream, agent="codex", model_map={"*": "upstream-model"})

    first = _run(home, work, key, "When is the deploy window? See notes.txt.")
    assert _said(first)[-1] == "The deploy window is Thursday at 14:00."
    # Codex ran the command itself and sent its output back, through the Responses API and
    # on to the Chat Completions upstream as a tool message answering the call.
    assert upstream.paths[:2] == ["/v1/chat/completions"] * 2
    result = upstream.requests[1]["messages"][-1]
    assert result["role"] == "tool" and result["tool_call_id"] == "call_1"
    assert "Thursday 14:00" in result["content"]
    session = _session(console_log)
    first_logged = logged_messages(console_log, session)
    assert [role for role, _ in first_logged].count("tool") == 1

    again = _run(home, work, key, "resume", "--last", "What did I ask?")
    assert _said(again)[-1] == "You asked when the deploy window is."
    assert _session(console_log) == session
    logged = logged_messages(console_log, session)
    assert logged[: len(first_logged)] == first_logged
    added = logged[len(first_logged) :]
    assert [role for role, _ in added] == ["user", "assistant"]
    assert "What did I ask?" in added[0][1]
    asked = [t for role, t in logged if role == "user" and "deploy window?" in t]
    assert len(asked) == 1


def test_codex_compacts_through_the_gateway_and_recalls_what_came_before(
    gateway, upstream, console_log, tmp_path
):
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".codex").mkdir(parents=True)
    work.mkdir()
    (home / ".codex" / "config.toml").write_text(COMPACTING.format(gateway=gateway))
    (work / "notes.txt").write_text("".join(f"line {i}: nothing to see here\n" for i in range(400)))
    profile = TuningProfile.objects.create(name="codex-compact", context_size=16384)
    key = make_key(upstream, agent="codex", model_map={"*": "upstream-model"}, profile=profile)

    upstream.then(text("Noted."))
    assert _said(_run(home, work, key, "Remember: the vault code is 4711."))[-1] == "Noted."
    upstream.then(
        completion(f"Reading.\n{HEADLINE}", [tool_call("exec_command", {"cmd": "cat notes.txt"},
                                                        "call_1")]),
        text("Nothing in the notes.", prompt=5000),  # past the limit: Codex compacts next
    )  # fmt: skip
    assert _said(_run(home, work, key, "resume", "--last", "Read notes.txt."))[-1] == (
        "Nothing in the notes."
    )
    session = _session(console_log)
    before = logged_messages(console_log, session)
    calls = len(upstream.requests)

    code = "print([h.snippet for h in ms.search('vault code', k=3)])"

    def recalled(body: dict) -> Reply:
        printout = body["messages"][-1]
        assert printout["role"] == "tool" and "4711" in printout["content"], printout
        return text("The vault code is 4711.")

    upstream.then(
        completion(f"Looking it up.\n{HEADLINE}", [tool_call(RECALL_TOOL, {"code": code}, "c_r")]),
        recalled,
    )
    events = _run(home, work, key, "resume", "--last", "What is the vault code?")
    assert _said(events)[-1].endswith("The vault code is 4711.")
    # Codex compacted (the gateway answered without a model call), then asked on.
    marker = [e for e in console_log.session_events(session, limit=None)
              if e.metadata.get("gw") == "compaction"]  # fmt: skip
    assert len(marker) == 1 and marker[0].metadata.get("evicted")
    assert len(upstream.requests) == calls + 2
    view = json.dumps(upstream.requests[calls]["messages"])
    assert "4711" not in view and "[scroll] The client compacted" in view  # Scroll's view
    logged = logged_messages(console_log, session)
    assert logged[: len(before)] == before
    added = logged[len(before) :]
    assert [role for role, _ in added] == ["user", "assistant"]
    assert "What is the vault code?" in added[0][1]


def test_codex_compacting_on_its_own_is_logged_as_a_client_compaction(
    gateway, upstream, console_log, tmp_path
):
    """With the README's provider name Codex summarises on its own: the gateway logs the
    history it starts over from as a rewrite that names the summary it gave."""
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".codex").mkdir(parents=True)
    work.mkdir()
    config = COMPACTING.format(gateway=gateway).replace('name = "OpenAI"', 'name = "Scroll"')
    (home / ".codex" / "config.toml").write_text(config)
    key = make_key(upstream, agent="codex", model_map={"*": "upstream-model"})
    summary = "The user asked the assistant to keep a code in mind for later."
    upstream.then(text("Noted.", prompt=5000), text(summary), text("It is 4711."))
    _run(home, work, key, "Remember: the vault code is 4711.")
    said = _said(_run(home, work, key, "resume", "--last", "What is the vault code?"))
    assert said[-1] == "It is 4711."
    assert "CONTEXT CHECKPOINT COMPACTION" in json.dumps(upstream.requests[1]["messages"])
    session = _session(console_log)
    events = console_log.session_events(session, limit=None)
    [marker] = [e for e in events if e.metadata.get("gw") == "rewrite"]
    assert marker.metadata["compaction"] == "client"
    assert summary in next(e for e in events if e.seq == marker.metadata["summary"]).content
