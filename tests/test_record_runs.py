"""The call record of Scroll's own runs: a run against an OpenAI-compatible endpoint keeps
each request exactly as the endpoint received it (the official client's own bytes); a run
of the in-process policy model keeps what the loop handed it."""

from __future__ import annotations

import json

import pytest

from dashboard.record.read import recorded_call, session_calls
from dashboard.runs import runner as runner_module
from dashboard.runs.models import RunRecord

pytestmark = pytest.mark.django_db(transaction=True)

CELL = "Run this.\n```python\nx = 6 * 7\nprint('answer', x)\n```"


@pytest.fixture
def runner(live_runner):
    """The shared in-process worker (tests/conftest.py)."""
    return live_runner[0]


def test_a_run_against_an_endpoint_records_the_bytes_it_received(runner, upstream, monkeypatch):
    monkeypatch.setenv("SCROLL_MODEL_NAME", "upstream-model")
    monkeypatch.setenv("SCROLL_MODEL_BASE_URL", upstream.url)
    monkeypatch.setenv("SCROLL_MODEL_API_KEY", "sk-test")
    run = runner_module.start_run("first question\n---\nsecond question", model="upstream-model")
    run = runner_module.wait_for_run(run.session_id, 60)
    assert run.status == RunRecord.DONE, run.error
    calls = session_calls(run.session_id)
    assert len(calls) == len(upstream.raw) == 2
    for row, received in zip(calls, upstream.raw, strict=True):
        assert recorded_call(run.session_id, row.index).body == received
        assert row.source == "run" and row.url.endswith("/chat/completions") and row.sends == 1
        assert row.usage == {"input_tokens": 120, "output_tokens": 12}
    assert [(c.turn, c.step) for c in calls] == [(1, 1), (2, 1)] or calls[0].turn is not None
    # The second call carries the first exchange: only its new messages were stored anew.
    second = recorded_call(run.session_id, 1)
    assert second.new_positions and second.dropped == 0
    assert json.loads(upstream.raw[1])["messages"][-1]["content"].endswith("second question")


def test_a_run_of_the_policy_model_records_what_the_loop_handed_it(runner):
    run = runner_module.wait_for_run(runner_module.start_run(CELL).session_id, 60)
    assert run.status == RunRecord.DONE, run.error
    calls = session_calls(run.session_id)
    assert len(calls) == run.steps == 2
    first = recorded_call(run.session_id, 0)
    assert first.row.url == "" and first.row.sends == 0
    body = json.loads(first.body)
    assert body["model"] == "scroll-policy-baseline"
    assert [m["role"] for m in body["messages"]][:1] == ["system"]
    assert {t["function"]["name"] for t in body["tools"]} >= {"repl_exec"}
    assert CELL.split("\n")[0] in first.text
    assert calls[0].view["total"] > 0 and calls[1].reply["content"] is not None
