"""A gateway session's spans in a real Arize Phoenix, read back through its REST API.

Phoenix (from PyPI, in its own virtualenv: ``make phoenix``) runs on loopback; the session
runs in a process of its own started as an operator would start Scroll, with the standard
variables only: the base OTLP endpoint, a service name, a project, content capture on.
Without Phoenix installed the test skips, and under CI=true it fails (tests/servers.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from scroll_core.gateway.conversation import REQUEST_SPAN
from scroll_core.prompts import RECALL_TOOL
from tests.servers import ServerUnavailable, phoenix, unavailable

REPO = Path(__file__).resolve().parents[1]
PROJECT = "scroll-e2e"
READ_BACK_S = 60.0


@pytest.fixture(scope="module")
def phoenix_url():
    try:
        with phoenix() as server:
            yield server.url
    except ServerUnavailable as exc:
        unavailable("Arize Phoenix", str(exc))


def run_session(phoenix_url: str) -> tuple[dict[str, Any], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SCROLL_"))}
    env.update(
        PYTHONPATH=str(REPO),
        OTEL_EXPORTER_OTLP_ENDPOINT=phoenix_url,
        OTEL_SERVICE_NAME="scroll-gateway-test",
        SCROLL_TRACE_PROJECT=PROJECT,
        OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true",
    )
    done = subprocess.run(
        [sys.executable, "-m", "tests.phoenix_session"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def read_spans(phoenix_url: str, project: str, expected: int) -> list[dict[str, Any]]:
    """The project's spans once Phoenix holds ``expected`` of them (it inserts in batches)."""
    deadline = time.monotonic() + READ_BACK_S
    spans: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(
                f"{phoenix_url}/v1/projects/{project}/spans?limit=1000", timeout=10
            ) as response:
                spans = json.load(response)["data"]
        except urllib.error.HTTPError as exc:  # 404 until the project's first span is in
            if exc.code != 404:
                raise
        if len(spans) >= expected:
            return spans
        time.sleep(0.5)
    raise AssertionError(f"Phoenix holds {len(spans)} of {expected} spans after {READ_BACK_S} s")


def test_a_gateway_session_reads_back_as_a_tree_with_llm_spans_and_their_messages(phoenix_url):
    session, stderr = run_session(phoenix_url)
    spans = read_spans(phoenix_url, PROJECT, session["spans"])
    assert len(spans) == session["spans"]

    # The tree: every parent is a span of the same trace, one root per trace.
    by_id = {s["context"]["span_id"]: s for s in spans}
    for s in spans:
        if s["parent_id"] is not None:
            assert by_id[s["parent_id"]]["context"]["trace_id"] == s["context"]["trace_id"]
    requests = [s for s in spans if s["name"] == REQUEST_SPAN]
    assert len(requests) == 2 and all(r["parent_id"] is None for r in requests)
    assert all(r["span_kind"] == "AGENT" for r in requests)

    chats = [s for s in spans if s["name"] == "chat up-model"]
    chats.sort(key=lambda s: s["start_time"])
    assert len(chats) == len(session["received"]) == 3
    trace = chats[1]["context"]["trace_id"]
    second_turn = next(r for r in requests if r["context"]["trace_id"] == trace)
    assert [c["parent_id"] for c in chats[1:]] == [second_turn["context"]["span_id"]] * 2
    (cell,) = [s for s in spans if s["name"] == f"execute_tool {RECALL_TOOL}"]
    assert cell["span_kind"] == "TOOL" and cell["parent_id"] == second_turn["context"]["span_id"]

    for chat, received, tokens in zip(
        chats, session["received"], [(120, 8), (150, 20), (210, 9)], strict=True
    ):
        a = chat["attributes"]
        assert chat["span_kind"] == "LLM"
        assert a["llm.model_name"] == "up-model"
        assert (a["llm.token_count.prompt"], a["llm.token_count.completion"]) == tokens
        assert a["llm.token_count.total"] == sum(tokens)
        # Input: the system prompt the upstream got (the client's plus Scroll's rubric), then
        # each message, in order, with its role.
        assert a["llm.input_messages.0.message.role"] == "system"
        assert a["llm.input_messages.0.message.content"] == received[0]["content"]
        assert a["llm.input_messages.0.message.content"].startswith("You are terse.")
        for i, message in enumerate(received[1:], start=1):
            assert a[f"llm.input_messages.{i}.message.role"] == message["role"]
        assert f"llm.input_messages.{len(received)}.message.role" not in a
        assert json.loads(a["input.value"])[-1]["role"] == received[-1]["role"]

    first, recall, answer = (c["attributes"] for c in chats)
    assert first["llm.input_messages.1.message.content"] == "remember the code word PELICAN"
    assert first["llm.output_messages.0.message.content"].startswith("Noted.")
    call = "llm.output_messages.0.message.tool_calls.0.tool_call"
    assert recall[f"{call}.function.name"] == RECALL_TOOL
    assert "ms.search('PELICAN'" in recall[f"{call}.function.arguments"]
    last = len(session["received"][2]) - 1
    assert answer[f"llm.input_messages.{last}.message.role"] == "tool"
    assert answer[f"llm.input_messages.{last}.message.tool_call_id"] == "call_recall_1"
    assert "PELICAN" in answer[f"llm.input_messages.{last}.message.content"]
    assert answer["llm.output_messages.0.message.content"].startswith("It was PELICAN.")
    assert json.loads(answer["output.value"])[0]["finish_reason"] == "stop"

    # Phoenix takes no metrics (405): one warning says so, and nothing floods the log.
    (said,) = [line for line in stderr.splitlines() if line.strip()]
    assert "refuses OTLP metrics (HTTP 405" in said and "OTEL_METRICS_EXPORTER=none" in said
