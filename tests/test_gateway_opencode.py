"""A real OpenCode through the gateway: the CLI (npm's ``opencode-ai``, whose platform binary
comes as an optional dependency; ``.ci/run`` installs it under ``.agents/``) in ``opencode
run`` mode, its model a custom provider on the bundled ``@ai-sdk/openai-compatible`` SDK
whose base URL is the gateway's ``/v1`` (Chat Completions, streamed), its upstream the
scripted one. OpenCode reads a file with its own ``read`` tool and sends the result back;
``opencode run --continue`` resends the session with a new prompt, which must land in the
same gateway session and append only what is new.

Nothing leaves loopback: the CLI's home is a temporary folder, its only provider is the
gateway, the models.dev catalogue fetch and the auto-update are switched off, ``--pure``
loads no plugin, and ``--title`` spares the separate title request its small model would
make."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from gateway_clients import agent_cli, logged_messages, make_key, run_cli_events
from gateway_upstream import HEADLINE, completion, text, tool_call

from scroll_core.prompts import HEADLINE_INSTRUCTION
from scroll_core.store import EventLog

# What this checks is the real CLI's wire protocol through the gateway, which the console's
# database and channel layer cannot change: it runs on the embedded pass only
# (tests/conftest.py, same_on_every_backend); the gateway on PostgreSQL and Redis is the
# other gateway tests'.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.same_on_every_backend]


def config(gateway: str) -> dict:
    """The ``opencode.json`` the README documents, pointed at ``gateway``."""
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "scroll": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Scroll",
                "options": {"baseURL": f"{gateway}/v1", "apiKey": "{env:SCROLL_API_KEY}"},
                "models": {"gpt-test": {"name": "gpt-test"}},
            }
        },
        "model": "scroll/gpt-test",
        "autoupdate": False,
        "share": "disabled",
    }


def _run(home: Path, work: Path, key: str, *args: str) -> list[dict]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "OPENCODE_CONFIG": str(home / "opencode.json"),
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "SCROLL_API_KEY": key,
    }
    command = [agent_cli("opencode", "opencode-ai"), "run", "--pure", "--format", "json"]
    return run_cli_events([*command, "--title", "deploy", *args], env, work, 180)


def _said(events: list[dict]) -> list[str]:
    return [e["part"]["text"] for e in events if e.get("type") == "text"]


def _session(console_log: EventLog) -> str:
    sessions = [s.session_id for s in console_log.sessions() if s.session_id.startswith("gw:")]
    assert len(sessions) == 1, sessions
    return sessions[0]


def test_opencode_reads_a_file_through_the_gateway_and_continues(
    gateway, upstream, console_log, tmp_path
):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / "opencode.json").write_text(json.dumps(config(gateway)))
    notes = work / "notes.txt"
    notes.write_text("The deploy window is Thursday 14:00.\n")
    upstream.then(
        completion(
            f"Reading the notes.\n{HEADLINE}",
            [tool_call("read", {"filePath": str(notes)}, "call_1")],
        ),
        text("The deploy window is Thursday at 14:00."),
        text("You asked when the deploy window is."),
    )
    key = make_key(upstream, agent="opencode", model_map={"*": "upstream-model"})

    first = _run(home, work, key, "When is the deploy window? See notes.txt.")
    # The gateway took its headline off the reply: OpenCode shows the answer alone.
    assert _said(first)[-1] == "The deploy window is Thursday at 14:00."
    assert upstream.paths[:2] == ["/v1/chat/completions"] * 2
    # Scroll's view went up, not OpenCode's request as it was: the system text carries the
    # headline instruction, and the model name is the key's map's.
    sent = upstream.requests[0]
    assert sent["model"] == "upstream-model"
    assert sent["messages"][0]["role"] == "system"
    assert HEADLINE_INSTRUCTION in sent["messages"][0]["content"]
    # OpenCode ran its read tool itself and sent the file's text back as the call's result.
    result = upstream.requests[1]["messages"][-1]
    assert result["role"] == "tool" and result["tool_call_id"] == "call_1"
    assert "Thursday 14:00" in json.dumps(result["content"])
    session = _session(console_log)
    first_logged = logged_messages(console_log, session)
    assert [role for role, _ in first_logged].count("tool") == 1

    again = _run(home, work, key, "--continue", "What did I ask?")
    assert _said(again)[-1] == "You asked when the deploy window is."
    assert _session(console_log) == session
    logged = logged_messages(console_log, session)
    assert logged[: len(first_logged)] == first_logged
    added = logged[len(first_logged) :]
    assert [role for role, _ in added] == ["user", "assistant"]
    assert "What did I ask?" in added[0][1]
    asked = [t for role, t in logged if role == "user" and "deploy window?" in t]
    assert len(asked) == 1
