"""Alignment reuses the fingerprints of messages the log already holds, and only when they are
the same: on random conversations (retries, rewrites, client tool calls, whitespace the
client changed, messages too long for the row, a process that rebuilt the session from the
log) the fingerprints a request gets equal hashing every message again."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scroll_core.gateway import GatewayConversation, parse_chat_request
from scroll_core.models import ModelReply, ToolCall, Usage
from scroll_core.profile import Profile
from scroll_core.store import EventLog
from scroll_core.tokens import CharRatioCounter

HEADLINE = "⟦memo | status: answered; next: wait | anchors: memo⟧"
_sessions = itertools.count()


class ScriptedUpstream:
    """Answers with text, or with a call to the client's tool when the last user message
    asks for one."""

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, messages, tools, *, model, params, on_text=None):
        last = messages[-1]["content"] if messages else ""
        if isinstance(last, str) and last.startswith("use the tool"):
            self.calls += 1
            call = ToolCall(f"call_{self.calls}", "lookup", {"q": self.calls}, '{"q": 1}')
            return ModelReply("", (call,), Usage(10, 2), "tool_calls")
        text = f"answer {len(messages)}\n{HEADLINE}"
        if on_text is not None:
            on_text(f"answer {len(messages)}")
        return ModelReply(text, usage=Usage(10, 2))


TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]

STEP = st.one_of(
    st.tuples(st.just("say"), st.text(alphabet="ab \n", min_size=1, max_size=12)),
    st.tuples(st.just("long"), st.integers(min_value=1, max_value=3)),
    st.tuples(st.just("tool"), st.just(0)),
    st.tuples(st.just("retry"), st.just(0)),
    st.tuples(st.just("respace"), st.integers(min_value=0, max_value=30)),
    st.tuples(st.just("rewrite"), st.integers(min_value=1, max_value=4)),
    st.tuples(st.just("reload"), st.just(0)),
    st.tuples(st.just("stream"), st.text(alphabet="cd", min_size=1, max_size=5)),
)


@pytest.fixture
def clog(tmp_path):
    counter = CharRatioCounter()
    with EventLog(tmp_path / "log.sqlite3", token_counter=counter, payload_threshold=64) as log:
        yield log


def _conversation(log, session):
    return GatewayConversation(
        log, session_id=session, agent_id="memo", profile=Profile(context_size=131_072)
    )


def _checked(conv, history, stream=False):
    request = parse_chat_request(
        {"model": "m", "messages": history, "tools": TOOLS, "stream": stream}
    )
    assert conv._fingerprints(request.messages) == [m.fingerprint() for m in request.messages]
    return request


def _reply_message(reply):
    message = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [c.to_message() for c in reply.tool_calls]
    return message


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(STEP, min_size=1, max_size=12))
def test_reused_fingerprints_equal_hashing_every_message(clog, steps):
    session = f"gw:memo:{next(_sessions)}"
    conv = _conversation(clog, session)
    upstream = ScriptedUpstream()
    history: list[dict] = [{"role": "system", "content": "be brief"}]
    for op, arg in steps:
        stream = False
        if op == "say":
            history.append({"role": "user", "content": arg})
        elif op == "long":  # past the row's payload threshold: the log keeps a preview
            history.append({"role": "user", "content": "x" * 100 * arg})
        elif op == "tool":
            history.append({"role": "user", "content": "use the tool"})
        elif op == "respace" and len(history) > 1:
            # Whitespace the client changed: the same message by its fingerprint.
            at = 1 + arg % (len(history) - 1)
            content = history[at].get("content") or ""
            history[at] = {**history[at], "content": f"  {content}\n"}
        elif op == "rewrite" and len(history) > 1:
            del history[max(1, len(history) - arg) :]
        elif op == "reload":
            conv = _conversation(clog, session)
        elif op == "stream":
            history.append({"role": "user", "content": arg})
            stream = True
        if history[-1]["role"] == "assistant" and history[-1].get("tool_calls"):
            calls = history[-1]["tool_calls"]
            history += [
                {"role": "tool", "tool_call_id": c["id"], "content": f"result of {c['id']}"}
                for c in calls
            ]
        if len(history) < 2:
            history.append({"role": "user", "content": "hello"})
        retry = op == "retry" and history[-1]["role"] == "assistant" and len(history) > 2
        sent = history[:-1] if retry else history  # asks again for the reply it got
        request = _checked(conv, sent, stream)
        chunks: list[str] = []
        reply = conv.handle(request, upstream, model="m", on_text=chunks.append if stream else None)
        if not retry:
            history.append(_reply_message(reply))
        _checked(conv, history)
    assert json.dumps(history)  # the history stayed a well-formed body


def test_a_resent_message_takes_its_links_fingerprint_without_hashing(clog):
    conv = _conversation(clog, f"gw:memo:{next(_sessions)}")
    history = [{"role": "user", "content": "hello"}]
    history.append(
        _reply_message(conv.handle(_checked(conv, history), ScriptedUpstream(), model="m"))
    )
    history.append({"role": "user", "content": "  hello again"})
    request = parse_chat_request({"model": "m", "messages": history})
    fps = conv._fingerprints(request.messages)
    assert fps[0] is conv.chain[0].fp and fps[1] is conv.chain[1].fp  # reused
    assert fps[2] == request.messages[2].fingerprint()  # new: hashed
