"""A real Codex through the gateway: OpenAI's CLI (npm's ``@openai/codex``, which ``.ci/run``
installs under ``.agents/``) in ``codex exec`` mode, its model provider the gateway's
Responses API (``wire_api = "responses"`` in its config), its upstream the scripted Chat
Completions one. Codex runs a shell command with its own ``exec_command`` tool and sends the
output back; ``codex exec resume --last`` resends the whole conversation with a new prompt,
which must land in the same session and append only what is new.

Nothing leaves loopback: the CLI's home is a temporary folder and its only provider is the
gateway. Its command runs outside Codex's own sandbox (``danger-full-access``): that sandbox
needs helper binaries Codex will not make under a temporary folder, and what is tested here
is the gateway, not Codex's sandbox."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from gateway_clients import agent_cli, logged_messages, make_key
from gateway_upstream import HEADLINE, completion, text, tool_call

from scroll_core.store import EventLog

pytestmark = pytest.mark.django_db(transaction=True)

CONFIG = """\
model = "gpt-test"
model_provider = "scroll"

[model_providers.scroll]
name = "Scroll"
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
    done = subprocess.run(
        [*command, "--sandbox", "danger-full-access", *args],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


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
