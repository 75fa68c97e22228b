"""A real Aider through the gateway: the CLI (PyPI's ``aider-chat``, in a virtualenv of its own
that ``make aider`` makes and ``.ci/run`` installs: its pins are not Scroll's) with one
``--message``, its model ``openai/<name>`` through LiteLLM's OpenAI provider, whose base
URL is the gateway's ``/v1`` (Chat Completions, streamed), its upstream the scripted one.
Aider sends the file it was given, gets back a whole-file edit and writes it: what it
writes is the reply the gateway passed on, so a headline left in it would land in the file.

Nothing leaves loopback: the CLI's home is a temporary folder, its only endpoint is the
gateway, analytics and the update check are off, and a model metadata file in its home
names the model, so neither Aider nor LiteLLM fetches the model price list it would
otherwise download."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from gateway_clients import agent_cli, logged_messages, make_key
from gateway_upstream import HEADLINE, completion

from scroll_core.prompts import HEADLINE_INSTRUCTION
from scroll_core.store import EventLog

# What this checks is the real CLI's wire protocol through the gateway, which the console's
# database and channel layer cannot change: it runs on the embedded pass only
# (tests/conftest.py, same_on_every_backend); the gateway on PostgreSQL and Redis is the
# other gateway tests'.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.same_on_every_backend]

# What Aider's own docs have a model unknown to LiteLLM declare, in ~/.aider.model.metadata.json.
METADATA = {
    "openai/gpt-test": {
        "max_input_tokens": 128000,
        "max_output_tokens": 8192,
        "input_cost_per_token": 0,
        "output_cost_per_token": 0,
        "litellm_provider": "openai",
        "mode": "chat",
    }
}


def _run(home: Path, work: Path, gateway: str, key: str, *args: str) -> str:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "OPENAI_API_BASE": f"{gateway}/v1",
        "OPENAI_API_KEY": key,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    done = subprocess.run(
        [agent_cli("aider", "aider-chat", registry="PyPI"), "--model", "openai/gpt-test",
         "--yes-always", "--no-git", "--no-check-update", "--analytics-disable",
         "--no-pretty", "--no-fancy-input", *args],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout


def _session(console_log: EventLog) -> str:
    sessions = [s.session_id for s in console_log.sessions() if s.session_id.startswith("gw:")]
    assert len(sessions) == 1, sessions
    return sessions[0]


def test_aider_edits_a_file_through_the_gateway(gateway, upstream, console_log, tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / ".aider.model.metadata.json").write_text(json.dumps(METADATA))
    notes = work / "notes.txt"
    notes.write_text("The deploy window is Thursday 14:00.\n")
    upstream.then(
        completion(
            "Moving it to Friday.\n\nnotes.txt\n```\nThe deploy window is Friday 10:00.\n```\n"
            f"{HEADLINE}"
        )
    )
    key = make_key(upstream, agent="aider", model_map={"*": "upstream-model"})

    said = _run(home, work, gateway, key, "--message",
                "Move the deploy window to Friday 10:00.", "notes.txt")  # fmt: skip
    # Aider wrote the edit the gateway passed on, without the gateway's headline.
    assert notes.read_text() == "The deploy window is Friday 10:00.\n"
    assert "Applied edit to notes.txt" in said and "⟦" not in said
    assert upstream.paths == ["/v1/chat/completions"]
    sent = upstream.requests[0]
    assert sent["model"] == "upstream-model" and sent["stream"] is True
    # Scroll's view went up: the system text carries the headline instruction, and the file
    # Aider added to the chat is there for the model to edit.
    assert sent["messages"][0]["role"] == "system"
    assert HEADLINE_INSTRUCTION in sent["messages"][0]["content"]
    assert "Thursday 14:00" in json.dumps(sent["messages"])
    logged = logged_messages(console_log, _session(console_log))
    assert any(role == "user" and "Move the deploy window" in t for role, t in logged)
    assert logged[-1][0] == "assistant" and "Friday 10:00" in logged[-1][1]
