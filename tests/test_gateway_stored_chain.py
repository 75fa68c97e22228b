"""Continuing from a stored reply in the gateway's core (``ClientRequest.continues``): the
chain replayed from the log as it stood when a reply was made, a long message read back
whole from its payload when a fork appends it again, and a reply the log does not hold
refused by name with nothing appended or sent upstream."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_gateway_core import HEADLINE, ScriptedUpstream, conversation, request, user

from scroll_core.errors import GatewayRequestInvalid
from scroll_core.gateway import ClientRequest, StoredPlace
from scroll_core.gateway.stored import conversation_before, replay_chain

SESSION = "gw:alice:s"


def stored(req: ClientRequest, rid: str) -> ClientRequest:
    return replace(req, api="responses", store=True, response_id=rid)


def place_of(conv, rid: str, reply) -> StoredPlace:
    """Where the reply tagged ``rid`` sits, as the server's record of it says."""
    at = next(
        pos
        for pos, link in enumerate(conv.chain)
        if link.reply is not None and conv.log.get(link.first_seq).metadata.get("rid") == rid
    )
    return StoredPlace(rid, at, reply.message().fingerprint(), reply.logged_as)


def test_replaying_the_log_gives_the_chain_as_it_stood_at_each_reply(slog):
    upstream = ScriptedUpstream(*(f"R{i}.\n{HEADLINE}" for i in range(1, 4)))
    conv = conversation(slog)
    r1 = conv.handle(stored(request(user("A")), "resp_1"), upstream, model="up")
    first_chain = [link.fp for link in conv.chain]
    reply_seq = conv.chain[-1].first_seq
    at_r1 = place_of(conv, "resp_1", r1)
    conv.handle(replace(stored(request(user("B")), "resp_2"), continues=at_r1), upstream,
                model="up")  # fmt: skip
    conv.handle(replace(stored(request(user("C")), "resp_3"), continues=at_r1), upstream,
                model="up")  # fmt: skip
    events = slog.session_events(SESSION, limit=None)
    # The whole log replays to the chain the conversation holds (B's branch rewritten away).
    assert [link.fp for link in replay_chain(events)] == [link.fp for link in conv.chain]
    assert [link.fp for link in replay_chain(events, reply_seq)] == first_chain


def test_a_fork_from_a_rewritten_reply_appends_its_long_message_whole(slog):
    long_text = "the long brief " + "x" * 600
    upstream = ScriptedUpstream(*(f"R{i}.\n{HEADLINE}" for i in range(1, 5)))
    conv = conversation(slog)
    r1 = conv.handle(stored(request(user("A")), "resp_1"), upstream, model="up")
    at_r1 = place_of(conv, "resp_1", r1)
    r2 = conv.handle(replace(stored(request(user(long_text)), "resp_2"), continues=at_r1),
                     upstream, model="up")  # fmt: skip
    at_r2 = place_of(conv, "resp_2", r2)
    conv.handle(replace(stored(request(user("C")), "resp_3"), continues=at_r1), upstream,
                model="up")  # fmt: skip
    assert at_r2.position >= len(conv.chain) or conv.chain[at_r2.position].fp != at_r2.reply_fp
    # r2 left the chain; continuing from it appends its branch again, the long message whole.
    r4 = conv.handle(replace(stored(request(user("D")), "resp_4"), continues=at_r2), upstream,
                     model="up")  # fmt: skip
    assert r4.stats.rewritten and r4.content == "R4."
    again = [
        e
        for e in slog.session_events(SESSION, limit=None)
        if e.role == "user" and e.content.startswith("the long brief")
    ]
    assert len(again) == 2 and all(e.is_preview for e in again)
    assert again[1].payload.load() == long_text
    sent = upstream.requests[-1]["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"][-1] == "D"
    assert any(m["role"] == "assistant" and m["content"] == "R2." for m in sent)


def test_a_reply_the_log_does_not_hold_is_refused_and_nothing_is_appended(slog):
    upstream = ScriptedUpstream(f"R1.\n{HEADLINE}")
    conv = conversation(slog)
    conv.handle(stored(request(user("A")), "resp_1"), upstream, model="up")
    count = slog.count(SESSION)
    for place in (
        StoredPlace("resp_9", 1, "0" * 64, "resp_9"),  # tagged, but no event is
        StoredPlace("resp_9", 1, "0" * 64, ""),  # untagged, and not the chain's reply there
        StoredPlace("resp_9", 7, "0" * 64, ""),  # past the chain's end
    ):
        with pytest.raises(GatewayRequestInvalid) as refused:
            conv.handle(replace(request(user("B")), continues=place), upstream, model="up")
        assert refused.value.param == "previous_response_id"
        assert "resp_9" in str(refused.value)
    assert slog.count(SESSION) == count and len(upstream.requests) == 1


def test_a_tool_result_alone_takes_the_stored_question_for_the_headline(slog):
    from test_gateway_core import WEATHER, call, with_calls

    upstream = ScriptedUpstream(
        with_calls(f"Checking.\n{HEADLINE}", call("get_weather", {"city": "Reykjavik"}, "c1")),
        "Cold and windy.",  # no headline: the gateway writes an extractive one
    )
    conv = conversation(slog)
    asked = request(user("What is the weather in Reykjavik?"), tools=[WEATHER])
    first = conv.handle(stored(asked, "resp_1"), upstream, model="up")
    result = {"role": "tool", "tool_call_id": "c1", "content": "cold, windy"}
    follow = replace(stored(request(result, tools=[WEATHER]), "resp_2"),
                     continues=place_of(conv, "resp_1", first))  # fmt: skip
    second = conv.handle(follow, upstream, model="up")
    assert second.stats.appended == 1 and not second.stats.rewritten
    headline = slog.get(conv.chain[-1].first_seq).headline
    assert "Reykjavik" in headline  # from the question, read back from the log


def test_the_request_span_names_the_response_and_the_one_it_continues(slog, ring):
    from scroll_core.gateway.conversation import REQUEST_SPAN

    upstream = ScriptedUpstream(f"R1.\n{HEADLINE}", f"R2.\n{HEADLINE}")
    conv = conversation(slog)
    r1 = conv.handle(stored(request(user("A")), "resp_1"), upstream, model="up")
    follow = replace(stored(request(user("B")), "resp_2"), previous_response_id="resp_1",
                     continues=place_of(conv, "resp_1", r1))  # fmt: skip
    conv.handle(follow, upstream, model="up")
    first, second = ring.records(REQUEST_SPAN)
    assert first.attributes["gen_ai.response.id"] == "resp_1"
    assert "scroll.previous_response_id" not in first.attributes
    assert second.attributes["gen_ai.response.id"] == "resp_2"
    assert second.attributes["scroll.previous_response_id"] == "resp_1"


def test_a_replys_input_is_its_own_branch_whatever_came_after(slog):
    upstream = ScriptedUpstream(*(f"R{i}.\n{HEADLINE}" for i in range(1, 4)))
    conv = conversation(slog)
    r1 = conv.handle(stored(request(user("A")), "resp_1"), upstream, model="up")
    at_r1 = place_of(conv, "resp_1", r1)
    r2 = conv.handle(replace(stored(request(user("B")), "resp_2"), continues=at_r1), upstream,
                     model="up")  # fmt: skip
    at_r2 = place_of(conv, "resp_2", r2)
    conv.handle(replace(stored(request(user("C")), "resp_3"), continues=at_r1), upstream,
                model="up")  # fmt: skip
    events = slog.session_events(SESSION, limit=None)
    said = [(m.role, m.content) for _, m in conversation_before(events, at_r2)]
    assert said == [("user", "A"), ("assistant", "R1."), ("user", "B")]
    # Untagged (a reply first made unstored), the reply is found by its place and fingerprint.
    untagged = replace(at_r2, logged_as="")
    assert [m.content for _, m in conversation_before(events, untagged)] == ["A", "R1.", "B"]
    assert conversation_before(events, replace(at_r2, logged_as="resp_9")) is None


def test_an_untagged_reply_a_rewrite_took_out_is_continued_from_the_log(slog):
    # A reply first made unstored is logged untagged; a stored retry of it then named it. A
    # later conversation rewrote it away: continuing finds it by its place and fingerprint.
    upstream = ScriptedUpstream(*(f"R{i}.\n{HEADLINE}" for i in range(1, 4)))
    conv = conversation(slog)
    r1 = conv.handle(request(user("A")), upstream, model="up")
    assert r1.logged_as == ""
    at_r1 = StoredPlace("resp_1", 1, r1.message().fingerprint(), "")
    conv.handle(request(user("Z")), upstream, model="up")  # rewrites position 0 on
    assert conv.chain[1].fp != at_r1.reply_fp
    follow = conv.handle(replace(stored(request(user("B")), "resp_2"), continues=at_r1),
                         upstream, model="up")  # fmt: skip
    assert follow.stats.rewritten and follow.content == "R3."
    sent = [(m["role"], m["content"]) for m in upstream.requests[-1]["messages"]][-3:]
    assert sent == [("user", "A"), ("assistant", "R1."), ("user", "B")]
