"""What an Anthropic client (Claude Code) asks of Anthropic Messages beyond the conversation:
its ``anthropic-beta`` header, its ``cache_control`` breakpoints, extended ``thinking`` and
its effort (``output_config``), forwarded to an Anthropic-format upstream (daphne on
loopback, the official ``anthropic`` client, the scripted upstream; every request it
received checked against the ``anthropic`` package's request types), the model's thinking
blocks returned unchanged and logged so the next request aligns; and dropped, with the
request served, on the way to an OpenAI-format one.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from anthropic_schema import assert_valid_request, blocks_of
from gateway_clients import an, make_key
from gateway_upstream import HEADLINE, a_message, a_thinking, a_tool_use

from dashboard.eventlog import get_event_log
from scroll_core.gateway.anthropic_upstream import messages_body
from scroll_core.prompts import RECALL_TOOL

pytestmark = pytest.mark.django_db(transaction=True)

THINK = {"type": "enabled", "budget_tokens": 1024}
BETA = "interleaved-thinking-2025-05-14,extended-cache-ttl-2025-04-11"


def _key(upstream, **fields):
    fields.setdefault("model_map", {"*": "claude-upstream"})
    return make_key(
        upstream, upstream_format="anthropic", upstream_base_url=upstream.root, **fields
    )


def _answer(text: str, thought: str, signature: str) -> Any:
    return a_message(
        [a_thinking(thought, signature), {"type": "text", "text": f"{text}\n{HEADLINE}"}]
    )


def _marks(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every breakpoint in a Messages request, in order: (the block's text, its mark)."""
    found = [
        (b["text"], b["cache_control"]) for b in body.get("system", ()) if "cache_control" in b
    ]
    for turn in body["messages"]:
        for b in blocks_of(turn):
            if "cache_control" in b:
                found.append((b.get("text") or b.get("content") or b["type"], b["cache_control"]))
    return found


def test_the_beta_header_and_the_clients_breakpoints_reach_an_anthropic_upstream(gateway, upstream):
    client = an(gateway, _key(upstream))
    one_hour = {"type": "ephemeral", "ttl": "1h"}
    client.messages.create(
        model="claude-x",
        max_tokens=100,
        system=[{"type": "text", "text": "Be brief.", "cache_control": one_hour}],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "first question"}]},
            {"role": "assistant", "content": "first answer"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "second", "cache_control": {"type": "ephemeral"}}
                ],
            },
        ],
        output_config={"effort": "medium"},
        extra_headers={"anthropic-beta": BETA},
    )
    assert upstream.headers[0]["anthropic-beta"] == BETA
    sent = upstream.requests[0]
    assert_valid_request(sent)
    assert sent["output_config"] == {"effort": "medium"}  # Claude Code's effort, as it asked
    # The client's hour-long breakpoint on its system prompt; its own on its last message.
    assert _marks(sent)[0][1] == one_hour and sent["system"][0]["text"].startswith("Be brief.")
    assert _marks(sent)[-1] == ("second", {"type": "ephemeral"})
    assert len(_marks(sent)) == 2


def test_breakpoints_stay_within_the_apis_four_and_longer_lives_come_first():
    marked = [["user", f"q{i}", {"type": "ephemeral"}] for i in range(6)]
    marked[1][2] = {"type": "ephemeral", "ttl": "1h"}
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    for i in range(6):
        messages += [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]
    messages.append({"role": "user", "content": "last"})
    params = {"anthropic_cache": {"system": None, "messages": marked}}
    body = messages_body(messages, [], model="m", params=params)
    assert_valid_request(body)
    marks = _marks(body)
    assert len(marks) == 4
    # The system's and the view's last are kept, the client's latest ones beside them.
    assert [text for text, _ in marks] == ["sys", "q4", "q5", "last"]
    # The client's hour-long mark (q1) was dropped, so nothing needs an hour; with it kept,
    # every breakpoint before it lives as long.
    assert all(m.get("ttl", "5m") == "5m" for _, m in marks)
    params["anthropic_cache"]["messages"] = [["user", "q5", {"type": "ephemeral", "ttl": "1h"}]]
    body = messages_body(messages, [], model="m", params=params)
    assert_valid_request(body)
    assert [m.get("ttl") for _, m in _marks(body)] == ["1h", "1h", None]


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_thinking_is_forwarded_and_its_blocks_come_back_unchanged_and_logged(
    gateway, upstream, streamed
):
    client = an(gateway, _key(upstream))
    code = "print('the number is', 41)"
    upstream.then(
        a_message(
            [
                a_thinking("I should look it up.", "sig-one"),
                a_tool_use(RECALL_TOOL, {"code": code}, "toolu_r1"),
            ]
        ),
        _answer("It is 41.", "Found it: 41.", "sig-two"),
        _answer("You are welcome.", "Polite reply.", "sig-three"),
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": "what was the number?"}]
    ask = {"model": "claude-x", "max_tokens": 2048, "thinking": THINK,
           "extra_headers": {"X-Scroll-Session": "think"}}  # fmt: skip
    if streamed:
        with client.messages.stream(messages=messages, **ask) as stream:
            reply = stream.get_final_message()
    else:
        reply = client.messages.create(messages=messages, **ask)
    shown = [b.model_dump(exclude_none=True) for b in reply.content]  # all the client got
    if streamed:  # the recall step's thinking streamed as it came, before the answer's
        step_thought = reply.content.pop(0)
        assert (step_thought.thinking, step_thought.signature) == (
            "I should look it up.",
            "sig-one",
        )
    assert [b.type for b in reply.content] == ["thinking", "text"]
    assert (reply.content[0].thinking, reply.content[0].signature) == ("Found it: 41.", "sig-two")
    assert reply.content[1].text == "It is 41."
    first, second = upstream.requests[:2]
    for sent in (first, second):
        assert sent["thinking"] == THINK
        assert_valid_request(sent)
    # The recall step went back with its thinking block first in its turn, as it came.
    step = second["messages"][-2]
    assert step["role"] == "assistant"
    assert step["content"][0] == a_thinking("I should look it up.", "sig-one")
    assert [b["type"] for b in step["content"]] == ["thinking", "tool_use"]

    # A retry (the client did not get the answer) is answered from the log with the answer's
    # thinking (a recall step's is the log's, kept with the step).
    retried = client.messages.create(messages=messages, **ask)
    assert [b.model_dump(exclude_none=True) for b in retried.content] == [
        b.model_dump(exclude_none=True, include={"type", "thinking", "signature", "text"})
        for b in reply.content
    ]
    assert len(upstream.requests) == 2

    # The client resends the turn with its thinking block: nothing of it is appended again.
    messages += [
        {"role": "assistant", "content": shown},
        {"role": "user", "content": "thanks"},
    ]
    assert client.messages.create(messages=messages, **ask).content[1].text == "You are welcome."
    third = upstream.requests[2]
    assert_valid_request(third)
    answer = third["messages"][-2]
    assert answer["content"][0] == a_thinking("Found it: 41.", "sig-two")
    session = "gw:alice:think"
    said = [(e.role, e.content) for e in get_event_log().session_events(session, limit=None)
            if e.role in ("user", "assistant") and e.content]  # fmt: skip
    assert said.count(("user", "what was the number?")) == 1
    assert said.count(("assistant", "It is 41.")) == 1
    assert said.count(("user", "thanks")) == 1


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_an_openai_format_upstream_gets_the_request_without_what_only_anthropic_knows(
    gateway, upstream, streamed
):
    key = make_key(upstream, model_map={"*": "upstream-model"})
    client = an(gateway, key)
    ask: dict[str, Any] = {
        "model": "claude-x",
        "max_tokens": 2048,
        "thinking": THINK,
        "output_config": {"effort": "low"},
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "hi"}],
        "extra_headers": {"anthropic-beta": BETA},
    }
    if streamed:  # the thinking the client asked for is not there to stream: text alone
        with client.messages.stream(**ask) as stream:
            reply = stream.get_final_message()
    else:
        reply = client.messages.create(**ask)
    assert [b.type for b in reply.content] == ["text"] and reply.content[0].text == "ok 1"
    sent = upstream.requests[0]
    assert not {"thinking", "output_config", "anthropic_beta", "anthropic_cache"} & set(sent)
    assert all("cache_control" not in m and "thinking" not in m for m in sent["messages"])
    assert "anthropic-beta" not in upstream.headers[0]


@pytest.mark.parametrize("field", ["thinking", "output_config"])
def test_a_malformed_thinking_or_effort_request_is_a_400_naming_the_field(gateway, upstream, field):
    key = _key(upstream)
    refused = httpx.post(
        f"{gateway}/v1/messages",
        json={
            "model": "claude-x",
            "max_tokens": 9,
            field: "yes",
            "messages": [{"role": "user", "content": "hi"}],
        },
        headers={"x-api-key": key},
        timeout=30,
    )
    assert refused.status_code == 400
    assert field in refused.json()["error"]["message"]
    assert upstream.requests == []


def _tool(name: str, mark: dict[str, Any] | None = None) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": name, "input_schema": {"type": "object", "properties": {}}}
    return {**tool, "cache_control": mark} if mark else tool


def test_breakpoints_on_the_clients_tools_reach_the_upstream_and_a_server_tools_go_with_it(
    gateway, upstream
):
    client = an(gateway, _key(upstream))
    one_hour = {"type": "ephemeral", "ttl": "1h"}
    client.messages.create(
        model="claude-x",
        max_tokens=100,
        system="Be brief.",
        # Claude Code marks its last tool; a web search tool the upstream is not offered.
        tools=[
            _tool("Read"),
            _tool("Bash", one_hour),
            {"type": "web_search_20250305", "name": "web_search", "cache_control": one_hour},
        ],
        messages=[{"role": "user", "content": "list the files"}],
    )
    sent = upstream.requests[0]
    assert_valid_request(sent)
    marked = {t["name"]: t.get("cache_control") for t in sent["tools"]}
    assert marked["Bash"] == one_hour and marked["Read"] is None
    assert RECALL_TOOL not in marked and "web_search" not in marked  # nothing evicted yet
    # The hour-long breakpoint comes first (tools lead the prefix), the five-minute ones of
    # the system and the view's end after it: the order the API asks for, left as it is.
    assert [m.get("ttl", "5m") for _, m in _marks(sent)] == ["5m", "5m"]


def test_the_earliest_of_the_clients_breakpoints_go_first_when_over_four_tools_included():
    tools = [
        {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
        for n in ("A", "B", "C")
    ]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    for i in range(3):
        messages += [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}]
    messages.append({"role": "user", "content": "last"})
    marks = {
        "system": None,
        "tools": {"A": {"type": "ephemeral"}, "C": {"type": "ephemeral", "ttl": "1h"}},
        "messages": [["user", "q1", {"type": "ephemeral"}], ["user", "q2", {"type": "ephemeral"}]],
    }
    body = messages_body(messages, tools, model="m", params={"anthropic_cache": marks})
    assert_valid_request(body)
    # Tools A and C, the system, q1, q2 and the view's last: six, so A and C (the earliest)
    # are dropped; the system's and the view's last stay.
    assert [t.get("cache_control") for t in body["tools"]] == [None, None, None]
    assert [text for text, _ in _marks(body)] == ["sys", "q1", "q2", "last"]
    # With room for one tool breakpoint (q1 unmarked), the later tool's (C) stays: the
    # earliest breakpoint, its hour before every shorter one.
    marks["messages"] = marks["messages"][1:]
    body = messages_body(messages, tools, model="m", params={"anthropic_cache": marks})
    assert_valid_request(body)
    assert [t.get("cache_control") for t in body["tools"]] == [None, None, marks["tools"]["C"]]
    assert [m.get("ttl", "5m") for _, m in _marks(body)] == ["5m", "5m", "5m"]


def test_a_breakpoint_on_a_message_whose_text_scroll_changed_is_dropped(gateway, upstream):
    """A tool result over the Event Log's payload threshold goes upstream as a preview with
    a note; the upstream never cached the client's text of it, so its breakpoint is dropped.
    A breakpoint on a message the view holds as the client sent it stays."""
    client = an(gateway, _key(upstream))
    huge = "line of output\n" * 3000  # 45,000 chars: over the 32,768 threshold
    mark = {"type": "ephemeral"}
    result_block = {"type": "tool_result", "tool_use_id": "toolu_1", "content": huge}
    client.messages.create(
        model="claude-x",
        max_tokens=100,
        tools=[_tool("Bash")],
        messages=[
            {
                "role": "user",
                "content": [{"type": "text", "text": "run it", "cache_control": mark}],
            },
            {"role": "assistant", "content": [a_tool_use("Bash", {"cmd": "cat log"}, "toolu_1")]},
            {
                "role": "user",
                "content": [
                    {**result_block, "cache_control": mark},
                    {"type": "text", "text": "what failed?"},
                ],
            },
        ],
    )
    sent = upstream.requests[0]
    assert_valid_request(sent)
    result = next(b for t in sent["messages"] for b in blocks_of(t) if b["type"] == "tool_result")
    assert "[preview:" in result["content"] and len(result["content"]) < len(huge)
    assert "cache_control" not in result
    texts = [text for text, _ in _marks(sent)]
    assert "run it" in texts  # the client's, on a message the view holds as it sent it
    assert texts[-1] == "what failed?"  # the view's own last breakpoint


def test_context_management_is_scrolls_to_do_and_is_not_forwarded(gateway, upstream):
    """The API's server-side context management (context editing's clear-tool-uses edit,
    threshold compaction's ``compact_20260112``), asked with the official client's beta
    call: the request is served from Scroll's view, the edits do not go up (the view is
    already under the key's window and the log keeps what they would drop), so no
    compaction block comes back; the beta header goes up as the client sent it."""
    client = an(gateway, _key(upstream))
    upstream.then(a_message([{"type": "text", "text": f"It says hello.\n{HEADLINE}"}]))
    betas = ["context-management-2025-06-27", "compact-2026-01-12"]
    edits = [
        {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 30000},
         "keep": {"type": "tool_uses", "value": 1}},
        {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 50000},
         "pause_after_compaction": True},
    ]  # fmt: skip
    reply = client.beta.messages.create(
        model="claude-x",
        max_tokens=100,
        betas=betas,
        tools=[{"name": "read", "description": "Read a file.",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}],
        messages=[
            {"role": "user", "content": "What does a.txt say?"},
            {"role": "assistant", "content": [a_tool_use("read", {"path": "a.txt"}, "toolu_1")]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "hello"}]},
        ],
        context_management={"edits": edits},
    )  # fmt: skip
    assert [b.type for b in reply.content] == ["text"] and reply.stop_reason == "end_turn"
    assert reply.content[0].text == "It says hello."
    sent = upstream.requests[0]
    assert_valid_request(sent)
    assert "context_management" not in sent
    assert "hello" in json.dumps(sent["messages"])  # the tool result Scroll keeps in its view
    assert set(upstream.headers[0]["anthropic-beta"].split(",")) == set(betas)
