"""A conversation's items in the gateway's core (the Conversations API without a server):
items added with no model call and read back whole, an item deleted as a rewrite (it leaves
the view and the chain, never the log), and a request naming the conversation continuing
from the chain as it stands."""

from __future__ import annotations

from dataclasses import replace

from test_gateway_core import HEADLINE, ScriptedUpstream, call, conversation, request, user

from scroll_core.gateway import ClientMessage
from scroll_core.gateway.conversations_api import without_item
from scroll_core.gateway.responses_api import input_items

SESSION = "gw:alice:s"


def _said(conv) -> list[tuple[str, str, tuple[str, ...], str | None]]:
    return [
        (m.role, m.content, tuple(c.id for c in m.tool_calls), m.tool_call_id)
        for _, m in conv.items()
    ]


def test_items_are_added_without_a_model_call_and_read_back_whole(slog):
    conv = conversation(slog)
    long_text = "the brief " + "y" * 500
    asked = ClientMessage("assistant", "Looking.", (call("get_weather", {"city": "Oslo"}, "c1"),))
    added = conv.add_items(
        [
            ClientMessage("system", "Be terse."),
            ClientMessage("user", long_text),
            asked,
            ClientMessage("tool", "snow", tool_call_id="c1"),
        ]
    )
    assert [m.role for _, m in added] == ["system", "user", "assistant", "tool"]
    assert [seq for seq, _ in added] == [link.first_seq for link in conv.chain]
    assert _said(conv) == [
        ("system", "Be terse.", (), None),
        ("user", long_text, (), None),  # whole, from its payload
        ("assistant", "Looking.", ("c1",), None),
        ("tool", "snow", (), "c1"),
    ]
    # A process that forgot the session reads the same items back from the log.
    assert _said(conversation(slog)) == _said(conv)


def test_a_deleted_item_leaves_the_view_and_the_chain_but_not_the_log(slog):
    conv = conversation(slog)
    conv.add_items([ClientMessage("user", f"note {i}") for i in range(4)])
    held = conv.items()
    second = input_items(held)[1]["id"]
    kept = without_item(held, second)
    assert [m.content for m in kept] == ["note 0", "note 2", "note 3"]
    assert conv.put_items(kept) is True
    assert [m.content for _, m in conv.items()] == ["note 0", "note 2", "note 3"]
    dropped = held[1][0]
    assert dropped not in conv.state.live and slog.get(dropped).content == "note 1"
    # The same list again changes nothing.
    count = slog.count(SESSION)
    assert conv.put_items(kept) is False and slog.count(SESSION) == count
    assert without_item(conv.items(), "msg_999999") is None


def test_a_call_is_deleted_alone_and_a_message_left_empty_goes(slog):
    conv = conversation(slog)
    two = (call("a", {}, "c1"), call("b", {}, "c2"))
    conv.add_items([ClientMessage("user", "go"), ClientMessage("assistant", "", two)])
    ids = [item["id"] for item in input_items(conv.items())]
    assert ids[1:] == [f"fc_{conv.chain[1].first_seq}_0", f"fc_{conv.chain[1].first_seq}_1"]
    conv.put_items(without_item(conv.items(), ids[1]))
    assert _said(conv) == [("user", "go", (), None), ("assistant", "", ("c2",), None)]
    conv.put_items(without_item(conv.items(), input_items(conv.items())[1]["id"]))
    assert _said(conv) == [("user", "go", (), None)]


def test_a_request_naming_the_conversation_continues_from_its_items(slog):
    upstream = ScriptedUpstream(f"R1.\n{HEADLINE}", f"R2.\n{HEADLINE}")
    conv = conversation(slog)
    conv.add_items([ClientMessage("user", "A"), ClientMessage("user", "B")])
    asked = replace(request(user("C")), api="responses", conversation_id="conv_1")
    first = conv.handle(asked, upstream, model="up")
    assert first.stats.appended == 1 and not first.stats.rewritten and first.position == 3
    sent = [(m["role"], m["content"]) for m in upstream.requests[0]["messages"][1:]]
    assert sent == [("user", "A"), ("user", "B"), ("user", "C")]
    conv.put_items(without_item(conv.items(), input_items(conv.items())[0]["id"]))
    second = conv.handle(replace(request(user("D")), api="responses", conversation_id="conv_1"),
                         upstream, model="up")  # fmt: skip
    assert second.stats.appended == 1 and not second.stats.rewritten
    sent = [(m["role"], m["content"]) for m in upstream.requests[1]["messages"][1:]]
    assert [s for s in sent if not s[1].startswith("[system] [scroll]")] == [
        ("user", "B"), ("user", "C"), ("assistant", "R1."), ("user", "D"),
    ]  # fmt: skip
