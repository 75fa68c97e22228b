"""The Responses API's stored form through the gateway, driven by the official OpenAI client
on a real server: a request naming ``previous_response_id`` sends only its new input, and
the upstream still sees the whole conversation, read back from the Event Log; forks from an
earlier reply, replies a rewrite took out of the chain, streams, retries and a gateway that
forgot its conversations all continue; retrieve, delete and the input items; and a key never
reaches another agent's responses."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import httpx
import openai
import pytest
from django.utils import timezone
from gateway_clients import WEATHER as CHAT_WEATHER
from gateway_clients import logged_messages, make_key, oa
from gateway_upstream import HEADLINE, completion, text, tool_call

from dashboard.gateway import stored_responses
from dashboard.gateway.models import StoredResponse
from dashboard.gateway.service import get_service, reset_service

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = {"type": "function", **CHAT_WEATHER["function"]}


def _said(sent: dict[str, Any]) -> list[tuple[str, str]]:
    """The conversation an upstream request carried: (role, text) after the system prompt."""
    return [(m["role"], m.get("content") or "") for m in sent["messages"][1:]]


def _conversation(sent: dict[str, Any]) -> list[tuple[str, str]]:
    """``_said`` without the notes Scroll puts in the view (a rewrite's, say)."""
    return [m for m in _said(sent) if not m[1].startswith("[system] [scroll]")]


def _scroll(response) -> dict[str, Any]:
    return response.to_dict()["scroll"]


def test_a_request_sends_only_its_new_input_and_the_upstream_sees_the_whole(
    gateway, upstream, console_log
):
    upstream.then(text("Hello Ada."), text("Your name is Ada."), text("You said it once."))
    client = oa(gateway, make_key(upstream))
    first = client.responses.with_raw_response.create(
        model="gpt-test", instructions="Be brief.", input="My name is Ada."
    )
    r1 = first.parse()
    assert r1.store is True and r1.previous_response_id is None
    session = first.headers["X-Scroll-Session"]
    second = client.responses.with_raw_response.create(
        model="gpt-test", previous_response_id=r1.id, input="What is my name?"
    )
    r2 = second.parse()
    assert second.headers["X-Scroll-Session"] == session
    assert r2.output_text == "Your name is Ada." and r2.previous_response_id == r1.id
    assert _said(upstream.requests[1]) == [
        ("user", "My name is Ada."),
        ("assistant", "Hello Ada."),
        ("user", "What is my name?"),
    ]
    assert _scroll(r2)["appended"] == 1 and _scroll(r2)["rewritten"] is False
    r3 = client.responses.create(model="gpt-test", previous_response_id=r2.id, input="How often?")
    assert _scroll(r3)["appended"] == 1 and _said(upstream.requests[2])[-2:] == [
        ("assistant", "Your name is Ada."),
        ("user", "How often?"),
    ]
    # As with OpenAI, instructions are not carried over: only the first request had them.
    assert "Be brief." in upstream.requests[0]["messages"][0]["content"]
    assert "Be brief." not in upstream.requests[1]["messages"][0]["content"]
    assert logged_messages(console_log, session) == [
        ("user", "My name is Ada."),
        ("assistant", "Hello Ada."),
        ("user", "What is my name?"),
        ("assistant", "Your name is Ada."),
        ("user", "How often?"),
        ("assistant", "You said it once."),
    ]


def test_a_tool_result_continues_from_the_reply_that_called_the_tool(gateway, upstream):
    call = tool_call("get_weather", {"city": "Paris"}, "call_w1")
    upstream.then(completion(f"Checking.\n{HEADLINE}", [call]), text("Sunny in Paris."))
    client = oa(gateway, make_key(upstream))
    first = client.responses.create(model="gpt-test", input="Weather in Paris?", tools=[WEATHER])
    assert [item.type for item in first.output] == ["message", "function_call"]
    output = {"type": "function_call_output", "call_id": "call_w1", "output": "sunny"}
    second = client.responses.create(
        model="gpt-test", previous_response_id=first.id, input=[output], tools=[WEATHER]
    )
    assert second.output_text == "Sunny in Paris."
    assert _scroll(second)["appended"] == 1 and _scroll(second)["rewritten"] is False
    said = upstream.requests[1]["messages"]
    assert said[-2]["tool_calls"][0]["id"] == "call_w1"
    assert json.loads(said[-2]["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    assert (said[-1]["role"], said[-1]["tool_call_id"], said[-1]["content"]) == (
        "tool",
        "call_w1",
        "sunny",
    )


def test_forks_continue_from_any_reply_and_the_log_keeps_every_branch(
    gateway, upstream, console_log
):
    upstream.then(text("R1."), text("R2."), text("R3."), text("R4."))
    client = oa(gateway, make_key(upstream))
    r1 = client.responses.with_raw_response.create(model="gpt-test", input="A")
    session = r1.headers["X-Scroll-Session"]
    r1 = r1.parse()
    r2 = client.responses.create(model="gpt-test", previous_response_id=r1.id, input="B")
    # Back to r1: the chain forks there; B and R2 leave the conversation, not the log.
    r3 = client.responses.create(model="gpt-test", previous_response_id=r1.id, input="C")
    assert _scroll(r3)["rewritten"] is True
    assert ("user", "B") not in _said(upstream.requests[2])
    said = _conversation(upstream.requests[2])
    assert said[-3:] == [("user", "A"), ("assistant", "R1."), ("user", "C")]
    # r2 is no longer in the chain: its conversation is replayed from the log.
    r4 = client.responses.create(model="gpt-test", previous_response_id=r2.id, input="D")
    assert r4.output_text == "R4." and _scroll(r4)["rewritten"] is True
    said = _conversation(upstream.requests[3])
    assert said[-5:] == [
        ("user", "A"),
        ("assistant", "R1."),
        ("user", "B"),
        ("assistant", "R2."),
        ("user", "D"),
    ]
    assert ("user", "C") not in said
    logged = logged_messages(console_log, session)
    for message in [("user", "B"), ("user", "C"), ("user", "D"), ("assistant", "R3.")]:
        assert message in logged


def test_a_gateway_that_forgot_its_conversations_continues_from_the_log(
    gateway, upstream, console_log
):
    upstream.then(text("Noted: blue."), text("Blue."))
    client = oa(gateway, make_key(upstream))
    first = client.responses.create(model="gpt-test", input="My colour is blue.")
    get_service().flush()
    reset_service()  # as a restarted process: nothing of the session is in memory
    second = client.responses.create(
        model="gpt-test", previous_response_id=first.id, input="My colour?"
    )
    assert second.output_text == "Blue." and _scroll(second)["appended"] == 1
    assert _said(upstream.requests[1])[-3:] == [
        ("user", "My colour is blue."),
        ("assistant", "Noted: blue."),
        ("user", "My colour?"),
    ]


def test_a_streamed_reply_is_stored_under_the_id_its_stream_named(gateway, upstream):
    upstream.then(text("Streamed answer."), text("Continued."))
    client = oa(gateway, make_key(upstream))
    events = list(client.responses.create(model="gpt-test", input="stream it", stream=True))
    created, final = events[0].response, events[-1].response
    assert events[-1].type == "response.completed" and created.id == final.id
    kept = client.responses.retrieve(final.id)
    assert kept.output_text == "Streamed answer." and kept.store is True
    assert [item.id for item in kept.output] == [item.id for item in final.output]
    again = client.responses.create(model="gpt-test", previous_response_id=final.id, input="more")
    assert again.output_text == "Continued." and _scroll(again)["appended"] == 1


def test_a_retried_request_replays_its_reply_and_both_ids_continue(gateway, upstream):
    upstream.then(text("First."), text("Second."), text("Third."))
    client = oa(gateway, make_key(upstream))
    r1 = client.responses.create(model="gpt-test", input="one")
    r2 = client.responses.create(model="gpt-test", previous_response_id=r1.id, input="two")
    # The client did not get r2 (say) and sends the same request again.
    retry = client.responses.create(model="gpt-test", previous_response_id=r1.id, input="two")
    assert _scroll(retry)["replayed"] is True and retry.output_text == "Second."
    assert retry.id != r2.id and len(upstream.requests) == 2
    for earlier in (r2, retry):
        nxt = client.responses.create(model="gpt-test", previous_response_id=earlier.id,
                                      input="three")  # fmt: skip
        assert _scroll(nxt)["rewritten"] is False
    assert _said(upstream.requests[2])[-2:] == [("assistant", "Second."), ("user", "three")]


def test_retrieve_then_delete_forgets_the_id_and_keeps_the_history(gateway, upstream, console_log):
    upstream.then(text("Kept."))
    client = oa(gateway, make_key(upstream))
    raw = client.responses.with_raw_response.create(model="gpt-test", input="keep this")
    made, session = raw.parse(), raw.headers["X-Scroll-Session"]
    kept = client.responses.retrieve(made.id)
    assert kept.id == made.id and kept.output_text == "Kept."
    assert [item.id for item in kept.output] == [item.id for item in made.output]
    deleted = client.responses.delete(made.id)
    assert deleted is None or getattr(deleted, "deleted", True)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(made.id)
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="gpt-test", previous_response_id=made.id, input="again")
    assert refused.value.body["param"] == "previous_response_id"
    assert logged_messages(console_log, session) == [("user", "keep this"), ("assistant", "Kept.")]


def test_an_unstored_reply_cannot_be_continued_or_retrieved(gateway, upstream):
    upstream.then(text("Not kept."))
    client = oa(gateway, make_key(upstream))
    made = client.responses.create(model="gpt-test", input="forget this", store=False)
    assert made.store is False and not StoredResponse.objects.filter(response_id=made.id).exists()
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(made.id)
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="gpt-test", previous_response_id=made.id, input="more")
    assert "store: false" in refused.value.body["message"]
    assert len(upstream.requests) == 1


def test_a_key_never_reaches_another_agents_responses(gateway, upstream):
    upstream.then(text("Alice's secret."))
    alice = oa(gateway, make_key(upstream))
    bob = oa(gateway, make_key(upstream, agent="bob"))
    made = alice.responses.create(model="gpt-test", input="my secret")
    with pytest.raises(openai.BadRequestError) as refused:
        bob.responses.create(model="gpt-test", previous_response_id=made.id, input="tell me")
    # Bob is told what he would be told of an id that never existed.
    assert f"no stored response {made.id!r} for this key" in refused.value.body["message"]
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(made.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.delete(made.id)
    assert alice.responses.retrieve(made.id).output_text == "Alice's secret."
    assert len(upstream.requests) == 1


def test_a_session_header_naming_another_session_is_refused(gateway, upstream):
    upstream.then(text("One."))
    client = oa(gateway, make_key(upstream))
    made = client.responses.create(model="gpt-test", input="one")
    other = oa(gateway, make_key(upstream, agent="carol"))  # (an unused key: its own client)
    del other
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(
            model="gpt-test",
            previous_response_id=made.id,
            input="two",
            extra_headers={"X-Scroll-Session": "somewhere-else"},
        )
    assert refused.value.body["param"] == "X-Scroll-Session"
    assert len(upstream.requests) == 1


def test_cancel_is_refused(gateway, upstream):
    upstream.then(text("Done."))
    client = oa(gateway, make_key(upstream))
    made = client.responses.create(model="gpt-test", input="hi")
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.cancel(made.id)
    assert "background" in refused.value.body["message"]


def test_input_items_list_the_whole_input_read_back_from_the_log(gateway, upstream):
    call = tool_call("get_weather", {"city": "Paris"}, "call_w1")
    upstream.then(completion(f"Checking.\n{HEADLINE}", [call]), text("Sunny."), text("Bye."))
    client = oa(gateway, make_key(upstream))
    first = client.responses.create(model="gpt-test", input="Weather in Paris?", tools=[WEATHER])
    output = {"type": "function_call_output", "call_id": "call_w1", "output": "sunny"}
    second = client.responses.create(
        model="gpt-test", previous_response_id=first.id, input=[output], tools=[WEATHER]
    )
    third = client.responses.create(model="gpt-test", previous_response_id=second.id,
                                    input="Thanks.")  # fmt: skip
    listed = list(client.responses.input_items.list(third.id, order="asc"))
    shape = [(i.type, getattr(i, "role", None)) for i in listed]
    assert shape == [
        ("message", "user"),
        ("message", "assistant"),
        ("function_call", None),
        ("function_call_output", None),
        ("message", "assistant"),
        ("message", "user"),
    ]
    assert listed[0].content[0].text == "Weather in Paris?"
    assert (listed[2].call_id, json.loads(listed[2].arguments)) == ("call_w1", {"city": "Paris"})
    assert (listed[3].call_id, listed[3].output) == ("call_w1", "sunny")
    assert listed[4].content[0].text == "Sunny." and listed[5].content[0].text == "Thanks."
    # The API's default order is newest first; pages follow ``after``; ids hold across calls.
    page = client.responses.input_items.list(third.id, limit=4)
    assert [i.id for i in page.data] == [i.id for i in reversed(listed)][:4] and page.has_more
    rest = client.responses.input_items.list(third.id, limit=4, after=page.data[-1].id)
    assert [i.id for i in rest.data] == [i.id for i in reversed(listed)][4:]
    assert not rest.has_more
    # The first response's input is its own question alone.
    assert [i.content[0].text for i in client.responses.input_items.list(first.id)] == [
        "Weather in Paris?"
    ]


@pytest.mark.parametrize(
    ("query", "param"),
    [({"limit": 0}, "limit"), ({"limit": "x"}, "limit"), ({"order": "up"}, "order"),
     ({"after": "msg_404"}, "after")],
)  # fmt: skip
def test_input_items_refuse_a_bad_query_by_name(gateway, upstream, query, param):
    upstream.then(text("Done."))
    key = make_key(upstream)
    made = oa(gateway, key).responses.create(model="gpt-test", input="hi")
    answer = httpx.get(f"{gateway}/v1/responses/{made.id}/input_items", params=query,
                       headers={"authorization": f"Bearer {key}"})  # fmt: skip
    assert answer.status_code == 400 and answer.json()["error"]["param"] == param


def test_an_expired_response_is_not_found_and_is_pruned(gateway, upstream, settings):
    upstream.then(text("Old."))
    client = oa(gateway, make_key(upstream))
    made = client.responses.create(model="gpt-test", input="long ago")
    days = settings.SCROLL_GATEWAY_RESPONSE_DAYS
    StoredResponse.objects.filter(response_id=made.id).update(
        created_at=StoredResponse.objects.get(response_id=made.id).created_at
        - timedelta(days=days, minutes=1)
    )
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="gpt-test", previous_response_id=made.id, input="now")
    assert f"older than {days} days" in refused.value.body["message"]
    assert stored_responses.prune() == 1
    assert not StoredResponse.objects.filter(response_id=made.id).exists()


def test_a_serving_process_deletes_expired_records_off_the_request_path(gateway, upstream):
    upstream.then(text("Old."), text("New."))
    client = oa(gateway, make_key(upstream))
    old = client.responses.create(model="gpt-test", input="long ago")
    StoredResponse.objects.filter(response_id=old.id).update(
        created_at=timezone.now() - timedelta(days=400)
    )
    get_service().flush()
    reset_service()  # a process starting: its recorder's first batch deletes what expired
    new = client.responses.create(model="gpt-test", input="today")
    get_service().flush()
    kept = set(StoredResponse.objects.values_list("response_id", flat=True))
    assert kept == {new.id}


def test_input_items_asked_at_once_wait_for_the_replys_commit(gateway, upstream, monkeypatch):
    # The answer leaves before its reply is committed to the log; a client that lists the
    # input items at once must get them, not a 404 for a reply "never committed".
    import threading

    from scroll_core.gateway.conversation import GatewayConversation

    upstream.then(text("Hi."))
    release = threading.Event()
    commit = GatewayConversation._commit_reply

    def held_commit(self, *args, **kwargs):
        release.wait(10)
        return commit(self, *args, **kwargs)

    monkeypatch.setattr(GatewayConversation, "_commit_reply", held_commit)
    client = oa(gateway, make_key(upstream))
    first = client.responses.create(model="gpt-test", input="Hello?")
    assert not release.is_set()  # the answer came while the commit waits
    threading.Timer(0.5, release.set).start()
    listed = list(client.responses.input_items.list(first.id))
    assert [i.content[0].text for i in listed] == ["Hello?"]


def test_input_tokens_count_the_input_and_the_stored_conversation_it_continues(gateway, upstream):
    upstream.then(text("Hello Ada, " + "nice to meet you. " * 20))
    client = oa(gateway, make_key(upstream))
    question = "My name is Ada."
    alone = client.responses.input_tokens.count(model="gpt-test", input=question)
    assert alone.object == "response.input_tokens" and alone.input_tokens > 0
    first = client.responses.create(model="gpt-test", input=question)
    follow = client.responses.input_tokens.count(previous_response_id=first.id, input="And?")
    # The stored question and the long reply count, as the continuing request carries them.
    whole = client.responses.input_tokens.count(
        input=[
            {"role": "user", "content": question},
            {"role": "assistant", "content": first.output_text},
            {"role": "user", "content": "And?"},
        ]
    )
    assert follow.input_tokens == whole.input_tokens > alone.input_tokens + 40
    with_tools = client.responses.input_tokens.count(input=question, tools=[WEATHER])
    assert with_tools.input_tokens > alone.input_tokens
    assert len(upstream.requests) == 1  # counting sends nothing upstream


@pytest.mark.parametrize(
    ("body", "status", "said"),
    [
        ({"input": 7}, 400, "input"),
        ({"model": 3, "input": "x"}, 400, "model"),
        ({"previous_response_id": "resp_nope", "input": "x"}, 404, "resp_nope"),
        ({"conversation": "conv_1", "input": "x"}, 400, "no conversation"),
        ({"background": True, "input": "x"}, 400, "background"),
    ],
)
def test_input_tokens_refuse_a_bad_body_by_name(gateway, upstream, body, status, said):
    secret = make_key(upstream)
    answer = httpx.post(
        f"{gateway}/v1/responses/input_tokens",
        json=body,
        headers={"Authorization": f"Bearer {secret}"},
    )
    assert answer.status_code == status and said in answer.json()["error"]["message"]
    assert httpx.post(f"{gateway}/v1/responses/input_tokens", json=body).status_code == 401
