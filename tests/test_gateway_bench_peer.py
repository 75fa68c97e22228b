"""``bench/gateway.py --peers litellm``: asked for without LiteLLM's virtualenv, the bench stops
with an error that says how to build it (never a silently skipped arm); the streaming upstream
it times both gateways against speaks Server-Sent Events a client can read to its end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from _litellm import litellm_venv  # noqa: E402
from gateway import Upstream  # noqa: E402


def _bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "bench" / "gateway.py"), *args],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, **(env or {})}, cwd=REPO,
    )  # fmt: skip


def test_the_litellm_arm_without_its_virtualenv_is_an_error_not_a_skip(tmp_path):
    done = _bench("--peers", "litellm", "--peer-only", "--litellm-venv", str(tmp_path / "none"))
    assert done.returncode != 0
    assert f"{tmp_path / 'none'}/bin/litellm is missing" in done.stderr
    assert "make litellm" in done.stderr
    # The environment variable names it too, and is checked the same way.
    done = _bench("--peers", "litellm", "--peer-only", env={"SCROLL_LITELLM_VENV": str(tmp_path)})
    assert done.returncode != 0 and f"{tmp_path}/bin/litellm is missing" in done.stderr


def test_unknown_peers_and_peer_only_alone_are_refused():
    assert "--peers takes: litellm" in _bench("--peers", "nginx").stderr
    assert "--peer-only needs --peers" in _bench("--peer-only").stderr


def test_a_virtualenv_with_the_litellm_command_is_taken(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "litellm").write_text("#!/bin/sh\n")
    assert litellm_venv(str(tmp_path)) == tmp_path


def test_the_scripted_upstream_streams_when_asked():
    upstream = Upstream()
    try:
        body = {"model": "bench", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        response = httpx.post(f"{upstream.url}/chat/completions", json=body, timeout=10)
        assert response.headers["content-type"] == "text/event-stream"
        lines = [line for line in response.text.splitlines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        chunks = [json.loads(line[6:]) for line in lines[:-1]]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1])
        assert text.startswith("ok\n") and "bench reply 1" in text
        assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
        assert chunks[-1]["usage"]["prompt_tokens"] == 100
        plain = httpx.post(f"{upstream.url}/chat/completions", json={**body, "stream": False})
        assert plain.json()["object"] == "chat.completion"
    finally:
        upstream.close()
