"""The providers' prompt caches, simulated on recorded Anthropic Messages requests, for the cost
bench (``bench/gateway_cost.py``).

A request is read as the sequence the API caches, block by block: tools, system blocks, then
each message's content blocks. Each block's prefix gets a hash; the token counts are the
project's counter's on the block's text (tool inputs and schemas as JSON).

* ``AnthropicCache``: the rule Anthropic documents. A breakpoint (``cache_control``, at most 4)
  writes the prefix ending at it; a request reads the longest prefix written before that ends
  at one of its blocks, looked for from each breakpoint back over at most 20 blocks. Tokens
  from the read point to the last breakpoint are written (1.25x), read tokens cost 0.1x, the
  rest (after the last breakpoint) the input price. Prefixes under 1,024 tokens are not cached.
* ``OpenAICache``: automatic prefix caching. A request reads the longest prefix any earlier
  request shared, once it is at least 1,024 tokens, in steps of 128; nothing is billed for
  writing. Applied to the same requests (the same content, as OpenAI would get it).

Time to live is not modelled: an agent's calls come seconds apart, inside the 5 minutes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from scroll_core.models.base import Usage
from scroll_core.tokens import TokenCounter

__all__ = ["AnthropicCache", "Block", "OpenAICache", "blocks"]

MIN_CACHED = 1024
LOOKBACK = 20
OPENAI_STEP = 128
_COUNTS: dict[int, dict[str, int]] = {}


@dataclass(frozen=True)
class Block:
    key: str  # the hash of the prefix ending with this block
    end: int  # tokens from the start of the request to the end of this block
    breakpoint: bool
    text: str  # what it says (for telling what changed)


def _text(block: Any) -> str:
    if isinstance(block, str):
        return block
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "tool_use":
        return f"{block.get('name')} {json.dumps(block.get('input'), ensure_ascii=False)}"
    if kind == "tool_result":
        content = block.get("content", "")
        if isinstance(content, list):
            return "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        return str(content)
    if "input_schema" in block:  # a tool definition
        clean = {k: v for k, v in block.items() if k != "cache_control"}
        return json.dumps(clean, ensure_ascii=False, sort_keys=True)
    return json.dumps({k: v for k, v in block.items() if k != "cache_control"}, ensure_ascii=False)


def blocks(body: dict[str, Any], counter: TokenCounter) -> list[Block]:
    """``body`` (a Messages request) as the blocks the cache sees, in order."""
    raw: list[tuple[str, Any]] = [("tool", t) for t in body.get("tools") or ()]
    system = body.get("system")
    if isinstance(system, str):
        raw.append(("system", {"type": "text", "text": system}))
    else:
        raw += [("system", b) for b in system or ()]
    for message in body["messages"]:
        content = message["content"]
        items = [{"type": "text", "text": content}] if isinstance(content, str) else content
        raw += [(message["role"], b) for b in items]
    texts = [_text(b) for _, b in raw]
    # The same blocks come back in every request of a session: each text is counted once.
    memo = _COUNTS.setdefault(id(counter), {})
    fresh = [t for t in dict.fromkeys(texts) if t not in memo]
    memo.update(zip(fresh, counter.count_many(fresh), strict=True))
    counts = [memo[t] for t in texts]
    out: list[Block] = []
    digest = hashlib.sha1()
    end = 0
    for (where, block), text, tokens in zip(raw, texts, counts, strict=True):
        digest.update(
            f"\0{where}\0{block.get('type') if isinstance(block, dict) else ''}\0{text}".encode()
        )
        end += tokens + 3  # a few tokens of framing per block
        mark = isinstance(block, dict) and "cache_control" in block
        out.append(Block(digest.copy().hexdigest(), end, mark, text))
    return out


class AnthropicCache:
    """Anthropic's prompt cache over a sequence of requests (see the module docstring)."""

    def __init__(self) -> None:
        self.written: set[str] = set()

    def usage(self, request: list[Block], output_tokens: int) -> Usage:
        total = request[-1].end if request else 0
        marks = [i for i, b in enumerate(request) if b.breakpoint][:4]
        read = 0
        for i in marks:
            for j in range(i, max(-1, i - LOOKBACK - 1), -1):
                if request[j].key in self.written:
                    read = max(read, request[j].end)
                    break
        write = 0
        if marks:
            last = request[marks[-1]].end
            if last >= MIN_CACHED:
                write = max(0, last - read)
        for i in marks:
            if request[i].end >= MIN_CACHED:
                self.written.add(request[i].key)
        return Usage(
            input_tokens=total,
            output_tokens=output_tokens,
            cache_read_input_tokens=read,
            cache_creation_input_tokens=write,
        )


class OpenAICache:
    """OpenAI's automatic prefix cache over a sequence of requests."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def usage(self, request: list[Block], output_tokens: int) -> Usage:
        total = request[-1].end if request else 0
        shared = 0
        for block in reversed(request):
            if block.key in self.seen:
                shared = block.end
                break
        cached = 0
        if shared >= MIN_CACHED:
            cached = MIN_CACHED + (shared - MIN_CACHED) // OPENAI_STEP * OPENAI_STEP
        self.seen.update(b.key for b in request)
        return Usage(
            input_tokens=total,
            output_tokens=output_tokens,
            cache_read_input_tokens=cached,
            cache_creation_input_tokens=0,
        )
