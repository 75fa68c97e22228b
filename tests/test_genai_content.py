"""Message content for chat spans: the GenAI conventions' shape, the opt-in switch and the
byte cap that keeps the JSON whole."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scroll_core import genai_content
from scroll_core.errors import ConfigError
from scroll_core.genai_content import (
    capture_enabled,
    input_attributes,
    input_messages,
    max_bytes,
    output_attributes,
    output_messages,
    system_instructions,
    to_json,
)

SENT = [
    {"role": "system", "content": "You are terse."},
    {"role": "system", "content": [{"type": "text", "text": "Scroll's rubric."}]},
    {"role": "user", "content": "weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_w1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_w1", "content": "sunny, 21C"},
    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]},
]


def size(text: str) -> int:
    return len(text.encode("utf-8"))


def test_leading_system_messages_are_the_system_instructions_and_the_rest_the_input():
    assert system_instructions(SENT) == [
        {"type": "text", "content": "You are terse."},
        {"type": "text", "content": "Scroll's rubric."},
    ]
    assert input_messages(SENT) == [
        {"role": "user", "parts": [{"type": "text", "content": "weather in Paris?"}]},
        {
            "role": "assistant",
            "parts": [
                {
                    "type": "tool_call",
                    "id": "call_w1",
                    "name": "get_weather",
                    "arguments": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": "call_w1", "response": "sunny, 21C"}],
        },
        {"role": "user", "parts": [{"type": "uri", "modality": "image", "uri": "https://x/y.png"}]},
    ]


def test_a_system_message_later_in_the_conversation_stays_in_the_input():
    sent = [{"role": "user", "content": "hi"}, {"role": "system", "content": "Now be formal."}]
    assert system_instructions(sent) == []
    assert [m["role"] for m in input_messages(sent)] == ["user", "system"]


def test_the_reply_says_why_it_stopped_in_the_conventions_words():
    reply = {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{not json"}}
        ],
    }
    (message,) = output_messages(reply, "tool_calls")
    assert message["finish_reason"] == "tool_call"
    assert message["parts"] == [
        {"type": "text", "content": "Checking."},
        {"type": "tool_call", "id": "c1", "name": "f", "arguments": "{not json"},
    ]
    assert (
        output_messages({"role": "assistant", "content": "x"}, "end_turn")[0]["finish_reason"]
        == "stop"
    )


def test_content_that_fits_is_sent_whole():
    items = input_messages(SENT)
    text, cut = to_json(items, 65_536)
    assert cut == 0 and json.loads(text) == items


def test_a_long_text_loses_its_middle_to_a_marker_and_the_json_stays_whole():
    long = "HEAD" + "é" * 100_000 + "TAIL"  # two bytes a character: the cap counts bytes
    sent = [{"role": "user", "content": "short question"}, {"role": "tool", "content": long,
            "tool_call_id": "call_1"}]  # fmt: skip
    text, cut = to_json(input_messages(sent), 4096)
    assert size(text) <= 4096
    first, second = json.loads(text)
    assert first == {"role": "user", "parts": [{"type": "text", "content": "short question"}]}
    response = second["parts"][0]["response"]
    assert second["parts"][0]["id"] == "call_1"
    assert response.startswith("HEAD") and response.endswith("TAIL")
    assert "characters cut]…" in response
    assert size(text) > 3500, "the cut uses most of the room it has"
    assert cut == size(json.dumps(input_messages(sent), ensure_ascii=False,
                                  separators=(",", ":"))) - size(text)  # fmt: skip


def test_too_many_messages_give_way_oldest_first_behind_a_note_that_counts_them():
    sent = [{"role": "user", "content": f"message {i}"} for i in range(2000)]
    text, cut = to_json(input_messages(sent), 2048)
    assert size(text) <= 2048 and cut > 0
    items = json.loads(text)
    note = items[0]["parts"][0]["content"]
    dropped = int(note.split("[")[1].split(" ")[0].replace(",", ""))
    assert note.endswith("earlier messages cut]…")
    assert [m["parts"][0]["content"] for m in items[1:]] == [
        f"message {i}" for i in range(dropped, 2000)
    ]


def test_the_span_attributes_mirror_the_messages_for_openinference():
    attributes = input_attributes("up-model", SENT, 65_536)
    assert attributes["openinference.span.kind"] == "LLM"
    assert attributes["llm.model_name"] == "up-model"
    assert json.loads(attributes["gen_ai.system_instructions"])[0]["content"] == "You are terse."
    assert attributes["input.value"] == attributes["gen_ai.input.messages"]
    assert attributes["input.mime_type"] == "application/json"
    assert "scroll.input_cut_bytes" not in attributes
    out = output_attributes({"role": "assistant", "content": "ok"}, "stop", 65_536,
                            input_tokens=120, output_tokens=12)  # fmt: skip
    assert json.loads(out["output.value"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "ok"}], "finish_reason": "stop"}
    ]
    assert (out["llm.token_count.prompt"], out["llm.token_count.completion"],
            out["llm.token_count.total"]) == (120, 12, 132)  # fmt: skip


def test_a_cut_input_says_how_many_bytes_it_lost():
    sent = [{"role": "system", "content": "s" * 5000}, {"role": "user", "content": "u" * 5000}]
    attributes = input_attributes("m", sent, 1024)
    assert size(attributes["gen_ai.system_instructions"]) <= 1024
    assert size(attributes["gen_ai.input.messages"]) <= 1024
    assert attributes["scroll.input_cut_bytes"] > 8000


@pytest.mark.parametrize(
    ("value", "on"),
    [("true", True), ("TRUE", True), (" True ", True), ("SPAN_ONLY", True), ("false", False),
     ("", False), ("1", False), ("no_content", False)],
)  # fmt: skip
def test_capture_is_off_unless_the_conventions_variable_says_true(value, on):
    assert capture_enabled({genai_content.CAPTURE_VARIABLE: value}) is on
    assert capture_enabled({}) is False


def test_the_byte_cap_is_read_and_checked():
    assert max_bytes({}) == 65_536
    assert max_bytes({genai_content.MAX_BYTES_VARIABLE: "4096"}) == 4096
    with pytest.raises(ConfigError, match="whole number"):
        max_bytes({genai_content.MAX_BYTES_VARIABLE: "64k"})
    with pytest.raises(ConfigError, match="at least 1024"):
        max_bytes({genai_content.MAX_BYTES_VARIABLE: "100"})


_texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=3000)
_roles = st.sampled_from(["user", "assistant", "tool"])
_messages = st.lists(
    st.builds(lambda role, text: {"role": role, "content": text}, _roles, _texts), max_size=60
)


@settings(max_examples=60, deadline=None)
@given(messages=_messages, limit=st.integers(min_value=1024, max_value=8192))
def test_any_conversation_fits_its_cap_as_valid_json_and_is_whole_when_it_can_be(messages, limit):
    items = input_messages(messages)
    text, cut = to_json(items, limit)
    assert size(text) <= limit
    parsed = json.loads(text)
    if cut == 0:
        assert parsed == items
    else:
        assert all(m["role"] in ("user", "assistant", "tool") for m in parsed)
