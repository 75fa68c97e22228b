"""What each arm of the cost bench can still recall at the end of its session
(``bench/gateway_cost.py``): cost and recall measured on the same session, side by side.

A probe is a fact only one tool result held: a line of that result with an identifier found
in no other message of the session (not in a tool call, not in another result, not in the
assistant's text). The question a user would ask about it names the identifier ("what did
the line with ``_prefold_candidates`` say?"), and the answer is the line.

* ``held``: the line is in the arm's last request (what its model sees at the end).
* ``recalled`` (Scroll only): not held, but ``ms.search`` over the agent's Event Log, asked
  for the identifier as a ``recall_history_python`` cell would, returns in its top five an
  event that holds the line.

Probes are spread evenly over the session's tool results, so some come from its recent tail
(held by every arm) and most from what an eviction or a compaction took out of the window.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _agent_session import Session

__all__ = ["Probe", "held", "probes", "recalled"]

_IDENT = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]{9,}\b")
SEARCH_K = 5


@dataclass(frozen=True)
class Probe:
    step: int  # the step whose new messages brought the tool result
    identifier: str
    line: str


def _texts(message: dict[str, Any]) -> list[str]:
    content = message["content"]
    if isinstance(content, str):
        return [content]
    out = []
    for block in content:
        if block.get("type") == "text":
            out.append(block["text"])
        elif block.get("type") == "tool_use":
            out.append(repr(block.get("input")))
        elif block.get("type") == "tool_result":
            inner = block.get("content", "")
            out.append(inner if isinstance(inner, str) else repr(inner))
    return out


def probes(s: Session, count: int) -> list[Probe]:
    """Up to ``count`` probes, from tool results spread evenly over the session."""
    if count < 1:
        raise ValueError(f"count must be at least 1, not {count}")
    messages: list[tuple[int, dict[str, Any]]] = []
    for n, step in enumerate(s.steps):
        messages += [(n, m) for m in step.new] + [(n, step.reply)]
    seen_in = Counter[str]()
    for _, message in messages:
        seen_in.update({w for text in _texts(message) for w in _IDENT.findall(text)})
    found: list[Probe] = []
    for n, message in messages:
        if message["role"] != "user" or isinstance(message["content"], str):
            continue
        for block in message["content"]:
            if block.get("type") != "tool_result" or not isinstance(block.get("content"), str):
                continue
            for line in block["content"].splitlines():
                unique = [w for w in _IDENT.findall(line) if seen_in[w] == 1]
                if unique and len(line.strip()) >= 20:
                    found.append(Probe(n, unique[0], line.strip()))
                    break
    if len(found) <= count:
        return found
    stride = len(found) / count
    return [found[int(i * stride)] for i in range(count)]


def held(body: dict[str, Any], probe: Probe) -> bool:
    """Whether the request ``body`` (system, tools and messages) holds ``probe``'s line."""
    system = body.get("system") or ""
    texts = [system] if isinstance(system, str) else [b.get("text", "") for b in system]
    for message in body.get("messages", []):
        texts += _texts(message)
    return any(probe.line in text for text in texts)


def recalled(log_path: Path, agent_id: str, asked: list[Probe]) -> list[bool]:
    """For each probe, whether ``ms.search`` for its identifier over ``agent_id``'s Event Log
    returns, in its top ``SEARCH_K``, an event holding its line (the log opened once)."""
    from scroll_core.kernel.ms import MsCapability
    from scroll_core.store import EventLog

    log = EventLog(log_path)
    ms = MsCapability(log, agent_id=agent_id)
    try:
        found = []
        for probe in asked:
            _, seqs = ms.search(probe.identifier, k=SEARCH_K)
            found.append(any(probe.line in log.get(seq).content for seq in seqs))
        return found
    finally:
        ms.close()
        log.close()
