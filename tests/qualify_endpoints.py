"""Scripted model endpoints of known, different behaviour for the qualification suite, each
served over loopback HTTP by ``gateway_upstream.ScriptedUpstream`` (Chat Completions): a
``Behaviour`` reads the request the way a model would (the live request is the last user
message, the cells' outputs are the tool messages after it, the archived index is the first
user message) and writes the next reply.

- ``competent``: binds results to variables, aggregates in the kernel, searches and reads
  the hits, answers the live request, a headline on every reply;
- ``table_printer``: prints whole tables (and prints them again when the cap cuts them), then
  guesses from what fit;
- ``one_search``: runs one cell, then stops with a promise instead of an answer;
- ``archive_answerer``: competent, but answers a request it sees in the archived index
  rather than the live turn;
- ``protocol_breaker``: calls a tool the rubric does not offer, with arguments of its own
  shape, and writes no headline.

They know the suite's questions (they are test fixtures, not models): what is under test is
that each behaviour gets the scorecard it deserves."""

from __future__ import annotations

import functools
import json
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway_upstream import (
    Reply,
    ScriptedUpstream,
    a_message,
    a_tool_use,
    completion,
    tool_call,
)

from scroll_core.kernel import KernelConfig
from scroll_core.prompts import RECALL_TOOL, REPL_TOOL
from scroll_core.qualify import Scorecard, run_suite, upstream_model

__all__ = ["Behaviour", "View", "dump", "make", "scorecard"]


def headline(task: str, status: str) -> str:
    return f"⟦{task} | status: {status}; next: answer | anchors: {task}⟧"


@dataclass
class View:
    """What a behaviour reads out of one request."""

    question: str
    outputs: list[str]
    index: str

    @classmethod
    def of(cls, body: dict[str, Any]) -> View:
        if "system" in body:  # an Anthropic Messages request: system apart, content blocks
            return cls.of_messages_api(body["messages"])
        messages = body["messages"]
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        outputs = [str(m.get("content") or "") for m in messages[last_user:] if m["role"] == "tool"]
        first_user = next((m for m in messages if m["role"] == "user"), {})
        return cls(str(messages[last_user]["content"]), outputs, str(first_user.get("content", "")))

    @classmethod
    def of_messages_api(cls, messages: list[dict[str, Any]]) -> View:
        question, outputs, index = "", [], ""
        for message in messages:
            if message["role"] != "user":
                continue
            blocks = message["content"]
            if isinstance(blocks, str):
                blocks = [{"type": "text", "text": blocks}]
            texts = [b["text"] for b in blocks if b.get("type") == "text"]
            results = [b for b in blocks if b.get("type") == "tool_result"]
            index = index or "\n".join(texts)
            if results:
                for result in results:
                    content = result.get("content")
                    if isinstance(content, list):
                        content = "\n".join(c.get("text", "") for c in content)
                    outputs.append(str(content or ""))
            elif texts:
                question, outputs = texts[-1], []
        return cls(question, outputs, index)

    @property
    def step(self) -> int:
        return len(self.outputs)

    @property
    def last(self) -> str:
        return self.outputs[-1] if self.outputs else ""


Respond = Callable[[View], tuple[str, str | None, str | None]]  # (text, tool, code)


class Behaviour:
    """A ``ScriptedUpstream`` default: ``respond`` gives (text, tool, code); ``headlines``
    says whether replies end with one; ``tool_name``/``shape`` bend the call protocol."""

    def __init__(self, respond: Respond, *, headlines: bool = True, breaks_calls: bool = False):
        self.respond = respond
        self.headlines = headlines
        self.breaks_calls = breaks_calls
        self.calls = 0
        self.tools_seen: set[frozenset[str]] = set()  # the tool names each request offered

    def __call__(self, body: dict[str, Any]) -> Reply:
        self.calls += 1
        self.tools_seen.add(
            frozenset(
                t.get("name") or t.get("function", {}).get("name") for t in body.get("tools", ())
            )
        )
        view = View.of(body)
        text, tool, code = self.respond(view)
        if self.headlines:
            text = f"{text}\n{headline(view.question[:40], 'working' if tool else 'answered')}"
        if "system" in body:
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text}]
            if tool is not None:
                name, args = (
                    ("python", {"script": code}) if self.breaks_calls else (tool, {"code": code})
                )
                blocks.append(a_tool_use(name, args, f"toolu_{self.calls}"))
            return a_message(blocks, prompt=400 + 50 * view.step, out=30)
        if tool is None:
            return completion(text, prompt=400 + 50 * view.step, out=30)
        call_id = f"call_{self.calls}"
        if self.breaks_calls:
            call = tool_call("python", {"script": code}, call_id)
        else:
            call = tool_call(tool, {"code": code}, call_id)
        return completion(text, [call], prompt=400 + 50 * view.step, out=60)


# -- what the questions ask, read the way the suite words them -------------------------------
def _kind(question: str) -> str:
    q = question.lower()
    for key, kind in (
        ("bind the matching orders", "bind_filter"),
        ("log_lines", "truncation"),
        ("top_customer", "two_steps"),
        ("dog", "dog"),
        ("city", "city"),
        ("books", "books"),
        ("cuisine", "cuisine"),
        ("times", "product"),
    ):
        if key in q:
            return kind
    return "unknown"


_SEARCHES = {
    "dog": "sister dog called",
    "city": "live moved",
    "books": "finished books",
    "cuisine": "prefer food",
}
_EXTRACT = {
    "dog": r"dog is called (\w+)",
    "city": r"live in (\w+)",
    "books": r"finished (\d+) books",
    "cuisine": r"prefer (\w+) food",
}


def _search_cell(kind: str) -> str:
    return (
        f"hits = ms.search({_SEARCHES[kind]!r}, k=8)\n"
        "for h in sorted(hits, key=lambda h: h.seq):\n"
        "    e = ms.expand(h.seq)\n"
        "    print(e.seq, e.created_at[:10], e.role, (e.content or '')[:200])\n"
    )


def _recall_answer(kind: str, printed: str) -> str:
    found = re.findall(_EXTRACT[kind], printed)
    if not found:
        return "I don't have that information from our conversations."
    if kind == "books":
        return f"{sum(int(n) for n in dict.fromkeys(found))} books in total."
    return f"{found[-1]}."  # the hits are printed oldest first: the latest value wins


def competent(view: View) -> tuple[str, str | None, str | None]:
    kind, q = _kind(view.question), view.question
    if kind == "bind_filter":
        region = re.search(r"region '(\w+)'", q).group(1)  # type: ignore[union-attr]
        floor = re.search(r"over (\d+)", q).group(1)  # type: ignore[union-attr]
        if view.step == 0:
            code = (
                f"matches = [o for o in orders if o['region'] == {region!r} "
                f"and o['amount'] > {floor}]\nprint(len(matches))"
            )
            return "Filtering in the kernel.", REPL_TOOL, code
        return f"{view.last.strip()} orders.", None, None
    if kind == "truncation":
        if view.step == 0:
            code = (
                "from collections import Counter\n"
                "errors_by_path = dict(Counter(l.split()[2] for l in log_lines "
                "if l.split()[3] == '500'))\n"
                "print(max(errors_by_path.items(), key=lambda kv: kv[1]))"
            )
            return "Counting per path.", REPL_TOOL, code
        path, count = re.search(r"\('([^']+)', (\d+)\)", view.last).groups()  # type: ignore[union-attr]
        return f"{path} with {count} errors.", None, None
    if kind == "two_steps":
        region = re.search(r"region '(\w+)'", q).group(1)  # type: ignore[union-attr]
        if view.step == 0:
            code = (
                "totals = {}\nfor o in orders:\n"
                "    totals[o['customer']] = totals.get(o['customer'], 0) + o['amount']\n"
                "top_customer = max(totals, key=totals.get)\nprint(top_customer)"
            )
            return "First the top customer.", REPL_TOOL, code
        if view.step == 1:
            code = (
                "n = sum(1 for o in orders if o['customer'] == top_customer "
                f"and o['region'] == {region!r})\nprint(top_customer, n)"
            )
            return "Now that customer's orders in the region.", REPL_TOOL, code
        top, n = view.last.split()
        return f"{top}, with {n} orders.", None, None
    if kind in _SEARCHES:
        if view.step == 0:
            return "Searching the history.", RECALL_TOOL, _search_cell(kind)
        return _recall_answer(kind, view.last), None, None
    if kind == "product":
        a, b = re.search(r"(\d+) times (\d+)", q).groups()  # type: ignore[union-attr]
        if view.step == 0:
            return "Computing.", REPL_TOOL, f"print({a} * {b})"
        return view.last.strip(), None, None
    return "I don't know.", None, None


def table_printer(view: View) -> tuple[str, str | None, str | None]:
    kind = _kind(view.question)
    table = {"bind_filter": "orders", "two_steps": "orders", "truncation": "log_lines"}.get(kind)
    if table is not None:
        if view.step < 2:  # and once more when the cap cut it
            return "Let me look at the whole table.", REPL_TOOL, f"print({table})"
        seen = view.last.count("'id'") or view.last.count("\n")
        return f"About {seen}, from what I could see.", None, None
    if kind in _SEARCHES:
        if view.step == 0:
            code = "print(ms.sql_query('SELECT seq, role, content FROM events ORDER BY seq'))"
            return "Printing the whole history.", RECALL_TOOL, code
        return _recall_answer(kind, view.last), None, None
    return competent(view)


def one_search(view: View) -> tuple[str, str | None, str | None]:
    if view.step == 0:
        text, tool, code = competent(view)
        if tool is not None:
            return text, tool, code
    return "I ran a first look; tell me if I should keep going.", None, None


def archive_answerer(view: View) -> tuple[str, str | None, str | None]:
    request = re.search(r"- (Translate [^|]+?) \|", view.index)
    if request and "END OF ARCHIVED INDEX" in view.index and _kind(view.question) == "product":
        return f"{request.group(1)}: Bonjour!", None, None
    return competent(view)


def make(name: str) -> Behaviour:
    if name == "protocol_breaker":
        return Behaviour(competent, headlines=False, breaks_calls=True)
    respond = {
        "competent": competent,
        "table_printer": table_printer,
        "one_search": one_search,
        "archive_answerer": archive_answerer,
    }[name]
    return Behaviour(respond)


@functools.cache
def scorecard(name: str) -> Scorecard:
    """The suite's scorecard of the ``name`` endpoint, run once per test process (over loopback
    HTTP, process-tier kernels, a temporary Event Log); tests that store or show scorecards
    share it rather than run the same suite again."""
    upstream = ScriptedUpstream(default=make(name))
    model = upstream_model(upstream.url, f"scripted-{name}")
    try:
        with tempfile.TemporaryDirectory(prefix="qualify-test-") as workdir:
            return run_suite(
                model, workdir, upstream=upstream.url,
                kernel_config=KernelConfig(sandbox="process", grace_s=0.5),
            )  # fmt: skip
    finally:
        model.close()
        upstream.close()


def dump(card: Any) -> str:
    """A scorecard's items, one line each, for an assertion's message."""
    return "\n".join(json.dumps([i.id, i.passed, i.detail]) for i in card.items)
