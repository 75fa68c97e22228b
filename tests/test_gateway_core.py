"""The gateway's core: alignment, rewrites, retries, the view sent upstream and the recall
loop through a real sandboxed kernel, with an in-memory scripted upstream."""

from __future__ import annotations

import json

import pytest

from scroll_core.errors import ContextOverflow, GatewayRequestInvalid, ModelError
from scroll_core.gateway import (
    ClientMessage,
    GatewayConversation,
    align,
    extractive_headline,
    parse_chat_request,
    session_id_for,
)
from scroll_core.headlines import parse_headline
from scroll_core.kernel import Kernel, KernelConfig
from scroll_core.models import ModelReply, ToolCall, Usage
from scroll_core.profile import Profile
from scroll_core.prompts import HEADLINE_INSTRUCTION, RECALL_TOOL
from scroll_core.store import EventLog
from scroll_core.tokens import CharRatioCounter, default_counter

HEADLINE = "⟦chat | status: answered; next: wait | anchors: test⟧"


class ScriptedUpstream:
    """Replies from a script and records every request (messages, tools, model)."""

    def __init__(self, *replies):
        self.script = list(replies)
        self.requests: list[dict] = []

    def complete(self, messages, tools, *, model, params):
        self.requests.append(
            {"messages": messages, "tools": tools, "model": model, "params": params}
        )
        item = self.script.pop(0) if self.script else f"ok {len(self.requests)}\n{HEADLINE}"
        if isinstance(item, Exception):
            raise item
        if callable(item):
            item = item(messages)
        if isinstance(item, str):
            return ModelReply(item, usage=Usage(100, 10))
        return item


def call(name, args, call_id):
    return ToolCall(call_id, name, args, json.dumps(args))


def with_calls(text, *calls):
    return ModelReply(text, tuple(calls), Usage(50, 5), "tool_calls")


@pytest.fixture
def clog(tmp_path):
    with EventLog(tmp_path / "eventlog.sqlite3", token_counter=CharRatioCounter()) as log:
        yield log


@pytest.fixture(scope="module")
def kernel():
    with Kernel(KernelConfig(sandbox="process", grace_s=0.5)) as k:
        yield k


def conversation(log, kernel=None, *, context_size=8192, agent="alice", session="gw:alice:s"):
    return GatewayConversation(
        log,
        session_id=session,
        agent_id=agent,
        profile=Profile(context_size=context_size),
        kernel=kernel,
    )


def request(*messages, system="You are terse.", tools=(), **body):
    return parse_chat_request(
        {
            "model": "client-model",
            "messages": [{"role": "system", "content": system}, *messages],
            "tools": list(tools) or None,
            **body,
        }
    )


def user(text):
    return {"role": "user", "content": text}


def assistant_of(reply):
    message = {"role": "assistant", "content": reply.content or None}
    if reply.tool_calls:
        message["tool_calls"] = [c.to_message() for c in reply.tool_calls]
    return message


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def test_malformed_bodies_name_the_field():
    cases = [
        ({"messages": [user("hi")]}, "model"),
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}, "messages.0.role"),
        ({"model": "m", "messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
        ({"model": "m", "messages": [user("x")], "n": 2}, "n"),
        ({"model": "m", "messages": [{"role": "tool", "content": "x"}]}, "messages.0.tool_call_id"),
        (
            {
                "model": "m",
                "messages": [user("x")],
                "tools": [{"type": "function", "function": {}}],
            },
            "tools.0.function.name",
        ),
    ]
    for body, param in cases:
        with pytest.raises(GatewayRequestInvalid) as caught:
            parse_chat_request(body)
        assert caught.value.param == param


def test_session_ids_are_derived_from_agent_system_and_first_message_or_named():
    a = session_id_for("alice", header=None, system="s", first_user="hello")
    assert a == session_id_for("alice", header=None, system="s", first_user="hello")
    assert a != session_id_for("bob", header=None, system="s", first_user="hello")
    assert a != session_id_for("alice", header=None, system="s", first_user="hello!")
    assert session_id_for("alice", header="proj-1", system="s", first_user="x") == "gw:alice:proj-1"
    with pytest.raises(GatewayRequestInvalid):
        session_id_for("alice", header="bad name with spaces", system="", first_user="")


def test_alignment_tells_extend_retry_and_rewrite_apart():
    assert align(["a", "b"], ["a", "b", "c"], [False, True]).kind == "extend"
    assert align(["a", "b"], ["a"], [False, True]).kind == "retry"
    found = align(["a", "b", "c"], ["a", "x"], [False, True, False])
    assert (found.kind, found.common) == ("rewrite", 1)


def test_the_extractive_headline_parses_and_carries_anchors():
    line = extractive_headline("When did Melanie visit Paris in 2023?", "She went in May 2023.")
    parsed = parse_headline("text\n" + line)
    assert parsed.quality == "ok"
    assert "Melanie" in parsed.headline.anchors and "2023" in parsed.headline.anchors


def test_only_the_new_suffix_is_appended_and_the_headline_is_stripped_and_stored(clog):
    upstream = ScriptedUpstream(f"Hello there.\n{HEADLINE}", f"Second.\n{HEADLINE}")
    conv = conversation(clog)
    first = conv.handle(request(user("hi")), upstream, model="up")
    assert first.content == "Hello there."
    count = clog.count("gw:alice:s")
    second = conv.handle(
        request(user("hi"), assistant_of(first), user("again")), upstream, model="up"
    )
    assert second.content == "Second." and second.stats.appended == 1
    assert clog.count("gw:alice:s") == count + 2  # the new user message and the reply
    replies = [
        e for e in clog.session_events("gw:alice:s", limit=None) if e.metadata.get("gw") == "reply"
    ]
    assert [e.headline for e in replies] == [HEADLINE, HEADLINE]
    # The upstream got the client's system prompt and the headline instruction; nothing is
    # evicted yet, so no recall tool and no rubric.
    sent = upstream.requests[1]
    assert sent["messages"][0]["role"] == "system"
    assert sent["messages"][0]["content"] == f"You are terse.\n\n{HEADLINE_INSTRUCTION}"
    assert sent["tools"] == []
    assert [m["content"] for m in sent["messages"] if m["role"] == "user"] == ["hi", "again"]


def test_before_the_first_eviction_scroll_adds_at_most_200_tokens_and_no_tool(clog):
    counter = default_counter()
    upstream = ScriptedUpstream()
    conv = conversation(clog, context_size=4096)
    system = "You are a coding agent. Be brief."
    history = [user("Fix the failing test in tests/test_x.py, please.")]
    added: list[int] = []  # tokens sent upstream beyond the client's own request
    tools: list[list[str]] = []
    for i in range(30):
        body = request(*history, system=system, tools=[WEATHER])
        reply = conv.handle(body, upstream, model="up")
        sent = upstream.requests[-1]
        tools.append([t["function"]["name"] for t in sent["tools"]])
        evicted = bool(conv.index.blocks)
        if not evicted:
            text = json.dumps(sent["messages"], ensure_ascii=False) + json.dumps(sent["tools"])
            mine = json.dumps([{"role": "system", "content": system}, *history], ensure_ascii=False)
            added.append(counter.count(text) - counter.count(mine + json.dumps([WEATHER])))
            assert tools[-1] == ["get_weather"]
        else:
            assert tools[-1] == ["get_weather", RECALL_TOOL]
            assert RECALL_TOOL in sent["messages"][0]["content"]  # and its instructions
        history += [assistant_of(reply), user(f"step {i}: " + "more output of the test run " * 30)]
    assert added and max(added) <= 200
    assert any(RECALL_TOOL in names for names in tools)  # the first eviction brought it


def test_a_retry_appends_nothing_and_gets_the_same_reply(clog):
    upstream = ScriptedUpstream(f"Only once.\n{HEADLINE}")
    conv = conversation(clog)
    first = conv.handle(request(user("hi")), upstream, model="up")
    count = clog.count("gw:alice:s")
    again = conv.handle(request(user("hi")), upstream, model="up")
    assert again.content == first.content and again.stats.replayed
    assert clog.count("gw:alice:s") == count
    assert len(upstream.requests) == 1
    # A fresh process rebuilds the chain from the log and still recognises the retry.
    cold = conversation(clog)
    assert cold.handle(request(user("hi")), upstream, model="up").content == "Only once."
    assert clog.count("gw:alice:s") == count


def test_a_rewritten_history_is_recorded_and_loses_nothing(clog):
    upstream = ScriptedUpstream()
    conv = conversation(clog)
    r1 = conv.handle(request(user("the code word is PELICAN")), upstream, model="up")
    r2 = conv.handle(
        request(user("the code word is PELICAN"), assistant_of(r1), user("and FALCON")),
        upstream,
        model="up",
    )
    before = {e.seq: e.content for e in clog.session_events("gw:alice:s", limit=None)}
    # The client compacts: its history is now a summary and a new question.
    r3 = conv.handle(
        request(user("summary: words were given"), user("what now?")), upstream, model="up"
    )
    assert r3.stats.rewritten
    after = {e.seq: e.content for e in clog.session_events("gw:alice:s", limit=None)}
    assert all(after[seq] == text for seq, text in before.items())  # nothing lost
    marker = [
        e
        for e in clog.session_events("gw:alice:s", limit=None)
        if e.metadata.get("gw") == "rewrite"
    ]
    assert len(marker) == 1 and "rewrote its history" in marker[0].content
    sent = upstream.requests[-1]["messages"]
    texts = " ".join(str(m["content"]) for m in sent)
    assert "PELICAN" not in texts and "FALCON" not in texts  # out of the view...
    assert "ms.expand(" in texts  # ...with the way back named
    assert r2.content  # and the old replies are still in the log
    # Continuing the rewritten history extends it.
    r4 = conv.handle(
        request(user("summary: words were given"), user("what now?"), assistant_of(r3), user("ok")),
        upstream,
        model="up",
    )
    assert not r4.stats.rewritten and r4.stats.appended == 1


def test_the_recall_cell_runs_in_the_kernel_and_its_printout_reaches_the_upstream(clog, kernel):
    code = "hits = ms.search('PELICAN', k=5)\nprint('found', len(hits), [h.seq for h in hits])"
    upstream = ScriptedUpstream(
        f"The word is set.\n{HEADLINE}",
        with_calls("", call(RECALL_TOOL, {"code": code}, "call_r1")),
        lambda messages: ModelReply(
            "It was PELICAN.\n" + HEADLINE
            if any("found" in str(m.get("content")) for m in messages if m["role"] == "tool")
            else "no evidence",
            usage=Usage(100, 10),
        ),
    )
    conv = conversation(clog, kernel)
    r1 = conv.handle(request(user("remember the code word PELICAN")), upstream, model="up")
    r2 = conv.handle(
        request(
            user("remember the code word PELICAN"), assistant_of(r1), user("what was the word?")
        ),
        upstream,
        model="up",
    )
    assert r2.content == "It was PELICAN."
    assert r2.stats.recalls == 1 and r2.stats.upstream_calls == 2
    assert r2.usage.input_tokens == 50 + 100  # summed over the internal calls
    third = upstream.requests[2]["messages"]
    result = [m for m in third if m["role"] == "tool"]
    assert result and result[0]["tool_call_id"] == "call_r1" and "found" in result[0]["content"]
    pelican = next(
        e.seq for e in clog.session_events("gw:alice:s") if e.content.endswith("PELICAN")
    )
    assert str(pelican) in result[0]["content"]
    # The recall call and its result are logged but never searchable, and not the client's.
    events = clog.session_events("gw:alice:s", limit=None)
    cell = [e for e in events if e.name == RECALL_TOOL]
    assert len(cell) == 2 and all(e.metadata.get("gw") == "step" for e in cell)
    assert all(h.seq not in {e.seq for e in cell} for h in clog.search("PELICAN"))
    assert not r2.tool_calls


def test_client_tools_pass_through_untouched_and_their_results_come_back(clog, kernel):
    weather = call("get_weather", {"city": "Paris"}, "call_w1")
    upstream = ScriptedUpstream(
        with_calls(f"Checking.\n{HEADLINE}", weather), f"It is sunny.\n{HEADLINE}"
    )
    conv = conversation(clog, kernel)
    r1 = conv.handle(request(user("weather in Paris?"), tools=[WEATHER]), upstream, model="up")
    assert r1.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in r1.tool_calls] == [
        ("call_w1", "get_weather", {"city": "Paris"})
    ]
    assert upstream.requests[0]["tools"][0] == WEATHER  # the client's schema, as sent
    r2 = conv.handle(
        request(
            user("weather in Paris?"),
            assistant_of(r1),
            {"role": "tool", "tool_call_id": "call_w1", "content": "sunny, 21C"},
            tools=[WEATHER],
        ),
        upstream,
        model="up",
    )
    assert r2.content == "It is sunny." and r2.stats.appended == 1
    sent = upstream.requests[1]["messages"]
    assert {"role": "tool", "content": "sunny, 21C", "tool_call_id": "call_w1"} in sent


def test_a_reply_mixing_recall_and_client_calls_returns_the_client_calls_and_runs_the_recall(
    clog, kernel
):
    upstream = ScriptedUpstream(
        with_calls(
            f"Both.\n{HEADLINE}",
            call(RECALL_TOOL, {"code": "print('recalled', 6 * 7)"}, "call_r"),
            call("get_weather", {"city": "Oslo"}, "call_c"),
        ),
        f"Done.\n{HEADLINE}",
    )
    conv = conversation(clog, kernel)
    r1 = conv.handle(request(user("go"), tools=[WEATHER]), upstream, model="up")
    assert [c.name for c in r1.tool_calls] == ["get_weather"] and r1.stats.recalls == 1
    r2 = conv.handle(
        request(
            user("go"),
            assistant_of(r1),
            {"role": "tool", "tool_call_id": "call_c", "content": "snow"},
            tools=[WEATHER],
        ),
        upstream,
        model="up",
    )
    assert r2.content == "Done." and not r2.stats.rewritten
    sent = upstream.requests[1]["messages"]
    calls = [c["id"] for m in sent if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    results = [m for m in sent if m["role"] == "tool"]
    assert calls == ["call_r", "call_c"]
    assert [m["tool_call_id"] for m in results] == ["call_r", "call_c"]
    assert "recalled 42" in results[0]["content"]


def test_every_view_sent_upstream_is_under_the_window_and_the_index_appears(clog):
    upstream = ScriptedUpstream()
    conv = conversation(clog, context_size=2048)
    history = []
    for i in range(40):
        history.append(user(f"message {i}: " + "lorem ipsum dolor sit amet " * 12))
        reply = conv.handle(request(*history), upstream, model="up")
        history.append(assistant_of(reply))
        assert reply.stats.peak_view_tokens <= 2048
    counter = CharRatioCounter()
    for sent in upstream.requests:
        text = json.dumps(sent["messages"]) + json.dumps(sent["tools"])
        assert counter.count(text) <= 2048 * 1.2  # our count plus JSON framing
    assert conv.index.blocks
    assert "seq" in upstream.requests[-1]["messages"][1]["content"]  # the index leads the tail
    assert reply.stats.client_tokens > reply.stats.upstream_tokens


def test_a_missing_headline_falls_back_to_an_extractive_one(clog):
    conv = conversation(clog)
    reply = conv.handle(
        request(user("Where is Melanie going in June?")),
        ScriptedUpstream("To Paris with Caroline."),
        model="up",
    )
    assert reply.content == "To Paris with Caroline."
    event = next(
        e for e in clog.session_events("gw:alice:s", limit=None) if e.metadata.get("gw") == "reply"
    )
    assert event.metadata["headline_quality"] == "missing"
    assert event.metadata["headline_source"] == "extractive"
    assert parse_headline("x\n" + event.headline).quality == "ok" and "Melanie" in event.headline


def test_a_context_overflow_forces_a_compress_and_one_retry(clog):
    overflow = ContextOverflow("maximum context length exceeded", status=400)
    conv = conversation(clog)
    upstream = ScriptedUpstream(overflow, f"fits now\n{HEADLINE}")
    reply = conv.handle(request(user("hello")), upstream, model="up")
    assert reply.content == "fits now" and reply.stats.upstream_calls == 2
    with pytest.raises(ContextOverflow):
        conv.handle(
            request(user("hello"), assistant_of(reply), user("more")),
            ScriptedUpstream(overflow, overflow),
            model="up",
        )


def test_an_upstream_error_keeps_the_clients_messages_and_a_retry_then_succeeds(clog):
    conv = conversation(clog)
    with pytest.raises(ModelError):
        conv.handle(
            request(user("hello")), ScriptedUpstream(ModelError("boom", status=500)), model="up"
        )
    count = clog.count("gw:alice:s")
    reply = conv.handle(request(user("hello")), ScriptedUpstream(), model="up")
    assert reply.content == "ok 1"
    assert clog.count("gw:alice:s") == count + 1  # only the reply: the message was there


def test_client_messages_fingerprint_ignores_json_spelling():
    a = ClientMessage(
        "assistant", "x ", (ToolCall("c", "f", {"a": 1, "b": 2}, '{"a": 1, "b": 2}'),)
    )
    b = ClientMessage("assistant", "x", (ToolCall("c", "f", {"b": 2, "a": 1}, '{"b":2,"a":1}'),))
    assert a.fingerprint() == b.fingerprint()


def test_one_agents_recall_never_reaches_another_agents_memory(clog, kernel):
    alice = conversation(clog, kernel, agent="alice", session="gw:alice:s")
    alice.handle(request(user("my secret is ZEBRA-4471")), ScriptedUpstream(), model="up")
    code = (
        "print('hits', [(h.seq, h.snippet) for h in ms.search('ZEB' + 'RA', k=5)])\n"
        "print('sessions', [s.session_id for s in ms.sessions()])\n"
        "rows = ms.sql_query('SELECT seq, content FROM events WHERE content LIKE ?',"
        " ['%ZEB' + 'RA%'])\n"
        "print('sql', rows.rows if hasattr(rows, 'rows') else rows['rows'])"
    )
    upstream = ScriptedUpstream(
        with_calls("", call(RECALL_TOOL, {"code": code}, "call_b")), "nothing found"
    )
    bob = conversation(clog, kernel, agent="bob", session="gw:bob:s")
    bob.handle(request(user("what secrets exist?")), upstream, model="up")
    printed = next(m for m in upstream.requests[1]["messages"] if m["role"] == "tool")["content"]
    assert (
        "hits []" in printed
        and "ZEBRA" not in printed
        and "sql []" in printed
        and "gw:alice:s" not in printed
    )


def test_every_request_is_one_trace_with_the_model_calls_and_the_cell_inside(clog, kernel, ring):
    from scroll_core.gateway.conversation import REQUEST_SPAN

    upstream = ScriptedUpstream(
        with_calls("", call(RECALL_TOOL, {"code": "print(len(ms.search('x')))"}, "call_t")),
        f"done\n{HEADLINE}",
    )
    conversation(clog, kernel).handle(request(user("trace me")), upstream, model="up-model")
    (root,) = ring.records(REQUEST_SPAN)
    assert root.kind == "server" and root.session_id == "gw:alice:s"
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.usage.input_tokens"] == 150
    chats = ring.records("chat up-model")
    assert len(chats) == 2 and all(c.parent_id == root.span_id for c in chats)
    assert all(c.trace_id == root.trace_id for c in chats)
    assert chats[-1].attributes["scroll.headline_quality"] == "ok"
    tools = ring.records(f"execute_tool {RECALL_TOOL}")
    assert tools and all(t.trace_id == root.trace_id for t in tools)


def test_anthropic_bodies_map_blocks_and_tools_and_name_bad_fields():
    from scroll_core.gateway import parse_messages_request

    body = {
        "model": "claude",
        "max_tokens": 100,
        "system": [{"type": "text", "text": "Be exact.", "cache_control": {"type": "ephemeral"}}],
        "tools": [
            {"name": "Read", "description": "read", "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search"},
        ],
        "messages": [
            {"role": "user", "content": "read a.txt"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "x"},
                    {"type": "text", "text": "Reading."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "Read",
                        "input": {"path": "a.txt"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "hello"}],
                    },
                    {"type": "text", "text": "and now?"},
                ],
            },
        ],
    }
    parsed = parse_messages_request(body)
    assert parsed.system == "Be exact."
    assert [t["function"]["name"] for t in parsed.tools] == ["Read"]  # the server tool left out
    assert [(m.role, m.content) for m in parsed.messages] == [
        ("user", "read a.txt"),
        ("assistant", "Reading."),
        ("tool", "hello"),
        ("user", "and now?"),
    ]
    assert parsed.messages[1].tool_calls[0].arguments == {"path": "a.txt"}
    for broken, param in [
        ({**body, "max_tokens": None}, "max_tokens"),
        ({**body, "messages": [{"role": "tool", "content": "x"}]}, "messages.0.role"),
        ({**body, "messages": [{"role": "system", "content": "x"}]}, "messages"),
        (
            {
                **body,
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "system", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
                ],
            },
            "messages.1.content.0.type",
        ),
        (
            {**body, "messages": [{"role": "user", "content": [{"type": "tool_use"}]}]},
            "messages.0.content.0.type",
        ),
    ]:
        with pytest.raises(GatewayRequestInvalid) as caught:
            parse_messages_request(broken)
        assert caught.value.param == param


def test_a_system_message_inside_an_anthropic_history_stays_where_it_stands():
    """Claude Code (late 2026) sends its environment section as a ``system``-role message
    after the first user turn; it is a system message of the history, in its place, whether
    its content is a string or text blocks, and an empty one is no message at all."""
    from scroll_core.gateway import parse_messages_request

    env = [{"type": "text", "text": "# Environment", "cache_control": {"type": "ephemeral"}}]
    parsed = parse_messages_request(
        {
            "model": "claude",
            "max_tokens": 100,
            "messages": [
                {"role": "user", "content": "<system-reminder>attribution</system-reminder>"},
                {"role": "system", "content": env},
                {"role": "user", "content": "Say hi"},
                {"role": "assistant", "content": "hi"},
                {"role": "system", "content": ""},
                {"role": "system", "content": "Be brief from here on."},
                {"role": "user", "content": "again"},
            ],
        }
    )
    assert [(m.role, m.content) for m in parsed.messages] == [
        ("user", "<system-reminder>attribution</system-reminder>"),
        ("system", "# Environment"),
        ("user", "Say hi"),
        ("assistant", "hi"),
        ("system", "Be brief from here on."),
        ("user", "again"),
    ]


def test_an_operators_grant_lets_one_agent_read_another(clog, kernel):
    alice = conversation(clog, kernel, agent="alice", session="gw:alice:s")
    alice.handle(request(user("the launch code is OCELOT-12")), ScriptedUpstream(), model="up")
    code = "print('hits', [h.session_id for h in ms.search('OCE' + 'LOT', k=5, agent='alice')])"
    upstream = ScriptedUpstream(with_calls("", call(RECALL_TOOL, {"code": code}, "call_g")), "ok")
    bob = GatewayConversation(
        clog,
        session_id="gw:bob:g",
        agent_id="bob",
        profile=Profile(context_size=8192),
        kernel=kernel,
        readable_agents=lambda agent: ["alice"] if agent == "bob" else [],
    )
    bob.handle(request(user("what did alice say?")), upstream, model="up")
    printed = next(m for m in upstream.requests[1]["messages"] if m["role"] == "tool")["content"]
    assert "gw:alice:s" in printed


@pytest.mark.parametrize(
    ("max_tokens", "says"),
    [
        (None, "is required (a positive integer)"),
        ("ten", "must be a positive integer, not str"),
        (True, "must be a positive integer, not bool"),
        (2.5, "must be a positive integer, not float"),
        (0, "must be a positive integer, not 0"),
        (-3, "must be a positive integer, not -3"),
    ],
)
def test_an_anthropic_max_tokens_of_the_wrong_type_or_value_is_named_as_such(max_tokens, says):
    from scroll_core.gateway import parse_messages_request

    body = {"model": "claude", "messages": [{"role": "user", "content": "hi"}]}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    with pytest.raises(GatewayRequestInvalid) as caught:
        parse_messages_request(body)
    assert caught.value.param == "max_tokens"
    assert says in str(caught.value)


def test_with_content_capture_each_chat_span_holds_exactly_what_the_upstream_received(
    clog, kernel, ring, monkeypatch
):
    from scroll_core.genai_content import input_messages, system_instructions

    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    upstream = ScriptedUpstream(
        with_calls("", call(RECALL_TOOL, {"code": "print(len(ms.search('x')))"}, "call_c")),
        f"done\n{HEADLINE}",
    )
    conversation(clog, kernel).handle(request(user("show me")), upstream, model="up-model")
    chats = ring.records("chat up-model")
    assert len(chats) == len(upstream.requests) == 2
    for chat, received in zip(chats, upstream.requests, strict=True):
        sent = received["messages"]
        assert json.loads(chat.attributes["gen_ai.input.messages"]) == input_messages(sent)
        instructions = json.loads(chat.attributes["gen_ai.system_instructions"])
        assert instructions == system_instructions(sent)
        assert instructions[0]["content"].startswith("You are terse.")
    first_reply = json.loads(chats[0].attributes["gen_ai.output.messages"])[0]
    assert first_reply["finish_reason"] == "tool_call"
    assert first_reply["parts"][0]["name"] == RECALL_TOOL
    last_input = json.loads(chats[1].attributes["gen_ai.input.messages"])
    assert last_input[-1]["parts"][0]["type"] == "tool_call_response"
    assert last_input[-1]["parts"][0]["id"] == "call_c"
