"""An Anthropic upstream's request body built from the last call's converted turns is the
body a fresh conversion gives.

``TurnFold`` keeps a session's converted turns between upstream calls, so a view that only
grew converts its new messages alone (``WorkingView.messages(reuse=...)`` hands the same
message objects back). These tests grow random views (user text, assistant text with
thinking blocks and tool calls, tool results answered or not, developer notes, the
client's breakpoints moving from call to call, views rebuilt from scratch as an eviction
does) and compare each body with a fresh one, then check the earlier bodies were left as
they were sent."""

from __future__ import annotations

import copy
import json
from typing import Any

from anthropic_schema import assert_valid_request
from hypothesis import example, given, settings
from hypothesis import strategies as st

from scroll_core.gateway.anthropic_request import TurnFold, messages_body
from scroll_core.gateway.anthropic_upstream import AnthropicUpstream

TOOLS = [{"type": "function", "function": {"name": "Bash", "parameters": {"type": "object"}}}]
MARK = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}

# One step: a message added (its kind and a number), a view rebuilt ("rebuild"), or a call
# made with breakpoints on some of the last messages ("mark", how many back), or the last
# message replaced by a new one of another kind (a client that rewrote its last turn).
STEP = st.one_of(
    st.tuples(
        st.sampled_from(["user", "assistant", "call", "result", "orphan", "developer", "empty"]),
        st.integers(min_value=0, max_value=3),
    ),
    st.tuples(st.just("rebuild"), st.just(0)),
    st.tuples(st.just("replace"), st.integers(min_value=0, max_value=6)),
    st.tuples(st.just("mark"), st.integers(min_value=0, max_value=6)),
)


def _message(kind: str, n: int, k: int, view: list[dict[str, Any]]) -> dict[str, Any]:
    if kind == "user":
        return {"role": "user", "content": f"question {k} " + "words " * n}
    if kind == "empty":
        return {"role": "user", "content": "  "}
    if kind == "developer":
        return {"role": "developer", "content": f"note {k}"}
    if kind == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": f"answer {k}" if n else ""}
        if n % 2:
            out["thinking"] = [{"type": "thinking", "thinking": f"t{k}", "signature": f"s{k}"}]
        return out
    if kind == "call":
        calls = [
            {"id": f"c{k}.{j}", "type": "function",
             "function": {"name": "Bash", "arguments": json.dumps({"cmd": f"ls {j}"})}}
            for j in range(n + 1)
        ]  # fmt: skip
        return {"role": "assistant", "content": "", "tool_calls": calls}
    if kind == "result":  # answers the newest call in the view, wherever it is
        calls = [c["id"] for m in view for c in m.get("tool_calls") or ()]
        return {"role": "tool", "tool_call_id": calls[-1] if calls else "none", "content": f"{k}"}
    return {"role": "tool", "tool_call_id": f"gone{k}", "content": f"orphan {k}"}


def _marks(view: list[dict[str, Any]], back: int) -> dict[str, Any]:
    """The client's breakpoints on the messages ``back`` and ``back // 2`` from the end."""
    chosen = [view[-1 - b] for b in {back, back // 2} if b < len(view) - 1]
    marked = [
        [m["role"], str(m.get("content") or ""), HOUR if i else MARK] for i, m in enumerate(chosen)
    ]
    return {"anthropic_cache": {"system": None, "messages": marked}}


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(STEP, min_size=1, max_size=40))
# A call, a user turn not answering it, then that turn's follow-up replaced by the answer:
# the call two turns back changes from text to a tool_use.
@example(steps=[("call", 0), ("user", 0), ("assistant", 1), ("replace", 3)])
def test_a_body_from_the_kept_turns_equals_a_fresh_one_and_leaves_earlier_bodies_as_sent(steps):
    fold = TurnFold()
    view: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    params: dict[str, Any] = {"max_tokens": 64}
    sent: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for k, (kind, n) in enumerate(steps):
        if kind == "rebuild":  # new objects, equal or not: an eviction's view
            view = [dict(m) for m in view[:1]] + [dict(m) for m in view[1 + n :]]
        elif kind == "replace":
            kinds = ["user", "assistant", "call", "result", "orphan", "developer", "empty"]
            view = [*view[:-1], _message(kinds[n], 1, k, view)] if len(view) > 1 else view
        elif kind == "mark":
            params = {"max_tokens": 64, **_marks(view, n)}
        else:
            view = [*view, _message(kind, n, k, view)]  # a new list sharing the old objects
        if len(view) == 1:
            continue
        body = messages_body(view, TOOLS, model="m", params=params, fold=fold)
        fresh = messages_body(copy.deepcopy(view), TOOLS, model="m", params=params)
        if fold.rewrite is None or fold.rewrite >= len(body["messages"]) - 1:
            assert body == fresh
        else:
            # After a rewrite in the middle, one breakpoint more, on the last turn before it
            # (one of the client's may have made room for it); the rest as a fresh body.
            # When it did, and that one lived an hour, the system's breakpoint no longer
            # has to (the API's rule: a longer time to live never follows a shorter one).
            assert _unmarked(body, ttl=False) == _unmarked(fresh, ttl=False)
            last = body["messages"][fold.rewrite]["content"][-1]
            assert "cache_control" in last or last["type"] == "thinking"
        hour = any(_ttl(b) == "1h" for m in body["messages"] for b in _blocks(m))
        assert _ttl(body["system"][0]) == ("1h" if hour else "5m")
        assert _breakpoints(body) <= 4
        assert_valid_request(body)
        sent.append((body, copy.deepcopy(body)))
    for body, as_sent in sent:
        assert body == as_sent  # later calls changed nothing already sent


def _unmarked(body: dict[str, Any], *, ttl: bool = True) -> dict[str, Any]:
    """``body`` without breakpoints on its messages, each turn's content as blocks (and,
    unless ``ttl``, without its system breakpoint's time to live)."""
    out = copy.deepcopy(body)
    for turn in out["messages"]:
        turn["content"] = [
            {k: v for k, v in b.items() if k != "cache_control"} for b in _blocks(turn)
        ]
    if not ttl:
        for block in out.get("system", ()):
            block["cache_control"] = {"type": "ephemeral"}
    return out


def _blocks(turn: dict[str, Any]) -> list[dict[str, Any]]:
    content = turn["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _ttl(block: dict[str, Any]) -> str | None:
    mark = block.get("cache_control")
    return None if mark is None else mark.get("ttl", "5m")


def _breakpoints(body: dict[str, Any]) -> int:
    parts = [*body.get("tools", ()), *body.get("system", ())]
    parts += [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
    return sum("cache_control" in b for b in parts)


def test_an_upstream_keeps_one_fold_per_session_and_forgets_the_oldest():
    upstream = AnthropicUpstream("http://127.0.0.1:9")
    views = []
    for s in range(3):
        view = [{"role": "system", "content": f"sys {s}"}, {"role": "user", "content": "hi"}]
        upstream.request_body(view, [], model="m", params={}, stream=False)
        views.append(view)
    assert len(upstream._folds) == 3
    grown = [*views[1], {"role": "assistant", "content": "yes"}, {"role": "user", "content": "?"}]
    body = upstream.request_body(grown, [], model="m", params={}, stream=False)
    assert body == messages_body(copy.deepcopy(grown), [], model="m", params={})
    assert next(reversed(upstream._folds)) == id(views[1][0])  # the most recent now
    upstream.close()


def test_after_a_fold_in_the_middle_the_unchanged_front_carries_a_breakpoint(store):
    """The gateway's path: a view folds a result in its middle, its messages keep the earlier
    objects up to the change, and the Anthropic body marks the last turn before it."""
    from scroll_core.profile import Profile
    from scroll_core.tokens import CharRatioCounter
    from scroll_core.view import FOLD_MARK, ContextState, Prefix, build_view

    counter = CharRatioCounter()
    prefix = Prefix.build("sys", [], counter=counter)
    sid = "fold-mark"
    for k in range(30):
        store.append(session_id=sid, kind="context_msg", role="user", content=f"q{k}")
        store.append(
            session_id=sid, kind="model_turn", role="assistant", name="Bash",
            tool_call_id=f"c{k}", tool_input={"cmd": "ls"}, content="Bash {}",
        )  # fmt: skip
        store.append(
            session_id=sid, kind="tool_result", role="tool", name="Bash",
            tool_call_id=f"c{k}", content=f"r{k} " + "y" * 900,
        )  # fmt: skip
    state = ContextState.new(sid)
    state.sync(store)
    profile = Profile(context_size=100_000)
    before = build_view(state, profile, log=store, prefix=prefix)
    sent = before.messages()
    fold = TurnFold()
    messages_body(sent, TOOLS, model="m", params={}, fold=fold)
    folded = next(
        e.event for e in before.entries if e.event.tool_call_id == "c20" and e.event.role == "tool"
    )
    state.folded.add(folded.seq)
    after = build_view(state, profile, log=store, prefix=prefix, previous=before)
    messages = after.messages(reuse=(before, sent))
    changed = next(i for i, m in enumerate(messages) if FOLD_MARK in str(m.get("content")))
    assert all(a is b for a, b in zip(messages[:changed], sent[:changed], strict=True))
    body = messages_body(messages, TOOLS, model="m", params={}, fold=fold)
    assert_valid_request(body)
    marked = [
        i
        for i, turn in enumerate(body["messages"])
        if isinstance(turn["content"], list) and "cache_control" in turn["content"][-1]
    ]
    # The view's end and one turn a little before the folded result (pairing looks one ahead).
    assert len(marked) == 2 and marked[-1] == len(body["messages"]) - 1
    at = next(
        i
        for i, turn in enumerate(body["messages"])
        if isinstance(turn["content"], list)
        and any(b.get("tool_use_id") == "c20" for b in turn["content"])
    )
    assert at - 4 <= marked[0] < at
