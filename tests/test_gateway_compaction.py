"""Remote compaction through the gateway, as Codex asks for it (``scroll_core.gateway.compaction``):
an input ending in a ``compaction_trigger`` item (v2, streamed and not) or
``POST /v1/responses/compact`` (v1) gets exactly one ``compaction`` item and no model call;
a later request carrying the item continues from the session's own view, the log appending
only what is new, and a fact from before the compaction comes back through
``recall_history_python``. A changed handle, or one made for another agent, is refused in
OpenAI's shape. Raw HTTP (httpx), so the requests are exactly the items Codex sends."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest
from django.urls import reverse
from gateway_clients import an, logged_messages, make_key
from gateway_upstream import HEADLINE, Reply, a_message, a_text, a_tool_use, completion, text
from gateway_upstream import tool_call as chat_call

from dashboard.gateway.service import get_service, reset_service
from dashboard.runs.models import TuningProfile
from scroll_core.prompts import RECALL_TOOL

pytestmark = pytest.mark.django_db(transaction=True)

FACT = "The vault code is 4711."
FILLER = "the quick brown fox jumps over the lazy dog " * 15  # ~150 tokens a message
CODE = "print([h.snippet for h in ms.search('vault code', k=3)])"


def _dev(text_: str) -> dict[str, Any]:
    return {"type": "message", "role": "developer",
            "content": [{"type": "input_text", "text": text_}]}  # fmt: skip


def _user(text_: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text_}]}


def _post(gateway: str, key: str, body: dict[str, Any], path: str = "/v1/responses"):
    return httpx.post(
        f"{gateway}{path}", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )


def _events(answer: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in answer.text.splitlines() if line.startswith("data: ")]


def _key(upstream, fmt: str = "openai", agent: str = "codex") -> str:
    profile = TuningProfile.objects.get_or_create(name="gw-compact", context_size=4096)[0]
    base = upstream.root if fmt == "anthropic" else upstream.url
    return make_key(upstream, agent=agent, profile=profile, upstream_format=fmt,
                    upstream_base_url=base, model_map={"*": "upstream-model"})  # fmt: skip


def _long_history(gateway: str, key: str, upstream, fmt: str) -> list[dict[str, Any]]:
    """Eight turns, the fact in the first, each reply sent back as Codex sends it."""
    history = [_dev("You are Codex."), _user(FACT)]
    for i in range(8):
        upstream.then(a_text(f"noted {i}") if fmt == "anthropic" else text(f"noted {i}"))
        answer = _post(gateway, key, {"model": "gpt-5", "input": history, "store": False})
        assert answer.status_code == 200, answer.text
        history += answer.json()["output"]
        history.append(_user(f"step {i}: {FILLER}"))
    return history[:-1]


def _recall_then_check(fmt: str) -> list[Any]:
    """The upstream recalls the fact, then answers only if the printout holds it."""

    def check(body: dict[str, Any]) -> Reply:
        printed = json.dumps(body["messages"][-1])
        assert "4711" in printed, printed
        return a_text("It is 4711.") if fmt == "anthropic" else text("It is 4711.")

    if fmt == "anthropic":
        call = a_message([a_tool_use(RECALL_TOOL, {"code": CODE}, "toolu_r")])
    else:
        call = completion(f"Looking.\n{HEADLINE}", [chat_call(RECALL_TOOL, {"code": CODE}, "c_r")])
    return [call, check]


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_a_compaction_trigger_is_answered_from_the_log_and_the_next_turn_recalls(
    gateway, upstream, console_log, fmt
):
    key = _key(upstream, fmt)
    history = _long_history(gateway, key, upstream, fmt)
    session = get_service().held_sessions().pop()
    calls = len(upstream.requests)

    trigger = {"model": "gpt-5", "input": [*history, {"type": "compaction_trigger"}],
               "stream": True, "store": False}  # fmt: skip
    answer = _post(gateway, key, trigger)
    assert answer.status_code == 200, answer.text
    events = _events(answer)
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.output_item.done", "response.completed",
    ]  # fmt: skip
    output = events[-1]["response"]["output"]
    assert [item["type"] for item in output] == ["compaction"]
    handle = output[0]["encrypted_content"]
    assert FACT not in handle and "4711" not in handle  # a handle, not a summary
    assert len(upstream.requests) == calls  # no model call
    before = logged_messages(console_log, session)
    marker = [e for e in console_log.session_events(session, limit=None)
              if e.metadata.get("gw") == "compaction"]  # fmt: skip
    assert len(marker) == 1 and marker[0].metadata["at"] == len(before)
    lo, hi = marker[0].metadata["replaced"]
    evicted = marker[0].metadata["evicted"]  # the forced eviction took the fact's turn
    assert lo <= evicted[0] <= evicted[1] <= hi

    if fmt == "anthropic":
        # Another web process (or this one after a restart) rebuilds the session from the
        # log: it still continues from the compacted view, not the whole history.
        reset_service()
    # What Codex sends next: its instructions, its own context, the compaction, a question.
    upstream.then(*_recall_then_check(fmt))
    later = [_dev("You are Codex."), _user(FACT), output[0], _user("What is the vault code?")]
    answer = _post(gateway, key, {"model": "gpt-5", "input": later, "store": False})
    assert answer.status_code == 200, answer.text
    assert "4711" in answer.json()["output"][-1]["content"][0]["text"]
    first_view = json.dumps(upstream.requests[calls])
    assert FACT not in first_view and "step 0:" not in first_view  # Scroll's view, evicted
    assert answer.headers["X-Scroll-Session"] == session
    logged = logged_messages(console_log, session)
    assert logged[: len(before)] == before
    assert [role for role, _ in logged[len(before) :]] == ["user", "assistant"]
    assert [t for _, t in logged].count(FACT) == 1


def test_remote_compaction_v1_and_a_whole_v2_answer_one_compaction_item(
    gateway, upstream, console_log, admin_client
):
    key = _key(upstream)
    upstream.then(text("noted"))
    first = _post(gateway, key, {"model": "gpt-5", "input": [_user(FACT)], "store": False})
    history = [_user(FACT), *first.json()["output"]]
    v1 = _post(gateway, key, {"model": "gpt-5", "input": history}, "/v1/responses/compact")
    assert v1.status_code == 200, v1.text
    assert v1.json()["object"] == "response.compaction"
    assert [i["type"] for i in v1.json()["output"]] == ["compaction"]
    trigger = [*history, {"type": "compaction_trigger"}]
    v2 = _post(gateway, key, {"model": "gpt-5", "input": trigger})
    assert v2.status_code == 200 and v2.json()["status"] == "completed"
    assert [i["type"] for i in v2.json()["output"]] == ["compaction"]
    assert len(upstream.requests) == 1
    # Each handle continues the session; nothing is appended twice.
    upstream.then(text("again"))
    after = [v2.json()["output"][0], _user("and now?")]
    assert _post(gateway, key, {"model": "gpt-5", "input": after}).status_code == 200
    session = v2.headers["X-Scroll-Session"]
    assert [r for r, _ in logged_messages(console_log, session)] == ["user", "assistant"] * 2
    # The session page shows each compaction and the seqs it stands for.
    markers = [e for e in console_log.session_events(session, limit=None)
               if e.metadata.get("gw") == "compaction"]  # fmt: skip
    assert len(markers) == 2
    page = admin_client.get(reverse("session", args=[session])).content.decode()
    lo, hi = markers[0].metadata["replaced"]
    assert page.count('<div class="compaction"') == 2
    assert f'data-replaced="{lo}-{hi}"' in page and f'href="?after={lo - 1}#e{lo}"' in page


def test_a_forged_or_foreign_compaction_is_refused_in_openai_shape(gateway, upstream):
    key = _key(upstream)
    upstream.then(text("noted"))
    first = _post(gateway, key, {"model": "gpt-5", "input": [_user(FACT)], "store": False})
    history = [_user(FACT), *first.json()["output"], {"type": "compaction_trigger"}]
    item = _post(gateway, key, {"model": "gpt-5", "input": history}).json()["output"][0]
    handle = item["encrypted_content"]
    forged = handle[:-2] + ("A" if handle[-2] != "A" else "B") + handle[-1]
    mallory = _key(upstream, agent="mallory")
    for who, content in ((key, forged), (key, "not a handle"), (mallory, handle)):
        refused = _post(
            gateway, who, {"model": "gpt-5", "input": [{**item, "encrypted_content": content},
                                                       _user("what is the code?")]},
        )  # fmt: skip
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["param"] == "input.0.encrypted_content"
        assert "not a compaction this gateway made" in error["message"]
    assert len(upstream.requests) == 1  # nothing refused reached the upstream
    misplaced = _post(gateway, key, {"model": "gpt-5", "input": [{"type": "compaction_trigger"},
                                                                 _user("hi")]})  # fmt: skip
    assert misplaced.status_code == 400 and misplaced.json()["error"]["param"] == "input.0.type"


@pytest.mark.parametrize("stream", [False, True])
def test_the_anthropic_client_compacts_and_the_next_turn_recalls(
    gateway, upstream, console_log, stream
):
    client = an(gateway, _key(upstream, "anthropic"))
    history: list[dict[str, Any]] = [{"role": "user", "content": FACT}]
    for i in range(8):
        upstream.then(a_text(f"noted {i}"))
        reply = client.messages.create(model="claude-x", max_tokens=100, messages=history)
        history += [{"role": "assistant", "content": reply.content[0].text},
                    {"role": "user", "content": f"step {i}: {FILLER}"}]  # fmt: skip
    history.pop()
    calls = len(upstream.requests)
    ask = {"model": "claude-x", "max_tokens": 100, "messages": history,
           "compaction": {"type": "summarize"}}  # fmt: skip
    if stream:
        with client.beta.messages.stream(**ask) as events:
            compacted = events.get_final_message()
    else:
        compacted = client.beta.messages.create(**ask)
    assert compacted.stop_reason == "compaction" and len(upstream.requests) == calls
    [block] = compacted.content
    assert block.type == "compaction" and "4711" not in (block.content or "")
    session = get_service().held_sessions().pop()
    before = logged_messages(console_log, session)

    upstream.then(*_recall_then_check("anthropic"))
    answer = client.beta.messages.create(
        model="claude-x", max_tokens=100,
        messages=[{"role": "assistant", "content": [block.model_dump(exclude_none=True)]},
                  {"role": "user", "content": "What is the vault code?"}],
    )  # fmt: skip
    assert "4711" in answer.content[-1].text
    assert FACT not in json.dumps(upstream.requests[calls])  # Scroll's view
    logged = logged_messages(console_log, session)
    assert logged[: len(before)] == before
    assert [role for role, _ in logged[len(before) :]] == ["user", "assistant"]
    forged = {**block.model_dump(exclude_none=True), "encrypted_content": "scroll-compaction-1.x.y"}
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(
            model="claude-x",
            max_tokens=100,
            messages=[
                {"role": "assistant", "content": [forged]},
                {"role": "user", "content": "and?"},
            ],
        )
    assert refused.value.body["error"]["type"] == "invalid_request_error"
    assert "not a compaction this gateway made" in refused.value.message
