"""The Messages request for a view: Chat Completions ``messages`` and function ``tools`` (the
gateway's view, whatever the client's API) as Anthropic's ``system``, alternating turns of
content blocks and custom tools, with prompt-cache breakpoints (see ``anthropic_upstream``
for what is sent and why; ``TurnFold`` for how a session's turns are kept between calls).
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from typing import Any

from ._json import loads
from .anthropic_api import anthropic_tool, anthropic_tool_choice
from .upstream import CACHE_PARAM

__all__ = ["DEFAULT_MAX_TOKENS", "MAX_BREAKPOINTS", "THINKING_BLOCKS", "TurnFold", "messages_body"]

MAX_BREAKPOINTS = 4
THINKING_BLOCKS = ("thinking", "redacted_thinking")
EPHEMERAL = {"type": "ephemeral"}
# Anthropic requires max_tokens; OpenAI clients often send none. Every Claude model can
# write at least this many tokens in one reply.
DEFAULT_MAX_TOKENS = 4096
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def _tool_id(raw: Any) -> str:
    """A call id as Anthropic accepts it (``^[A-Za-z0-9_-]+$``); the same on both sides."""
    return _ID_UNSAFE.sub("_", str(raw or "")) or "call"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _call_input(call: Mapping[str, Any]) -> dict[str, Any]:
    raw = (call.get("function") or {}).get("arguments")
    if isinstance(raw, dict):
        return raw
    try:
        decoded = loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except json.JSONDecodeError:
        return {"arguments": raw}  # kept as the model wrote it
    return decoded if isinstance(decoded, dict) else {"arguments": decoded}


def _text_block(text: str) -> dict[str, Any] | None:
    # The API refuses empty and whitespace-only text blocks.
    return {"type": "text", "text": text} if text.strip() else None


class TurnFold:
    """The Messages turns of a view's Chat Completions ``messages``, kept between calls.

    A session's views mostly grow: each call's messages are the last call's (the same dict
    objects: ``WorkingView.messages(reuse=...)``) plus a few new ones. ``turns(messages,
    marks)`` then converts only what changed: it finds how many leading messages are the
    same objects with the same client breakpoint as last time, keeps the turns made of those
    alone (their pairing too, but for the last kept turn and the one before it, whose
    neighbours may change) and folds the rest again. Any other change (an eviction
    rewrites the front of the view) converts it all, as a fresh fold does. The result always
    equals a fresh conversion (``tests/test_gateway_anthropic_fold.py`` checks it on random
    histories).

    The turns and blocks it returns are shared with later calls: whoever sends them must
    copy a block before changing it (``messages_body`` does). One fold serves one session
    (``AnthropicUpstream`` keeps one per view it has seen last, a few dozen at most)."""

    __slots__ = (
        "_marked",
        "_marks",
        "_paired",
        "_rewrite",
        "_src",
        "_starts",
        "_system",
        "_turns",
        "marked",
        "rewrite",
    )

    def __init__(self) -> None:
        self._src: list[dict[str, Any]] = []  # the messages folded (kept: their ids key reuse)
        self._marks: list[Any] = []  # the client's breakpoint on each, or None
        self._system: list[str] = []
        self._turns: list[dict[str, Any]] = []  # before pairing
        self._starts: list[int] = []  # the first message of each turn
        self._paired: list[dict[str, Any]] = []
        self._marked: list[int] = []  # the turns a client's breakpoint went on
        # After ``turns``: the indices, in what it returned, of the turns that may hold one.
        self.marked: list[int] = []
        # After ``turns``: when the messages changed in the middle rather than only grew (a
        # fold rewrote the view), the index of the last turn that is as it was; else None.
        self.rewrite: int | None = None
        self._rewrite: int | None = None

    def turns(
        self, messages: list[dict[str, Any]], marks: list[Any] | None = None
    ) -> tuple[str, list[dict[str, Any]]]:
        """The system text and the alternating turns for ``messages`` (``marks``: the
        client's breakpoint on each message, or None); see the class docstring."""
        marks = marks if marks is not None else [None] * len(messages)
        src, old = self._src, self._marks
        same = 0
        limit = min(len(src), len(messages))
        while same < limit and src[same] is messages[same] and old[same] == marks[same]:
            same += 1
        if same == len(src) == len(messages):
            return self._result()
        keep = bisect_right(self._starts, same) - 1  # turns made of unchanged messages only
        # Turns before ``keep - 2`` come out as they did (pairing looks one turn ahead).
        self._rewrite = keep - 3 if same < len(src) and keep >= 3 else None
        if keep < 1:
            self._system, self._turns, self._starts, self._paired = [], [], [], []
            self._marked = []
            at = 0
        else:
            at = self._starts[keep]
            self._turns = self._turns[:keep]
            self._starts = self._starts[:keep]
            self._marked = [t for t in self._marked if t < keep]
            # The last kept turn may take more blocks: a copy, so earlier results stand.
            last = self._turns[-1]
            self._turns[-1] = {"role": last["role"], "content": list(last["content"])}
        self._src, self._marks = list(messages), list(marks)
        for i in range(at, len(messages)):
            self._fold(i, messages[i], marks[i])
        redo = max(0, keep - 2)
        self._paired = self._paired[:redo] + _paired(self._turns, redo)
        return self._result()

    def _result(self) -> tuple[str, list[dict[str, Any]]]:
        turns = _led(self._paired)
        shift = len(turns) - len(self._paired)
        self.marked = sorted({t + shift for t in self._marked})
        self.rewrite = None if self._rewrite is None else self._rewrite + shift
        return "\n\n".join(s for s in self._system if s), turns

    def _add(self, i: int, role: str, block: dict[str, Any] | None) -> None:
        if block is None:
            return
        turns = self._turns
        if not turns or turns[-1]["role"] != role:
            turns.append({"role": role, "content": []})
            self._starts.append(i)
        blocks = turns[-1]["content"]
        if block["type"] == "tool_result":  # results first in their turn
            at = sum(1 for b in blocks if b["type"] == "tool_result")
            blocks.insert(at, block)
        else:
            blocks.append(block)

    def _fold(self, i: int, message: dict[str, Any], mark: Any) -> None:
        role = message.get("role")
        text = _text(message.get("content"))
        add = self._add
        if role in ("system", "developer"):
            if not self._turns:
                self._system.append(text)
            else:
                add(i, "user", _text_block(f"[{role}] {text}"))
        elif role == "tool":
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": _tool_id(message.get("tool_call_id")),
            }
            if text:
                block["content"] = text
            add(i, "user", block)
        elif role == "assistant":
            for thought in message.get("thinking") or ():  # first in its turn, unchanged
                add(i, "assistant", dict(thought))
            add(i, "assistant", _text_block(text))
            for call in message.get("tool_calls") or ():
                name = str((call.get("function") or {}).get("name") or "tool")
                use = {"type": "tool_use", "id": _tool_id(call.get("id")), "name": name}
                add(i, "assistant", {**use, "input": _call_input(call)})
        else:
            add(i, "user", _text_block(text))
        if mark and self._turns and self._turns[-1]["content"]:
            blocks = self._turns[-1]["content"]
            if blocks[-1]["type"] not in THINKING_BLOCKS:  # a new dict: the old may be shared
                blocks[-1] = {**blocks[-1], "cache_control": mark}
                self._marked.append(len(self._turns) - 1)


def _turns(
    messages: list[dict[str, Any]], marks: list[Any] | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """The system text and the alternating turns for Chat Completions ``messages``."""
    return TurnFold().turns(messages, marks)


def _led(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``turns`` led by a user turn, as the API requires."""
    if turns and turns[0]["role"] == "user":
        return list(turns)
    return [{"role": "user", "content": [{"type": "text", "text": "(continued)"}]}, *turns]


def _paired(turns: list[dict[str, Any]], start: int = 0) -> list[dict[str, Any]]:
    """``turns[start:]`` with every ``tool_result`` answering a ``tool_use`` of the turn
    just before and every ``tool_use`` answered in the turn just after (the API's rule; the
    last turn's calls may be open); the others become text, nothing dropped. Each output
    turn depends on its raw turn and the two beside it only."""
    out: list[dict[str, Any]] = []
    for i in range(start, len(turns)):
        turn = turns[i]
        blocks = turn["content"]
        if turn["role"] == "user":
            before = turns[i - 1]["content"] if i and turns[i - 1]["role"] == "assistant" else []
            called = {b["id"] for b in before if b["type"] == "tool_use"}
            blocks = [
                b
                if b["type"] != "tool_result" or b["tool_use_id"] in called
                else {
                    "type": "text",
                    "text": f"[tool result {b['tool_use_id']}] {b.get('content', '')}",
                }
                for b in blocks
            ]
            blocks = sorted(blocks, key=lambda b: b["type"] != "tool_result")  # results lead
        elif i + 1 < len(turns):
            after = turns[i + 1]["content"]
            answered = {b["tool_use_id"] for b in after if b["type"] == "tool_result"}
            blocks = [
                b
                if b["type"] != "tool_use" or b["id"] in answered
                else {
                    "type": "text",
                    "text": f"[called {b['name']} {json.dumps(b['input'], ensure_ascii=False)}]",
                }
                for b in blocks
            ]
        else:
            blocks = list(blocks)
        if len(blocks) == 1 and blocks[0]["type"] == "text" and "cache_control" not in blocks[0]:
            # One plain text block: sent as the string the API also takes for it (most turns:
            # a smaller body, read faster by the upstream; the same prompt).
            out.append({"role": turn["role"], "content": blocks[0]["text"]})
        else:
            out.append({"role": turn["role"], "content": blocks})
    return out


def messages_body(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    *,
    model: str,
    params: Mapping[str, Any],
    stream: bool = False,
    default_max_tokens: int = DEFAULT_MAX_TOKENS,
    cache: bool = True,
    fold: TurnFold | None = None,
) -> dict[str, Any]:
    """The Messages request for a view (Chat Completions ``messages`` and function
    ``tools``) and the client's ``params``; see the module docstring. ``fold``: the
    session's ``TurnFold``, so a view that only grew converts its new messages alone."""
    marks = (params.get(CACHE_PARAM) or {}) if cache else {}
    fold = fold or TurnFold()
    system, turns = fold.turns(messages, _message_marks(messages, marks))
    max_tokens = params.get("max_tokens") or params.get("max_completion_tokens")
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": int(max_tokens or default_max_tokens),
        "messages": turns,
    }
    if system:
        body["system"] = [{"type": "text", "text": system}]
    if tools:
        tool_marks = marks.get("tools") or {}
        body["tools"] = [anthropic_tool(t) for t in tools]
        if tool_marks:  # the client's breakpoints on its own tools
            for tool in body["tools"]:
                mark = tool_marks.get(tool["name"])
                if mark:
                    tool["cache_control"] = dict(mark)
        choice = anthropic_tool_choice(
            params.get("tool_choice"), parallel=params.get("parallel_tool_calls")
        )
        if choice is not None:
            body["tool_choice"] = choice
    if cache:
        # Breakpoints after the prefix (tools and system) and at the end of the view: the
        # next call (a recall step, the client's next turn) reads both back from the cache
        # until an eviction changes the view's front. The client's own breakpoints (on its
        # tools, on its system prompt: their time to live; on messages still in the view
        # with the text the client sent) are kept too.
        # After a fold rewrote the middle of the view, one more on the last turn before the
        # change: the lookup from it finds what the last calls wrote, so the unchanged front
        # is read from the cache instead of written again with everything after it.
        rewrite = (
            fold.rewrite if fold.rewrite is not None and fold.rewrite < len(turns) - 1 else None
        )
        at = sorted({*fold.marked, rewrite}) if rewrite is not None else fold.marked
        turns, marked = _owned(turns, at)
        body["messages"] = turns
        if system:
            body["system"][0]["cache_control"] = dict(marks.get("system") or EPHEMERAL)
        kept: list[dict[str, Any]] = []
        if rewrite is not None:
            kept = _mark_last(turns[rewrite])
            marked = _breakpoints(turns, at)
        last = turns[-1]["content"][-1]
        if last["type"] not in THINKING_BLOCKS:
            last.setdefault("cache_control", dict(EPHEMERAL))
        _fit_breakpoints(body, [*marked, last] if "cache_control" in last else marked, kept)
    thinking = params.get("thinking")
    if thinking:
        body["thinking"] = thinking  # the client's extended thinking, as it asked
    output = params.get("output_config")
    if output:
        body["output_config"] = output  # its effort, as it asked
    stop = params.get("stop")
    if stop:
        body["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if stream:
        body["stream"] = True
    return body


def _owned(
    turns: list[dict[str, Any]], marked: list[int]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``turns`` with the last turn and the ``marked`` ones (those that may hold a
    breakpoint) copied down to the blocks that change here (a fold's turns are shared with
    its later calls), and the blocks holding a breakpoint, in order, the last turn's aside."""
    out = list(turns)
    last = len(out) - 1
    found: list[dict[str, Any]] = []
    for i in [*(t for t in marked if t < last), last]:
        content = out[i]["content"]
        if isinstance(content, str):  # see ``_paired``: the last turn takes a breakpoint
            content = [{"type": "text", "text": content}]
        blocks = [dict(b) if "cache_control" in b else b for b in content]
        if i == last:
            blocks[-1] = dict(blocks[-1])
        else:
            found += [b for b in blocks if "cache_control" in b]
        out[i] = {"role": out[i]["role"], "content": blocks}
    found += [b for b in out[last]["content"][:-1] if "cache_control" in b]
    return out, found


def _mark_last(turn: dict[str, Any]) -> list[dict[str, Any]]:
    """A breakpoint on ``turn``'s last block (a copy: ``_owned`` made the list its own) unless
    that is a thinking block; the block marked, in a list, or an empty one."""
    blocks = turn["content"]
    if blocks[-1]["type"] in THINKING_BLOCKS:
        return []
    if "cache_control" not in blocks[-1]:
        blocks[-1] = {**blocks[-1], "cache_control": dict(EPHEMERAL)}
    return [blocks[-1]]


def _breakpoints(turns: list[dict[str, Any]], at: list[int]) -> list[dict[str, Any]]:
    """The blocks holding a breakpoint in the turns ``at`` and in the last turn but its last
    block, in order (what ``_owned`` returns)."""
    last = len(turns) - 1
    found = [b for i in at if i < last for b in turns[i]["content"] if "cache_control" in b]
    return found + [b for b in turns[last]["content"][:-1] if "cache_control" in b]


def _message_marks(messages: list[dict[str, Any]], marks: Mapping[str, Any]) -> list[Any] | None:
    """The client's breakpoint for each view message: a message equal (role and text) to
    one the client marked carries its ``cache_control``. A message whose text Scroll changed
    on the way (a tool result cut to a preview, the archive joined to a user message) is not
    equal to what the client marked, so its breakpoint is dropped: the upstream's cache
    would never hold the client's version of it anyway."""
    wanted = {(m[0], m[1].strip()): m[2] for m in marks.get("messages") or ()}
    if not wanted:
        return None
    return [
        wanted.get((str(message.get("role")), _text(message.get("content")).strip()))
        for message in messages
    ]


def _fit_breakpoints(
    body: dict[str, Any], marked: list[dict[str, Any]], also: Sequence[dict[str, Any]] = ()
) -> None:
    """At most ``MAX_BREAKPOINTS`` (the API's limit), counted in the order the API caches
    the prefix: tools, system, messages (``marked``: the message blocks holding one, in
    order). The system's and the view's last are kept, the client's earliest dropped first
    (its tools' before its messages'); a longer time to live never follows a shorter one
    (the API's rule), so an earlier breakpoint takes the longest of those after it. ``also``:
    more of ``marked`` to keep before the client's (the one after a rewrite)."""
    blocks = [t for t in body.get("tools") or () if "cache_control" in t]
    kept = [b for b in body.get("system") or () if "cache_control" in b] + list(also)
    for block in [*kept, *marked]:  # a block in both (the rewrite's, a client's) counts once
        if not any(block is b for b in blocks):
            blocks.append(block)
    last = body["messages"][-1]["content"][-1]
    if marked and marked[-1] is last:
        kept.append(last)
    while len(blocks) > MAX_BREAKPOINTS:
        at = next(i for i, b in enumerate(blocks) if not any(b is k for k in kept))
        drop = blocks.pop(at)
        del drop["cache_control"]
    longest = "5m"
    for block in reversed(blocks):
        ttl = block["cache_control"].get("ttl", "5m")
        if ttl == "1h":
            longest = "1h"
        elif longest == "1h":
            block["cache_control"] = {**block["cache_control"], "ttl": "1h"}
