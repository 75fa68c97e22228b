"""A long real conversation through the gateway: a LoCoMo conversation and Claude Code
transcripts from ../shared/data as successive client requests (the history growing each
time), a scripted upstream replaying the transcript's replies."""

from __future__ import annotations

import json

import pytest

from bench._gateway_data import claude_code_messages, completion_for, locomo_exchanges
from scroll_core.gateway import GatewayConversation, parse_chat_request, parse_messages_request
from scroll_core.gateway.upstream import parse_completion
from scroll_core.kernel import Kernel, KernelConfig
from scroll_core.models import ModelReply
from scroll_core.profile import Profile
from scroll_core.prompts import RECALL_TOOL
from scroll_core.store import EventLog
from scroll_core.tokens import CharRatioCounter


class Replayer:
    """An upstream answering with whatever the driver queued next (a completion body)."""

    def __init__(self):
        self.queue: list = []
        self.requests: list[list[dict]] = []

    def complete(self, messages, tools, *, model, params) -> ModelReply:
        self.requests.append(messages)
        item = self.queue.pop(0)
        return parse_completion(item(messages) if callable(item) else item, model)


@pytest.fixture
def clog(tmp_path):
    with EventLog(tmp_path / "eventlog.sqlite3", token_counter=CharRatioCounter()) as log:
        yield log


@pytest.fixture(scope="module")
def kernel():
    with Kernel(KernelConfig(sandbox="process", grace_s=0.5)) as k:
        yield k


def test_a_locomo_conversation_stays_under_the_window_and_recalls_an_evicted_fact(
    clog, kernel, shared_data
):
    exchanges = locomo_exchanges(shared_data / "locomo" / "locomo10.json", sessions=None)
    assert len(exchanges) > 60, len(exchanges)
    context = 4096
    conv = GatewayConversation(
        clog,
        session_id="gw:bench:locomo",
        agent_id="bench",
        profile=Profile(context_size=context),
        kernel=kernel,
    )
    upstream = Replayer()
    history: list[dict] = [{"role": "system", "content": "You are Melanie. Reply as her."}]
    client_tokens = upstream_tokens = peak = evictions = 0
    for said, answer in exchanges:
        history.append({"role": "user", "content": said})
        upstream.queue.append(completion_for(answer))
        reply = conv.handle(
            parse_chat_request({"model": "m", "messages": history}), upstream, model="up"
        )
        assert reply.stats.appended == 1  # only the new message: the reply before is logged
        history.append({"role": "assistant", "content": reply.content})
        client_tokens += reply.stats.client_tokens
        upstream_tokens += reply.stats.upstream_tokens
        peak = max(peak, reply.stats.peak_view_tokens)
        evictions += reply.stats.evictions
    assert peak <= context and evictions > 0
    assert upstream_tokens < client_tokens
    assert (
        reply.stats.client_tokens > 2 * context
    )  # the history outgrew the window; the view did not
    # Session 1 has long been evicted; the model recalls it through the kernel.
    code = "for h in ms.search('LGBTQ support group', k=5):\n    print(h.seq, h.snippet[:160])"
    upstream.queue += [
        completion_for(
            "",
            [
                {
                    "id": "call_q",
                    "type": "function",
                    "function": {"name": RECALL_TOOL, "arguments": json.dumps({"code": code})},
                }
            ],
        ),
        lambda messages: completion_for(
            next(m["content"] for m in reversed(messages) if m["role"] == "tool")
        ),
    ]
    history.append({"role": "user", "content": "When did Caroline go to the LGBTQ support group?"})
    reply = conv.handle(
        parse_chat_request({"model": "m", "messages": history}), upstream, model="up"
    )
    assert reply.stats.recalls == 1
    assert "D1:3" in reply.content  # the evidence turn, found in the log
    first_seq = conv.index.blocks[0].lo_seq
    assert first_seq <= min(int(line.split()[0]) for line in reply.content.splitlines())


@pytest.mark.parametrize("name", ["representative_messages.jsonl", "todowrite_examples.jsonl"])
def test_a_claude_code_transcript_passes_through_with_its_tools(clog, shared_data, name):
    transcript = claude_code_messages(shared_data / "claude-code" / name)
    names = sorted({b["name"] for m in transcript for b in m["content"] if b["type"] == "tool_use"})
    assert names, "the transcript uses tools"
    tools = [{"name": n, "description": n, "input_schema": {"type": "object"}} for n in names]
    conv = GatewayConversation(
        clog, session_id=f"gw:cc:{name}", agent_id="cc", profile=Profile(context_size=16384)
    )
    upstream = Replayer()
    history: list[dict] = []
    replies = 0
    for message in transcript:
        if message["role"] == "user":
            history.append(message)
            continue
        text = "\n".join(b["text"] for b in message["content"] if b["type"] == "text")
        calls = [
            {
                "id": b["id"],
                "type": "function",
                "function": {"name": b["name"], "arguments": json.dumps(b["input"])},
            }
            for b in message["content"]
            if b["type"] == "tool_use"
        ]
        upstream.queue.append(completion_for(text, calls))
        body = {
            "model": "claude-x",
            "max_tokens": 1024,
            "system": "You are Claude Code.",
            "messages": history,
            "tools": tools,
        }
        reply = conv.handle(parse_messages_request(body), upstream, model="up")
        replies += 1
        assert not reply.stats.rewritten and not reply.stats.replayed
        assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
            (b["id"], b["name"], b["input"]) for b in message["content"] if b["type"] == "tool_use"
        ]
        assert reply.content == text.strip()
        history.append(message)  # what the client got back is the transcript's own message
    assert replies >= 3
    last = max(i for i, m in enumerate(transcript) if m["role"] == "assistant")
    results = [b for m in transcript[:last] for b in m["content"] if b["type"] == "tool_result"]
    sent = {
        m["tool_call_id"] for request in upstream.requests for m in request if m["role"] == "tool"
    }
    assert {r["tool_use_id"] for r in results} == sent
    logged = clog.session_events(f"gw:cc:{name}", limit=None)
    assert sum(1 for e in logged if e.kind == "tool_result") == len(results)
