"""A real agent framework through the gateway: the OpenAI Agents SDK, whose models speak the
Responses API, runs an agent with a function tool against ``/v1/responses``. The SDK calls
the tool itself, sends the result back and gets the answer; the next turn, built from the
SDK's own input list, appends only what is new, so nothing in the log is rewritten; or the
SDK sends only what is new, naming the previous response, and the gateway fills in the rest
from the log. Tracing to OpenAI is switched off: nothing leaves loopback."""

from __future__ import annotations

import asyncio

import pytest
from agents import (
    Agent,
    OpenAIConversationsSession,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from gateway_clients import make_key
from gateway_upstream import HEADLINE, completion, text, tool_call
from openai import AsyncOpenAI

from dashboard.gateway.models import StoredResponse
from dashboard.gateway.service import get_service

pytestmark = pytest.mark.django_db(transaction=True)

set_tracing_disabled(True)
asked: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    asked.append(city)
    return f"sunny in {city}"


def _client(gateway: str, key: str, session: str) -> AsyncOpenAI:
    return AsyncOpenAI(
        base_url=f"{gateway}/v1",
        api_key=key,
        max_retries=0,
        default_headers={"X-Scroll-Session": session},
    )


def _two_turns_about_oslo(upstream) -> str:
    """Script the upstream for two turns (a call to ``get_weather``, its answer, then the
    answer to a follow-up question) and return a key to it."""
    asked.clear()
    upstream.then(
        completion(f"Checking.\n{HEADLINE}", [tool_call("get_weather", {"city": "Oslo"}, "c1")]),
        text("It is sunny in Oslo."),
        text("You asked about Oslo."),
    )
    return make_key(upstream)


@pytest.mark.parametrize("streamed", [False, True])
def test_an_agents_sdk_run_calls_its_tool_through_the_gateway_and_aligns(
    gateway, upstream, console_log, streamed
):
    key = _two_turns_about_oslo(upstream)

    async def run(agent, items):
        if not streamed:
            return await Runner.run(agent, items)
        result = Runner.run_streamed(agent, items)
        async for _ in result.stream_events():
            pass
        return result

    async def two_turns():
        async with _client(gateway, key, f"sdk-{streamed}") as client:
            model = OpenAIResponsesModel(model="gpt-test", openai_client=client)
            agent = Agent(name="helper", instructions="Be brief.", tools=[get_weather], model=model)
            first = await run(agent, "Weather in Oslo?")
            # The next turn: the SDK's own input list plus the new question.
            items = [*first.to_input_list(), {"role": "user", "content": "Which city was it?"}]
            return first, await run(agent, items)

    # One event loop for both turns: the SDK's client keeps its connections open between them.
    first, second = asyncio.run(two_turns())
    assert first.final_output == "It is sunny in Oslo." and asked == ["Oslo"]
    result = upstream.requests[1]["messages"][-1]
    assert (result["role"], result["tool_call_id"], result["content"]) == (
        "tool",
        "c1",
        "sunny in Oslo",
    )
    assert "Be brief." in upstream.requests[0]["messages"][0]["content"]
    assert second.final_output == "You asked about Oslo."
    assert upstream.requests[2]["messages"][-1] == {"role": "user", "content": "Which city was it?"}
    # Each message is in the log once: the second turn appended only the new question.
    get_service().flush()
    logged = [
        (e.role, e.content)
        for e in console_log.session_events(f"gw:alice:sdk-{streamed}", limit=None)
        if e.metadata.get("gw") != "prefix"
    ]
    assert logged == [
        ("user", "Weather in Oslo?"),
        ("assistant", "Checking."),
        ("assistant", '{"city": "Oslo"}'),  # the tool call, an event of its own
        ("tool", "sunny in Oslo"),
        ("assistant", "It is sunny in Oslo."),
        ("user", "Which city was it?"),
        ("assistant", "You asked about Oslo."),
    ]


def test_an_agents_sdk_run_continues_from_its_previous_response(gateway, upstream, console_log):
    """The SDK's server-managed form: within a run each call sends only what is new with the
    last response's id (``auto_previous_response_id``), and the next run continues from the
    first one's last response; the gateway puts the conversation back in front each time."""
    key = _two_turns_about_oslo(upstream)

    async def two_runs():
        async with _client(gateway, key, "sdk-stored") as client:
            model = OpenAIResponsesModel(model="gpt-test", openai_client=client)
            agent = Agent(name="helper", instructions="Be brief.", tools=[get_weather], model=model)
            first = await Runner.run(agent, "Weather in Oslo?", auto_previous_response_id=True)
            second = await Runner.run(
                agent, "Which city was it?", previous_response_id=first.last_response_id
            )
            return first, second

    first, second = asyncio.run(two_runs())
    assert first.final_output == "It is sunny in Oslo." and asked == ["Oslo"]
    assert second.final_output == "You asked about Oslo."
    # The last call sent one new message, yet the upstream saw the whole conversation.
    assert [(m["role"], m.get("content")) for m in upstream.requests[2]["messages"][1:]] == [
        ("user", "Weather in Oslo?"),
        ("assistant", "Checking."),
        ("tool", "sunny in Oslo"),
        ("assistant", "It is sunny in Oslo."),
        ("user", "Which city was it?"),
    ]
    # Each call after the first named the response before it, as its stored record shows.
    made = [row.response for row in StoredResponse.objects.order_by("id")]
    assert [r["previous_response_id"] for r in made] == [None, made[0]["id"], made[1]["id"]]
    get_service().flush()
    logged = [
        (e.role, e.content)
        for e in console_log.session_events("gw:alice:sdk-stored", limit=None)
        if e.metadata.get("gw") != "prefix"
    ]
    assert logged == [
        ("user", "Weather in Oslo?"),
        ("assistant", "Checking."),
        ("assistant", '{"city": "Oslo"}'),
        ("tool", "sunny in Oslo"),
        ("assistant", "It is sunny in Oslo."),
        ("user", "Which city was it?"),
        ("assistant", "You asked about Oslo."),
    ]


def _said(sent) -> list[tuple[str, str | None]]:
    return [(m["role"], m.get("content")) for m in sent["messages"][1:]]


def test_an_agents_sdk_run_in_a_server_side_conversation(gateway, upstream, console_log):
    """Two runs name the same conversation (``conversation_id``): each call sends only its
    new input, the gateway's session for the conversation holds the rest, and the
    conversation's items are the whole exchange."""
    key = _two_turns_about_oslo(upstream)

    async def two_runs():
        async with AsyncOpenAI(base_url=f"{gateway}/v1", api_key=key, max_retries=0) as client:
            conv = await client.conversations.create()
            model = OpenAIResponsesModel(model="gpt-test", openai_client=client)
            agent = Agent(name="helper", instructions="Be brief.", tools=[get_weather], model=model)
            first = await Runner.run(agent, "Weather in Oslo?", conversation_id=conv.id)
            second = await Runner.run(agent, "Which city was it?", conversation_id=conv.id)
            items = [i async for i in client.conversations.items.list(conv.id, order="asc")]
            return first, second, items

    first, second, items = asyncio.run(two_runs())
    assert first.final_output == "It is sunny in Oslo." and asked == ["Oslo"]
    assert second.final_output == "You asked about Oslo."
    assert _said(upstream.requests[2]) == [
        ("user", "Weather in Oslo?"),
        ("assistant", "Checking."),
        ("tool", "sunny in Oslo"),
        ("assistant", "It is sunny in Oslo."),
        ("user", "Which city was it?"),
    ]
    assert [i.type for i in items] == [
        "message", "message", "function_call", "function_call_output", "message", "message",
        "message",
    ]  # fmt: skip
    assert items[-1].content[0].text == "You asked about Oslo."


def test_an_agents_sdk_session_kept_in_a_conversation(gateway, upstream):
    """The SDK's ``OpenAIConversationsSession`` keeps the agent's history as a conversation's
    items: the second run's input is read from them, and ``pop_item`` takes the newest off."""
    key = _two_turns_about_oslo(upstream)

    async def two_runs():
        async with AsyncOpenAI(base_url=f"{gateway}/v1", api_key=key, max_retries=0) as client:
            session = OpenAIConversationsSession(openai_client=client)
            model = OpenAIResponsesModel(model="gpt-test", openai_client=client)
            agent = Agent(name="helper", instructions="Be brief.", tools=[get_weather], model=model)
            await Runner.run(agent, "Weather in Oslo?", session=session)
            second = await Runner.run(agent, "Which city was it?", session=session)
            kept = await session.get_items()
            popped = await session.pop_item()
            left = await session.get_items()
            return second, kept, popped, left

    second, kept, popped, left = asyncio.run(two_runs())
    assert second.final_output == "You asked about Oslo."
    # The second call carried the first run's exchange, read back from the conversation.
    assert _said(upstream.requests[2])[:4] == [
        ("user", "Weather in Oslo?"),
        ("assistant", "Checking."),
        ("tool", "sunny in Oslo"),
        ("assistant", "It is sunny in Oslo."),
    ]
    assert kept[-1]["content"][0]["text"] == "You asked about Oslo."
    assert popped == kept[-1] and left == kept[:-1]
