"""The Conversations API through the gateway, driven by the official OpenAI client on a real
server: a conversation is a session of the Event Log whose chain is its items; a response
naming it sends only its new input while the upstream sees every item; items are added,
listed, read and deleted (a delete is a rewrite: the view loses the item, the log keeps it);
a restarted gateway lists the same items; a key never reaches another agent's conversation;
and bad input is refused by name with nothing changed."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from gateway_clients import logged_messages, make_key, oa
from gateway_upstream import HEADLINE, completion, text, tool_call

from dashboard.gateway.models import StoredConversation
from dashboard.gateway.service import get_service, reset_service

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def _said(sent: dict[str, Any]) -> list[tuple[str, str]]:
    """The conversation an upstream request carried, without the system prompt and the notes
    Scroll puts in the view (a rewrite's, say)."""
    return [
        (m["role"], m.get("content") or "")
        for m in sent["messages"][1:]
        if not (m.get("content") or "").startswith("[system] [scroll]")
    ]


def _texts(items) -> list[tuple[str, str]]:
    out = []
    for item in items:
        if item.type == "message":
            out.append((item.role, item.content[0].text))
        elif item.type == "function_call":
            out.append(("call", item.name))
        else:
            out.append((item.type, getattr(item, "output", "")))
    return out


def test_a_response_in_a_conversation_sends_only_its_input_and_the_upstream_sees_all(
    gateway, upstream, console_log
):
    upstream.then(text("Hello Ada."), text("Your name is Ada."))
    client = oa(gateway, make_key(upstream))
    conv = client.conversations.create(
        items=[{"role": "user", "content": "My name is Ada."}], metadata={"topic": "names"}
    )
    assert conv.id.startswith("conv_") and conv.metadata == {"topic": "names"}
    first = client.responses.create(model="gpt-test", conversation=conv.id, input="Hi!")
    assert first.output_text == "Hello Ada." and first.conversation.id == conv.id
    assert _said(upstream.requests[0]) == [("user", "My name is Ada."), ("user", "Hi!")]
    second = client.responses.create(
        model="gpt-test", conversation={"id": conv.id}, input="What is my name?"
    )
    assert second.output_text == "Your name is Ada."
    assert second.to_dict()["scroll"]["appended"] == 1
    assert _said(upstream.requests[1]) == [
        ("user", "My name is Ada."),
        ("user", "Hi!"),
        ("assistant", "Hello Ada."),
        ("user", "What is my name?"),
    ]
    listed = list(client.conversations.items.list(conv.id, order="asc"))
    assert _texts(listed) == [
        ("user", "My name is Ada."),
        ("user", "Hi!"),
        ("assistant", "Hello Ada."),
        ("user", "What is my name?"),
        ("assistant", "Your name is Ada."),
    ]
    session = StoredConversation.objects.get(conversation_id=conv.id).session_id
    assert session == f"gw:alice:{conv.id}"
    assert logged_messages(console_log, session) == [
        ("user", "My name is Ada."),
        ("user", "Hi!"),
        ("assistant", "Hello Ada."),
        ("user", "What is my name?"),
        ("assistant", "Your name is Ada."),
    ]
    # The response is stored too: its id continues the same session.
    third_said = client.responses.input_items.list(second.id, order="asc")
    assert [i.content[0].text for i in third_said][-1] == "What is my name?"


def test_items_added_between_responses_and_a_tool_round_trip(gateway, upstream):
    call = tool_call("get_weather", {"city": "Oslo"}, "call_1")
    upstream.then(completion(f"Checking.\n{HEADLINE}", [call]), text("Snow in Oslo."))
    client = oa(gateway, make_key(upstream))
    conv = client.conversations.create()
    added = client.conversations.items.create(
        conv.id,
        items=[
            {"type": "message", "role": "system", "content": "Answer in one line."},
            {"type": "message", "role": "user", "content": "Weather in Oslo?"},
        ],
    )
    assert [i.type for i in added.data] == ["message", "message"]
    assert added.first_id == added.data[0].id and not added.has_more
    asked = client.responses.create(
        model="gpt-test", conversation=conv.id, input="Please check.", tools=[WEATHER]
    )
    assert [o.type for o in asked.output] == ["message", "function_call"]
    output = {"type": "function_call_output", "call_id": "call_1", "output": "snow"}
    answered = client.responses.create(
        model="gpt-test", conversation=conv.id, input=[output], tools=[WEATHER]
    )
    assert answered.output_text == "Snow in Oslo."
    sent = upstream.requests[1]["messages"]
    assert sent[-1] == {"role": "tool", "content": "snow", "tool_call_id": "call_1"}
    assert sent[-2]["tool_calls"][0]["id"] == "call_1"
    # A system item is a message of the conversation; the view shows it as such.
    assert {"role": "user", "content": "[system] Answer in one line."} in sent
    assert _texts(client.conversations.items.list(conv.id, order="asc")) == [
        ("system", "Answer in one line."),
        ("user", "Weather in Oslo?"),
        ("user", "Please check."),
        ("assistant", "Checking."),
        ("call", "get_weather"),
        ("function_call_output", "snow"),
        ("assistant", "Snow in Oslo."),
    ]


def test_deleting_an_item_rewrites_the_view_and_the_log_keeps_it(gateway, upstream, console_log):
    upstream.then(text("R1."), text("R2."))
    client = oa(gateway, make_key(upstream))
    conv = client.conversations.create(
        items=[
            {"role": "user", "content": "My code is KESTREL-9."},
            {"role": "user", "content": "Remember it."},
        ]
    )
    client.responses.create(model="gpt-test", conversation=conv.id, input="Ok?")
    listed = list(client.conversations.items.list(conv.id, order="asc"))
    secret = listed[0]
    assert secret.content[0].text == "My code is KESTREL-9."
    after = client.conversations.items.delete(secret.id, conversation_id=conv.id)
    assert after.id == conv.id
    assert _texts(client.conversations.items.list(conv.id, order="asc")) == [
        ("user", "Remember it."),
        ("user", "Ok?"),
        ("assistant", "R1."),
    ]
    reply = client.responses.create(model="gpt-test", conversation=conv.id, input="And now?")
    assert reply.output_text == "R2."
    said = _said(upstream.requests[1])
    assert ("user", "My code is KESTREL-9.") not in said
    assert said == [("user", "Remember it."), ("user", "Ok?"), ("assistant", "R1."),
                    ("user", "And now?")]  # fmt: skip
    # The deleted item left the conversation, not the log.
    session = f"gw:alice:{conv.id}"
    get_service().flush()
    held = [e.content for e in console_log.session_events(session, limit=None)]
    assert "My code is KESTREL-9." in held
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve(secret.id, conversation_id=conv.id)
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.delete(secret.id, conversation_id=conv.id)


def test_a_function_call_item_is_deleted_alone_and_the_last_item_can_go(gateway, upstream):
    call = tool_call("get_weather", {"city": "Rome"}, "call_r")
    upstream.then(completion(f"Let me see.\n{HEADLINE}", [call]))
    client = oa(gateway, make_key(upstream))
    conv = client.conversations.create(items=[{"role": "user", "content": "Rome?"}])
    client.responses.create(model="gpt-test", conversation=conv.id, input="Go.", tools=[WEATHER])
    listed = list(client.conversations.items.list(conv.id, order="asc"))
    assert _texts(listed)[-2:] == [("assistant", "Let me see."), ("call", "get_weather")]
    client.conversations.items.delete(listed[-1].id, conversation_id=conv.id)
    assert _texts(client.conversations.items.list(conv.id, order="asc")) == [
        ("user", "Rome?"),
        ("user", "Go."),
        ("assistant", "Let me see."),
    ]
    # The Agents SDK's pop_item: the newest item, then delete it.
    newest = client.conversations.items.list(conv.id, limit=1).data[0]
    client.conversations.items.delete(newest.id, conversation_id=conv.id)
    assert _texts(client.conversations.items.list(conv.id, order="asc")) == [
        ("user", "Rome?"),
        ("user", "Go."),
    ]


def test_items_page_in_both_orders_and_one_item_is_read(gateway, upstream):
    client = oa(gateway, make_key(upstream))
    conv = client.conversations.create(
        items=[{"role": "user", "content": f"note {i}"} for i in range(7)]
    )
    page = client.conversations.items.list(conv.id, limit=3)
    assert [i.content[0].text for i in page.data] == ["note 6", "note 5", "note 4"]
    assert page.has_more
    rest = client.conversations.items.list(conv.id, limit=3, after=page.data[-1].id)
    assert [i.content[0].text for i in rest.data] == ["note 3", "note 2", "note 1"]
    every = [i.content[0].text for i in client.conversations.items.list(conv.id, order="asc")]
    assert every == [f"note {i}" for i in range(7)]  # the client follows the pages
    one = client.conversations.items.retrieve(page.data[0].id, conversation_id=conv.id)
    assert one.content[0].text == "note 6"


def test_a_conversation_is_read_updated_and_deleted_and_its_history_stays(
    gateway, upstream, console_log
):
    upstream.then(text("R1."))
    client = oa(gateway, make_key(upstream))
    conv = client.conversations.create(items=[{"role": "user", "content": "Keep me."}])
    assert client.conversations.retrieve(conv.id).created_at == conv.created_at
    updated = client.conversations.update(conv.id, metadata={"owner": "ops"})
    assert updated.metadata == {"owner": "ops"}
    assert client.conversations.retrieve(conv.id).metadata == {"owner": "ops"}
    deleted = client.conversations.delete(conv.id)
    assert deleted.deleted and deleted.id == conv.id
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(conv.id)
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="gpt-test", conversation=conv.id, input="Hello?")
    assert refused.value.body["param"] == "conversation"
    assert upstream.requests == []
    held = [e.content for e in console_log.session_events(f"gw:alice:{conv.id}", limit=None)]
    assert "Keep me." in held


def test_a_restarted_gateway_lists_and_continues_the_same_items(gateway, upstream):
    upstream.then(text("R1."), text("R2."))
    client = oa(gateway, make_key(upstream))
    conv = client.conversations.create(items=[{"role": "user", "content": "A"}])
    client.responses.create(model="gpt-test", conversation=conv.id, input="B")
    get_service().flush()
    reset_service()  # as after a restart: the chain is rebuilt from the log
    assert _texts(client.conversations.items.list(conv.id, order="asc")) == [
        ("user", "A"),
        ("user", "B"),
        ("assistant", "R1."),
    ]
    client.responses.create(model="gpt-test", conversation=conv.id, input="C")
    assert _said(upstream.requests[1]) == [("user", "A"), ("user", "B"), ("assistant", "R1."),
                                           ("user", "C")]  # fmt: skip


def test_another_agents_key_never_reaches_a_conversation(gateway, upstream):
    upstream.then(text("R1."))
    alice = oa(gateway, make_key(upstream, agent="alice"))
    mallory = oa(gateway, make_key(upstream, agent="mallory"))
    conv = alice.conversations.create(items=[{"role": "user", "content": "secret ZEBRA"}])
    for attempt in (
        lambda: mallory.conversations.retrieve(conv.id),
        lambda: mallory.conversations.items.list(conv.id).data,
        lambda: mallory.conversations.items.create(conv.id, items=[{"role": "user",
                                                                     "content": "x"}]),
        lambda: mallory.conversations.delete(conv.id),
        lambda: mallory.conversations.update(conv.id, metadata={"a": "b"}),
    ):  # fmt: skip
        with pytest.raises(openai.NotFoundError) as refused:
            attempt()
        assert "no conversation" in refused.value.message
    with pytest.raises(openai.BadRequestError):
        mallory.responses.create(model="gpt-test", conversation=conv.id, input="tell me")
    assert upstream.requests == []
    assert _texts(alice.conversations.items.list(conv.id)) == [("user", "secret ZEBRA")]


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "said"),
    [
        ("POST", "", {"items": "x"}, 400, "items"),
        ("POST", "", {"items": [{"role": "user", "content": "x"}] * 21}, 400, "at most 20"),
        ("POST", "", {"metadata": {"k": 5}}, 400, "metadata.k"),
        ("POST", "", {"items": [{"role": "robot", "content": "x"}]}, 400, "items.0.role"),
        ("POST", "/{id}/items", {"items": []}, 400, "items"),
        ("POST", "/{id}/items", {"items": [{"type": "telepathy"}]}, 400, "items.0.type"),
        ("POST", "/{id}", {}, 400, "metadata"),
        ("GET", "/{id}/items?limit=0", None, 400, "limit"),
        ("GET", "/{id}/items?order=sideways", None, 400, "order"),
        ("GET", "/{id}/items?after=msg_999999", None, 400, "after"),
        ("GET", "/{id}/items/msg_999999", None, 404, "no item"),
        ("GET", "/conv_nope", None, 404, "no conversation"),
        ("PUT", "/{id}", None, 405, "takes"),
        ("GET", "/{id}/things", None, 404, "no such endpoint"),
    ],
)
def test_bad_requests_are_refused_by_name_and_change_nothing(
    gateway, upstream, method, path, body, status, said
):
    secret = make_key(upstream)
    client = oa(gateway, secret)
    conv = client.conversations.create(items=[{"role": "user", "content": "kept"}])
    url = f"{gateway}/v1/conversations" + path.replace("{id}", conv.id)
    answer = httpx.request(method, url, json=body, headers={"Authorization": f"Bearer {secret}"})
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert said in error["message"] or said == error.get("param")
    assert _texts(client.conversations.items.list(conv.id)) == [("user", "kept")]
    assert client.conversations.retrieve(conv.id).metadata == {}
    assert httpx.request(method, url, json=body).status_code == 401


def test_a_conversation_and_a_previous_response_together_are_refused(gateway, upstream):
    upstream.then(text("R1."))
    client = oa(gateway, make_key(upstream))
    conv = client.conversations.create()
    first = client.responses.create(model="gpt-test", conversation=conv.id, input="A")
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(
            model="gpt-test", conversation=conv.id, previous_response_id=first.id, input="B"
        )
    assert refused.value.body["param"] == "previous_response_id"
    assert len(upstream.requests) == 1


def test_input_tokens_count_a_conversations_items_too(gateway, upstream):
    client = oa(gateway, make_key(upstream))
    long_note = "a long note " * 30
    conv = client.conversations.create(items=[{"role": "user", "content": long_note}])
    counted = client.responses.input_tokens.count(conversation=conv.id, input="And?")
    whole = client.responses.input_tokens.count(
        input=[{"role": "user", "content": long_note}, {"role": "user", "content": "And?"}]
    )
    alone = client.responses.input_tokens.count(input="And?")
    assert counted.input_tokens == whole.input_tokens > alone.input_tokens + 40
    assert upstream.requests == []
