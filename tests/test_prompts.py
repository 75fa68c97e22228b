"""The system prompt carries the evidence discipline; the tools are valid OpenAI schemas."""

from __future__ import annotations

import json
import re

import pytest

from scroll_core.prompts import (
    ABSTENTION,
    RECALL_TOOL,
    REPL_TOOL,
    recall_rubric,
    system_prompt,
    tool_definitions,
)


@pytest.fixture
def prompt():
    return system_prompt()


def test_it_names_the_storage_layout(prompt):
    for kind in ("context_msg", "model_turn", "tool_result"):
        assert f"- {kind}:" in prompt
    assert "ordered by `seq`" in prompt
    assert "session_id" in prompt and "ISO-8601 UTC" in prompt
    assert "substr(created_at,1,10) is the day" in prompt


def test_imported_kinds_are_named_too():
    text = system_prompt(extra_kinds=[("chat_turn", "an imported turn; speaker in name")])
    assert "- chat_turn: an imported turn; speaker in name" in text


def test_it_bounds_search_and_separates_entities(prompt):
    assert "Start with k=5 or k=10 and increase k only when the evidence is insufficient" in (
        prompt
    )
    assert "Search each named entity and each key term separately" in prompt
    assert "AND-combining" in prompt


def test_it_forbids_redundant_expand(prompt):
    assert "Do not call ms.expand merely to pair a user message with its assistant reply" in (
        prompt
    )


def test_it_gives_dates_a_deterministic_path(prompt):
    assert "substr(created_at,1,10) BETWEEN ? AND ?" in prompt
    assert "ms.days_between(d1, d2)" in prompt
    assert "ms.sql_query" in prompt


def test_grounding_and_the_exact_abstention_phrase(prompt):
    assert ABSTENTION == "I don't have that information from our conversations."
    assert f'exactly: "{ABSTENTION}"' in prompt
    assert "Grounding is a hard constraint" in prompt


def test_the_print_cap_and_the_recovery_instruction_follow_the_setting():
    assert "capped at 32,000 characters" in system_prompt()
    text = system_prompt(print_cap=5000)
    assert "capped at 5,000 characters" in text and "32,000" not in text
    assert "Your variables persist: print less" in text
    with pytest.raises(ValueError, match="print_cap"):
        system_prompt(print_cap=0)


def test_the_headline_instruction_gives_the_exact_format(prompt):
    lines = prompt.splitlines()
    assert "⟦task | status: outcome; next: action | anchors: exact retrieval terms⟧" in lines
    assert "End every response" in prompt


def test_the_rubric_can_be_left_out_and_is_constant_text():
    assert recall_rubric() in system_prompt()
    assert recall_rubric() not in system_prompt(rubric=False)
    assert system_prompt() == system_prompt()  # a stable prefix for the provider's cache
    assert not re.search(r"\{[a-z_]+\}", system_prompt())  # every placeholder filled


def test_the_two_tools_are_openai_function_schemas():
    tools = tool_definitions()
    assert [t["function"]["name"] for t in tools] == [REPL_TOOL, RECALL_TOOL]
    assert (REPL_TOOL, RECALL_TOOL) == ("repl_exec", "recall_history_python")
    for tool in tools:
        assert tool["type"] == "function"
        params = tool["function"]["parameters"]
        assert params["type"] == "object"
        assert params["required"] == ["code"]
        assert params["properties"]["code"]["type"] == "string"
        assert tool["function"]["description"]
    json.dumps(tools)  # plain JSON, sendable as is
    tools[0]["function"]["name"] = "changed"
    assert tool_definitions()[0]["function"]["name"] == REPL_TOOL  # callers get a fresh copy
