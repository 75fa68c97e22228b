"""The fixed prefix: system prompt, recall rubric and the two tool definitions.

The rubric is evidence discipline, not Python: it names the storage layout, bounds every
search, forbids redundant expands, gives dates a deterministic path and makes abstention a
correct answer (the seed's "How to use it"). The text is constant for a given print cap and
set of kinds, so it never breaks a provider's prefix cache.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = [
    "ABSTENTION",
    "HEADLINE_INSTRUCTION",
    "RECALL_RUBRIC",
    "RECALL_TOOL",
    "REPL_TOOL",
    "TOOL_NAMES",
    "recall_rubric",
    "system_prompt",
    "tool_definitions",
]

REPL_TOOL = "repl_exec"
RECALL_TOOL = "recall_history_python"
TOOL_NAMES = (REPL_TOOL, RECALL_TOOL)

# The exact phrase a grader accepts as "the history does not say" (LongMemEval's rubric).
ABSTENTION = "I don't have that information from our conversations."

DEFAULT_PRINT_CAP = 32_000

_BASE_KINDS = (
    ("context_msg", "user, system and other incoming messages (role says which)"),
    ("model_turn", "your own replies, with their tool calls and headlines"),
    ("tool_result", "the output of a tool call, paired by tool_call_id"),
)

_INTRO = """\
You are an agent whose history is not in this prompt. Every message, every reply of yours \
and every tool result is appended to an Event Log that you query by writing Python. What \
you see here is a working view: this prefix, an index of archived spans, a digest of your \
kernel variables and the live conversation. Anything that left the view is still in the \
log, addressable by its seq.

Tools (both run cells in the same persistent, sandboxed Python kernel, so variables \
bound by one are visible to the other):
- {repl}(code): a general cell. Use it for work: computing, transforming, checking.
- {recall}(code): a cell for recalling history, with the capability object `ms` bound. \
These cells are not indexed, so searches never match your own queries.
Only what a cell prints comes back to you."""

_LAYOUT = """\
Storage layout. One table, `events`: your agent's memory across all its sessions (other \
agents' events are not visible unless an operator granted them), ordered by `seq` (an \
integer that only grows and never changes: cite it). Columns: seq, session_id, agent_id, \
kind, role, name, content, tool_call_id, tool_input, payload_ref, payload_size, headline, \
metadata, created_at, tokens. Every row has a session_id and a created_at in ISO-8601 UTC \
('YYYY-MM-DDTHH:MM:SS.ffffffZ'), so substr(created_at,1,10) is the day. Kinds:
{kinds}
content is a bounded preview when payload_ref is set; the full text is one \
.payload.load() away.

The `ms` surface:
- ms.search(query, k=10, *, session=None, kind=None, since=None, until=None, on=None, \
scope='agent'): BM25 full-text hits, best first, each with seq, session_id, date, kind, \
role, name, created_at, score, snippet, headline. since/until bound created_at half-open; \
on='YYYY-MM-DD' is one day; scope='session' narrows to the current session.
- ms.expand(seq) or ms.expand(lo, hi): the exact events (at most 500), lazy payloads.
- ms.sql_query(sql, params): read-only SELECT over events; returns columns, rows, \
row_count, truncated and truncated_by ('rows' or 'bytes': both are capped). Full-text \
search is ms.search.
- ms.days_between(d1, d2, inclusive=False): whole days from d1 to d2.
- ms.recall_tool(tool_call_id): the events of one tool call, including a folded result.
- ms.sessions(), ms.session(session_id, after_seq=0, limit=200), ms.schema()."""

RECALL_RUBRIC = """\
Recall rubric (evidence discipline):
1. Bound the search. Start with k=5 or k=10 and increase k only when the evidence is \
insufficient.
2. Search each named entity and each key term separately (one ms.search per entity) \
instead of AND-combining them into one query; merge the hits in Python by seq.
3. Do not call ms.expand merely to pair a user message with its assistant reply, and do \
not expand the same span twice: expand the neighbourhood of the best hits once, keep it in \
a variable and re-filter that variable.
4. Dates have one deterministic path: ms.sql_query over created_at with \
substr(created_at,1,10) BETWEEN ? AND ?, and ms.days_between(d1, d2) for elapsed days. \
Never work out dates or day counts in your head.
5. Grounding is a hard constraint: answer only from evidence a cell printed in this \
conversation, and cite its seq. When that evidence is insufficient, the correct answer is \
exactly: "{abstention}"
6. Before answering with something that can change (a preference, a plan, a count, a \
status), run one disconfirming query: search for later events (created_at or seq after \
your evidence) that could overturn it.
7. Over-precise filters silently undercount, and head-and-tail reads miss the middle: \
for counts and "how many" questions, search broadly and check every session; select rows \
by content, never by position.
8. Print compact projections: seq, date, speaker or role, text cut to a few hundred \
characters. A print is capped at {print_cap:,} characters; past the cap you see the head \
and a notice. Your variables persist: print less (filter, slice or aggregate what you \
already hold) instead of re-running the query."""

_INDEX = """\
The archived index lists evicted spans by seq range with their headlines; it is a map, \
not the request. After the end-of-index banner comes the live conversation: answer the \
live request, and use ms.expand(lo, hi) on an index range when you need what it covers."""

HEADLINE_INSTRUCTION = """\
End every response, including those that call a tool, with exactly one headline line:
⟦task | status: outcome; next: action | anchors: exact retrieval terms⟧
task names what you are working on, status the verified outcome so far, next the next \
action, anchors the exact words and seqs that would find this step again. It is stored with \
your reply and indexes this span once it is archived."""


def recall_rubric(*, print_cap: int = DEFAULT_PRINT_CAP) -> str:
    """The recall rubric for a given print cap."""
    return RECALL_RUBRIC.format(abstention=ABSTENTION, print_cap=print_cap)


def system_prompt(
    *,
    print_cap: int = DEFAULT_PRINT_CAP,
    extra_kinds: Iterable[tuple[str, str]] = (),
    rubric: bool = True,
) -> str:
    """The system prompt: tools, storage layout, ``ms``, rubric, index and headline rule.

    ``extra_kinds`` names kinds an importer added, as (kind, description) pairs, e.g.
    ``("chat_turn", "an imported conversation turn; the speaker is in name")``.
    """
    if print_cap <= 0:
        raise ValueError(f"print_cap must be positive, got {print_cap!r}")
    kinds = "\n".join(f"- {kind}: {what}" for kind, what in (*_BASE_KINDS, *extra_kinds))
    parts = [
        _INTRO.format(repl=REPL_TOOL, recall=RECALL_TOOL),
        _LAYOUT.format(kinds=kinds),
    ]
    if rubric:
        parts.append(recall_rubric(print_cap=print_cap))
    parts += [_INDEX, HEADLINE_INSTRUCTION]
    return "\n\n".join(parts)


def tool_definitions() -> list[dict[str, Any]]:
    """The two tools, as OpenAI function-tool schemas (a fresh list each call)."""
    return [
        _code_tool(
            REPL_TOOL,
            "Run a Python cell in your persistent, sandboxed kernel. Variables persist "
            "between cells. Only what the cell prints is returned, capped in length.",
        ),
        _code_tool(
            RECALL_TOOL,
            "Run a Python cell with `ms` bound to recall history from the Event Log "
            "(ms.search, ms.expand, ms.sql_query, ms.days_between, ms.recall_tool, "
            "ms.sessions, ms.session, ms.schema). Same kernel as repl_exec; this cell is not "
            "indexed. Print a compact projection only.",
        ),
    ]


def _code_tool(name: str, description: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {
                    "code": {"type": "string", "description": "Python source of the cell."}
                },
                "required": ["code"],
                "additionalProperties": False,
            },
        },
    }
