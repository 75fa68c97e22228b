"""Helpers for the gateway's end-to-end tests: keys, the official clients pointed at the
gateway (closed after each test by the ``gateway`` fixture), and a tool schema."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from dashboard.gateway.models import GatewayKey

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}

_clients: list[Any] = []

# Where .ci/run installs the coding agents' CLIs from npm, and Aider (PyPI) in a virtualenv of
# its own (`make aider`); git ignores both.
REPO = Path(__file__).resolve().parents[1]
AGENTS_BIN = REPO / ".agents" / "node_modules" / ".bin"
AIDER_BIN = REPO / ".aider-venv" / "bin"


def agent_cli(command: str, package: str, registry: str = "npm") -> str:
    """The path of a coding agent's CLI (``SCROLL_<COMMAND>``, else ``.agents/`` for an npm
    package or ``.aider-venv/`` for Aider); the test is skipped, naming the package, when it
    is not installed (under CI=true that skip fails: ``tests/conftest.py``)."""
    where = AGENTS_BIN if registry == "npm" else AIDER_BIN
    found = os.environ.get(f"SCROLL_{command.upper()}") or shutil.which(command, path=str(where))
    if not found:
        home = ".agents/" if registry == "npm" else f"{where.parent.name}/"
        pytest.skip(f"{package} ({registry}) is not installed under {home} (.ci/run installs it)")
    return found


def run_cli_events(
    command: list[str], env: dict[str, str], cwd: Path, timeout: float
) -> list[dict[str, Any]]:
    """Run an agent CLI non-interactively (no stdin); the JSON events it printed, one a line.
    A non-zero exit fails the test with what it printed."""
    done = subprocess.run(
        command,
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def close_clients() -> None:
    while _clients:
        _clients.pop().close()


def make_key(upstream, agent="alice", **fields):
    fields.setdefault("upstream_base_url", upstream.url)
    fields.setdefault("upstream_key_env", "GW_TEST_UPSTREAM_KEY")
    fields.setdefault("model_map", {"gpt-test": "upstream-model"})
    return GatewayKey.issue(agent_id=agent, **fields)[1]


def oa(gateway, key, **kw):
    client = openai.OpenAI(base_url=f"{gateway}/v1", api_key=key, max_retries=0, **kw)
    _clients.append(client)
    return client


def an(gateway, key):
    client = anthropic.Anthropic(base_url=gateway, api_key=key, max_retries=0)
    _clients.append(client)
    return client


def ask(client, messages, **kw):
    return client.chat.completions.create(model="gpt-test", messages=messages, **kw)


def assistant_of(completion):
    return completion.choices[0].message.model_dump(
        exclude_none=True, include={"role", "content", "tool_calls"}
    )


def logged_messages(console_log, session: str) -> list[tuple[str, str]]:
    """The client messages and replies the console's log holds for ``session`` (role, text),
    once the gateway has committed every reply."""
    from dashboard.gateway.service import get_service

    get_service().flush()
    return [
        (e.role or "", e.content)
        for e in console_log.session_events(session, limit=None)
        if e.metadata.get("gw") in ("msg", "reply")
    ]
