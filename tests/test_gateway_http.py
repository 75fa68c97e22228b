"""The gateway end to end: the official openai and anthropic clients against daphne on
loopback, the upstream a scripted loopback server that records what it receives."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest
from gateway_clients import WEATHER, an, ask, assistant_of, make_key, oa
from gateway_upstream import HEADLINE, Reply, completion, error, text, tool_call

from dashboard.gateway.models import GatewayKey
from dashboard.gateway.service import get_service
from dashboard.runs.models import CompressEvent, RunRecord, TuningProfile
from scroll_core.prompts import RECALL_TOOL

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_openai_client_gets_a_completion_with_usage_and_the_extension(
    gateway, upstream, console_log
):
    key = make_key(upstream)
    raw = oa(gateway, key).chat.completions.with_raw_response.create(
        model="gpt-test",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}],
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "ok 1"  # the headline is stripped
    assert completion.usage.prompt_tokens == 120 and completion.usage.completion_tokens == 12
    extension = completion.to_dict()["scroll"]
    assert completion.model_extra["scroll"] == extension  # as docs/gateway.md shows it
    assert extension["upstream_calls"] == 1 and extension["client_tokens"] > 0
    session = raw.headers["x-scroll-session"]
    assert session.startswith("gw:alice:")
    sent = upstream.requests[0]
    assert sent["model"] == "upstream-model"  # mapped
    assert upstream.headers[0]["authorization"] == "Bearer sk-upstream-secret"  # from the env
    assert sent["messages"][0]["content"].startswith("Be brief.")
    # The reply is committed just after the answer left, the console's record after that.
    get_service().flush()
    assert [
        e.role for e in console_log.session_events(session) if e.metadata.get("gw") != "prefix"
    ] == [
        "user",
        "assistant",
    ]
    run = RunRecord.objects.get(session_id=session)
    assert run.kind == "gateway" and run.turns == 1 and run.status == "done"
    assert CompressEvent.objects.filter(session_id=session).exists()


async def test_the_async_openai_client_works_too(gateway, upstream):
    from asgiref.sync import sync_to_async

    key = await sync_to_async(make_key)(upstream)
    client = openai.AsyncOpenAI(base_url=f"{gateway}/v1", api_key=key, max_retries=0)
    completion = await client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": "hi"}]
    )
    assert completion.choices[0].message.content == "ok 1"
    models = await client.models.list()
    assert [m.id for m in models.data] == ["gpt-test"]
    await client.close()


def test_client_tools_pass_through_untouched_streamed_and_not(gateway, upstream):
    key = make_key(upstream)
    client = oa(gateway, key)
    call = tool_call("get_weather", {"city": "Paris"}, "call_w1")
    upstream.then(completion(f"Checking.\n{HEADLINE}", [call]), text("Sunny in Paris."))
    history = [{"role": "user", "content": "weather in Paris?"}]
    # Streamed: the official helper assembles the tool-call deltas and validates the stream.
    with client.chat.completions.stream(
        model="gpt-test", messages=history, tools=[WEATHER]
    ) as stream:
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert final.choices[0].finish_reason == "tool_calls"
    assert [
        (c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls
    ] == [("call_w1", "get_weather", {"city": "Paris"})]
    assert message.content == "Checking."
    assert upstream.requests[0]["tools"][0] == WEATHER
    assert [t["function"]["name"] for t in upstream.requests[0]["tools"]] == ["get_weather"]
    history += [
        assistant_of(final),
        {"role": "tool", "tool_call_id": "call_w1", "content": "sunny, 21C"},
    ]
    answer = ask(client, history, tools=[WEATHER])
    assert answer.choices[0].message.content == "Sunny in Paris."
    assert {
        "role": "tool",
        "content": "sunny, 21C",
        "tool_call_id": "call_w1",
    } in upstream.requests[1]["messages"]


def test_a_plain_stream_has_well_formed_chunks_and_usage(gateway, upstream):
    client = oa(gateway, make_key(upstream))
    upstream.then(text("A fairly long answer " * 8))
    chunks = list(
        ask(
            client,
            [{"role": "user", "content": "talk"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    body = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert body == ("A fairly long answer " * 8).strip()
    assert chunks[-1].usage.prompt_tokens == 120 and not chunks[-1].choices
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


def test_the_recall_cell_runs_in_the_kernel_invisibly_and_its_printout_reaches_the_upstream(
    gateway, upstream
):
    client = oa(gateway, make_key(upstream))
    code = "hits = ms.search('PELICAN', k=5)\nprint('evidence:', [h.snippet for h in hits])"
    first = ask(client, [{"role": "user", "content": "the code word is PELICAN"}])
    upstream.then(
        completion("", [tool_call(RECALL_TOOL, {"code": code}, "call_r")]), text("It was PELICAN.")
    )
    history = [
        {"role": "user", "content": "the code word is PELICAN"},
        assistant_of(first),
        {"role": "user", "content": "what was the code word?"},
    ]
    answer = ask(client, history)
    assert answer.choices[0].message.content == "It was PELICAN."
    assert not answer.choices[0].message.tool_calls  # the recall call stayed inside
    assert answer.usage.prompt_tokens == 240  # two upstream calls summed
    assert answer.to_dict()["scroll"]["recalls"] == 1
    result = [m for m in upstream.requests[2]["messages"] if m["role"] == "tool"]
    assert result[0]["tool_call_id"] == "call_r" and "PELICAN" in result[0]["content"]


def test_a_retry_appends_nothing(gateway, upstream, console_log):
    client = oa(gateway, make_key(upstream))
    history = [{"role": "user", "content": "once only"}]
    raw = client.chat.completions.with_raw_response.create(model="gpt-test", messages=history)
    session = raw.headers["x-scroll-session"]
    get_service().flush()  # the reply's commit, just after the answer left
    count = console_log.count(session)
    again = ask(client, history)
    assert again.choices[0].message.content == raw.parse().choices[0].message.content
    assert again.to_dict()["scroll"]["replayed"] is True
    assert console_log.count(session) == count and len(upstream.requests) == 1


def test_a_rewritten_history_loses_nothing(gateway, upstream, console_log):
    client = oa(gateway, make_key(upstream))
    headers = {"X-Scroll-Session": "compacting"}
    h = [{"role": "user", "content": "remember FALCON"}]
    h.append(assistant_of(ask(client, h, extra_headers=headers)))
    h.append({"role": "user", "content": "and OSPREY"})
    ask(client, h, extra_headers=headers)
    get_service().flush()  # the reply's commit, just after the answer left
    before = {
        e.seq: e.content for e in console_log.session_events("gw:alice:compacting", limit=None)
    }
    rewritten = ask(
        client, [{"role": "user", "content": "(summary) two birds"}], extra_headers=headers
    )
    assert rewritten.to_dict()["scroll"]["rewritten"] is True
    after = {
        e.seq: e.content for e in console_log.session_events("gw:alice:compacting", limit=None)
    }
    assert all(after[s] == c for s, c in before.items())
    assert "FALCON" not in json.dumps(upstream.requests[-1]["messages"])


def test_bad_keys_and_malformed_bodies_get_the_providers_errors(gateway, upstream):
    make_key(upstream)
    with pytest.raises(openai.AuthenticationError) as caught:
        ask(oa(gateway, "sk-scroll-wrongwrongwrong"), [{"role": "user", "content": "x"}])
    assert caught.value.status_code == 401 and caught.value.body["code"] == "invalid_api_key"
    with pytest.raises(anthropic.AuthenticationError):
        an(gateway, "nope").messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    key = make_key(upstream, agent="bob")
    with pytest.raises(openai.BadRequestError) as caught:
        ask(oa(gateway, key), [{"role": "user", "content": 7}])
    assert caught.value.body["param"] == "messages.0.content"
    with pytest.raises(anthropic.BadRequestError) as bad:
        an(gateway, key).messages.create(
            model="m", max_tokens=0, messages=[{"role": "user", "content": "x"}]
        )
    assert bad.value.body["error"]["type"] == "invalid_request_error" and "max_tokens" in str(
        bad.value
    )
    assert upstream.requests == []  # nothing reached the upstream


def test_upstream_errors_and_timeouts_are_mapped_with_the_message_kept(gateway, upstream):
    client = oa(gateway, make_key(upstream, upstream_timeout_s=0.5))
    upstream.then(error(500, "the GPU caught fire"))
    with pytest.raises(openai.APIStatusError) as caught:
        ask(client, [{"role": "user", "content": "a"}])
    assert caught.value.status_code == 502 and "the GPU caught fire" in caught.value.message
    upstream.then(error(429, "slow down", "rate_limit"))
    with pytest.raises(openai.RateLimitError):
        ask(client, [{"role": "user", "content": "b"}])
    upstream.then(Reply(200, completion("late").body, delay=30))
    with pytest.raises(openai.APIStatusError) as caught:
        ask(client, [{"role": "user", "content": "c"}])
    assert caught.value.status_code == 504
    upstream.release.set()


def test_the_rate_limit_answers_429(gateway, upstream):
    client = oa(gateway, make_key(upstream, rate_limit_per_minute=1))
    ask(client, [{"role": "user", "content": "one"}])
    with pytest.raises(openai.RateLimitError):
        ask(client, [{"role": "user", "content": "two"}])


def test_a_spent_token_budget_answers_429_in_either_shape(gateway, upstream):
    key = make_key(upstream, token_budget=100)
    ask(oa(gateway, key), [{"role": "user", "content": "one"}])  # spends 132
    with pytest.raises(openai.RateLimitError) as caught:
        ask(oa(gateway, key), [{"role": "user", "content": "two"}])
    assert "token budget" in caught.value.message
    with pytest.raises(anthropic.RateLimitError):
        an(gateway, key).messages.create(
            model="m", max_tokens=10, messages=[{"role": "user", "content": "three"}]
        )
    get_service().flush()
    assert GatewayKey.objects.get(agent_id="alice").tokens_used == 132


def test_every_view_sent_upstream_is_under_its_window_and_the_index_appears(gateway, upstream):
    profile = TuningProfile.objects.create(name="gw-small", context_size=2048)
    client = oa(gateway, make_key(upstream, profile=profile))
    history = []
    for i in range(30):
        history.append(
            {"role": "user", "content": f"note {i}: " + "the quick brown fox jumps " * 15}
        )
        reply = ask(client, history)
        history.append(assistant_of(reply))
        assert reply.to_dict()["scroll"]["peak_view_tokens"] <= 2048
    assert any(
        "seq" in str(m["content"]) and "note 0" not in str(m["content"])
        for m in upstream.requests[-1]["messages"][1:2]
    )
    assert reply.to_dict()["scroll"]["client_tokens"] > reply.to_dict()["scroll"]["upstream_tokens"]


def test_the_anthropic_client_streams_and_uses_tools(gateway, upstream):
    key = make_key(upstream)
    client = an(gateway, key)
    tools = [
        {
            "name": "get_weather",
            "description": "Weather.",
            "input_schema": WEATHER["function"]["parameters"],
        }
    ]
    upstream.then(
        completion(
            f"Let me check.\n{HEADLINE}", [tool_call("get_weather", {"city": "Oslo"}, "toolu_1")]
        )
    )
    messages = [{"role": "user", "content": "weather in Oslo?"}]
    with client.messages.stream(
        model="claude-x", max_tokens=200, system="You help.", messages=messages, tools=tools
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [(b.type, getattr(b, "input", None)) for b in final.content] == [
        ("text", None),
        ("tool_use", {"city": "Oslo"}),
    ]
    assert final.content[0].text == "Let me check."
    assert upstream.requests[0]["tools"][0]["function"]["name"] == "get_weather"
    messages += [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in final.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "snow"}],
        },
    ]
    upstream.then(text("Snow in Oslo."))
    reply = client.messages.create(
        model="claude-x", max_tokens=200, system="You help.", messages=messages, tools=tools
    )
    assert reply.content[0].text == "Snow in Oslo." and reply.stop_reason == "end_turn"
    assert reply.usage.input_tokens == 120
    sent = upstream.requests[1]["messages"]
    assert {"role": "tool", "content": "snow", "tool_call_id": "toolu_1"} in sent
    assert reply.to_dict()["scroll"]["appended"] == 1  # only the tool result was new
    counted = client.messages.count_tokens(model="claude-x", messages=messages, tools=tools)
    assert counted.input_tokens > 0


def test_one_agents_key_never_reaches_another_agents_memory(gateway, upstream):
    alice = oa(gateway, make_key(upstream, agent="alice"))
    ask(alice, [{"role": "user", "content": "my secret is ZEBRA-4471"}])
    code = (
        "print('search', [h.snippet for h in ms.search('ZEB' + 'RA', k=5)])\n"
        "print('sessions', [s.session_id for s in ms.sessions()])\n"
        "rows = ms.sql_query('SELECT seq, content FROM events WHERE content LIKE ?',"
        " ['%ZEB' + 'RA%'])\n"
        "print('sql', rows.rows if hasattr(rows, 'rows') else rows['rows'])"
    )
    upstream.then(completion("", [tool_call(RECALL_TOOL, {"code": code}, "call_b")]), text("none"))
    bob = oa(gateway, make_key(upstream, agent="bob"))
    ask(
        bob,
        [{"role": "user", "content": "what secrets exist?"}],
        extra_headers={"X-Scroll-Session": "probe"},
    )
    printed = next(m for m in upstream.requests[-1]["messages"] if m["role"] == "tool")["content"]
    assert (
        "search []" in printed
        and "ZEBRA" not in printed
        and "sql []" in printed
        and "gw:alice" not in printed
    )
    # Naming alice's session from bob's key lands in bob's own namespace.
    raw = bob.chat.completions.with_raw_response.create(
        model="gpt-test",
        messages=[{"role": "user", "content": "x"}],
        extra_headers={"X-Scroll-Session": "gw:alice:probe"},
    )
    assert raw.headers["x-scroll-session"].startswith("gw:bob:")


def test_the_session_is_in_the_console_marked_as_gateway_driven(gateway, upstream, admin_client):
    profile = TuningProfile.objects.create(name="gw-tiny", context_size=2048)
    client = oa(gateway, make_key(upstream, profile=profile))
    history = []
    for i in range(16):
        history.append({"role": "user", "content": f"step {i}: " + "lorem ipsum dolor " * 40})
        raw = client.chat.completions.with_raw_response.create(model="gpt-test", messages=history)
        history.append(assistant_of(raw.parse()))
    session = raw.headers["x-scroll-session"]
    get_service().flush()
    run = RunRecord.objects.get(session_id=session)
    assert run.turns == 16 and run.evictions > 0 and run.summary()["kind"] == "gateway"
    home = admin_client.get("/").content.decode()
    assert session in home and ">gateway</span>" in home
    page = admin_client.get(f"/sessions/{session}/").content.decode()
    assert "a client through the gateway" in page
    blocks = get_service().session_index(session).blocks
    assert blocks and f"{blocks[0].lo_seq}" in page  # the live index panel


def test_a_tool_result_of_megabytes_gets_through_and_reaches_the_upstream_bounded(
    gateway, upstream, console_log
):
    client = oa(gateway, make_key(upstream))
    call = tool_call("get_weather", {"city": "Everywhere"}, "call_big")
    upstream.then(completion(f"Fetching.\n{HEADLINE}", [call]), text("That is a lot of weather."))
    history = [{"role": "user", "content": "all the weather"}]
    first = ask(client, history, tools=[WEATHER])
    huge = "".join(f"city {i}: sunny, {i % 40} C; " for i in range(120_000))  # about 3 MB
    assert len(huge) > 2_600_000  # past Django's 2.5 MB form limit
    history += [assistant_of(first), {"role": "tool", "tool_call_id": "call_big", "content": huge}]
    answer = ask(client, history, tools=[WEATHER])
    assert answer.choices[0].message.content == "That is a lot of weather."
    sent = json.dumps(upstream.requests[-1]["messages"])
    assert len(sent) < 200_000 and "call_big" in sent  # a preview or a fold pointer
    assert "ms.recall_tool('call_big')" in sent  # naming the way back to all of it
    stats = answer.to_dict()["scroll"]
    assert stats["peak_view_tokens"] <= stats["context_size"] < stats["client_tokens"]
    stored = [e for e in console_log.by_tool_call("call_big") if e.kind == "tool_result"]
    assert stored and stored[0].payload.load() == huge  # the whole result, in the log
