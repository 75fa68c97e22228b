"""Whatever body a client sends, each of the gateway's three parsers either makes a request of
it or refuses it with ``GatewayRequestInvalid`` naming a field (a 400 the client can read),
never another exception (a 500 that says nothing). The bodies are drawn near each API's
shape: its own field names and item types with values of every JSON kind, so most of them
get past the first checks; the figures of one draw of 3,000 bodies per API are in the
note of the stop that added this test."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scroll_core.errors import GatewayRequestInvalid
from scroll_core.gateway import ClientRequest
from scroll_core.gateway.anthropic_api import parse_messages_request
from scroll_core.gateway.openai_api import parse_chat_request
from scroll_core.gateway.responses_api import parse_responses_request

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False), st.text(max_size=8)
)
ANY_JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
TEXT = st.text(max_size=6)


def _maybe(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a value of the right kind, sometimes any JSON value."""
    return st.one_of(good, good, good, ANY_JSON)


def _object(
    need: tuple[str, ...] = (), **fields: st.SearchStrategy[Any]
) -> st.SearchStrategy[dict[str, Any]]:
    """An object with the ``need`` fields and any of the others, each usually of its kind."""
    return st.fixed_dictionaries(
        {k: _maybe(v) for k, v in fields.items() if k in need},
        optional={k: _maybe(v) for k, v in fields.items() if k not in need},
    )


def _kind(*names: str) -> st.SearchStrategy[str]:
    return st.sampled_from(names)


PART = _object(
    ("type", "text"),
    type=_kind("text", "input_text", "output_text", "input_image", "image_url", "refusal",
               "image", "tool_use", "tool_result", "thinking", "redacted_thinking", "document"),
    text=TEXT, refusal=TEXT, id=TEXT, name=TEXT, input=ANY_JSON, tool_use_id=TEXT,
    content=st.one_of(TEXT, st.lists(_object(type=_kind("text", "image"), text=TEXT), max_size=2)),
    thinking=TEXT, signature=TEXT, data=TEXT, is_error=st.booleans(),
    cache_control=_object(type=_kind("ephemeral"), ttl=_kind("5m", "1h")),
)  # fmt: skip
CONTENT = st.one_of(TEXT, st.lists(PART, max_size=3))
FUNCTION = _object(name=TEXT, description=TEXT, parameters=st.just({"type": "object"}),
                   strict=st.booleans())  # fmt: skip
TOOL_CALL = _object(
    ("id", "function"),
    id=TEXT,
    type=_kind("function"),
    function=_object(("name",), name=TEXT, arguments=TEXT),
)
CHAT = st.fixed_dictionaries(
    {"model": st.just("m"), "messages": (st.lists(_object(
        ("role", "content"),
        role=_kind("system", "developer", "user", "assistant", "tool", "function"),
        content=CONTENT, tool_calls=st.lists(TOOL_CALL, max_size=2), tool_call_id=TEXT,
        name=TEXT), min_size=1, max_size=4))},
    optional={"tools": st.lists(_object(type=_kind("function"), function=FUNCTION), max_size=2),
              "n": st.sampled_from([1, 1, 1, 2]), "stream": st.booleans(),
              "stream_options": _object(include_usage=st.booleans())},
)  # fmt: skip
MESSAGES = st.fixed_dictionaries(
    {"model": st.just("m"), "max_tokens": st.just(16),
     "messages": (st.lists(_object(("role", "content"), role=_kind("user", "assistant", "system"),
                                         content=CONTENT),
                                 min_size=1, max_size=4))},
    optional={"system": CONTENT, "stream": st.booleans(),
              "tools": st.lists(_object(name=TEXT, type=_kind("custom", "web_search_20250305"),
                                        input_schema=st.just({"type": "object"}),
                                        cache_control=_object(type=_kind("ephemeral"))),
                                max_size=2),
              "tool_choice": _object(type=_kind("auto", "any", "tool", "none"), name=TEXT),
              "thinking": _object(type=_kind("enabled", "disabled"), budget_tokens=st.integers()),
              "stop_sequences": st.lists(TEXT, max_size=2), "temperature": st.floats(0, 1)},
)  # fmt: skip
ITEM = _object(
    ("type",),
    type=_kind("message", "function_call", "function_call_output", "custom_tool_call",
               "custom_tool_call_output", "reasoning", "item_reference", "computer_call"),
    role=_kind("user", "assistant", "system", "developer", "tool"), content=CONTENT,
    call_id=TEXT, name=TEXT, arguments=TEXT, output=CONTENT, input=TEXT, id=TEXT,
)  # fmt: skip
RESPONSES = st.fixed_dictionaries(
    {"model": st.just("m"), "input": (st.one_of(TEXT, st.lists(ITEM, max_size=5)))},
    optional={"instructions": TEXT, "stream": st.booleans(),
              "store": st.one_of(st.booleans(), ANY_JSON), "tools": st.lists(st.one_of(
                  _object(type=_kind("function"), name=TEXT, parameters=st.just({}),
                          description=TEXT),
                  _object(type=_kind("custom", "web_search"), name=TEXT,
                          format=_object(type=_kind("text", "grammar"), syntax=TEXT,
                                         definition=TEXT))), max_size=3),
              "tool_choice": st.one_of(_kind("auto", "none", "required"),
                                       _object(type=_kind("function", "custom", "web_search"),
                                               name=TEXT)),
              "text": _object(format=_object(type=_kind("text", "json_object", "json_schema"),
                                             name=TEXT, schema=st.just({}))),
              "reasoning": _object(effort=_kind("low", "high")),
              "max_output_tokens": st.integers(-1, 64), "previous_response_id": TEXT},
)  # fmt: skip


def _served_or_refused(parse, body) -> None:
    try:
        parsed = parse(body)
    except GatewayRequestInvalid as exc:
        assert exc.param and str(exc)
    else:
        assert isinstance(parsed, ClientRequest) and parsed.messages


FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(body=st.one_of(ANY_JSON, RESPONSES))
def test_a_responses_body_is_served_or_refused_by_field(body):
    _served_or_refused(parse_responses_request, body)


@FUZZ
@given(body=st.one_of(ANY_JSON, CHAT))
def test_a_chat_completions_body_is_served_or_refused_by_field(body):
    _served_or_refused(parse_chat_request, body)


@FUZZ
@given(body=st.one_of(ANY_JSON, MESSAGES))
def test_a_messages_body_is_served_or_refused_by_field(body):
    _served_or_refused(parse_messages_request, body)


def test_a_content_part_with_a_stray_refusal_field_is_read_or_refused_by_name():
    """What one draw of 3,000 bodies found: a part's ``refusal`` field was joined into the
    text whatever its kind and type, so a list there was a 500."""
    parts = [{"type": "input_image", "refusal": {"x": 1}}, {"type": "text", "text": "hi"}]
    body = {"model": "m", "messages": [{"role": "user", "content": parts}]}
    assert parse_chat_request(body).messages[0].content == "[input_image]\nhi"
    body["messages"][0]["content"] = [{"type": "refusal", "refusal": ["no"]}]
    try:
        parse_chat_request(body)
    except GatewayRequestInvalid as exc:
        assert exc.param == "messages.0.content.0.refusal"
    else:
        raise AssertionError("a refusal that is not a string was taken")
    output = [{"type": "refusal", "refusal": "I can't."}]
    items = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": output}]
    parsed = parse_responses_request({"model": "m", "input": items})
    assert parsed.messages[-1].content == "I can't."
