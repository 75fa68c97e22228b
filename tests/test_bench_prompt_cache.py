"""The cost bench's prompt caches price requests by each provider's rule: what is read, what is
written, and what a rewrite in the middle costs with and without a breakpoint before it."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from _prompt_cache import AnthropicCache, OpenAICache, blocks  # noqa: E402

from scroll_core.tokens import CharRatioCounter  # noqa: E402

COUNTER = CharRatioCounter()
MARK = {"type": "ephemeral"}


def body(texts: list[str], marks: frozenset[int] | set[int] = frozenset()) -> dict:
    """A request of one system block (marked) and one user turn per text."""
    messages = []
    for i, text in enumerate(texts):
        block = {"type": "text", "text": text}
        if i in marks or i == len(texts) - 1:
            block["cache_control"] = MARK
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": [block]})
    system = [{"type": "text", "text": "s" * 8_000, "cache_control": MARK}]
    return {"system": system, "messages": messages}


def turns(n: int) -> list[str]:
    return [f"turn {i} " + "x" * 2_000 for i in range(n)]


def test_an_appended_request_reads_what_the_last_one_wrote_and_writes_only_the_new_part():
    cache = AnthropicCache()
    first = cache.usage(blocks(body(turns(4)), COUNTER), 0)
    assert first.cache_read_input_tokens == 0
    assert first.cache_creation_input_tokens == first.input_tokens
    second = cache.usage(blocks(body(turns(6)), COUNTER), 0)
    assert second.cache_read_input_tokens == first.input_tokens
    assert second.cache_creation_input_tokens == second.input_tokens - first.input_tokens


def test_a_rewrite_in_the_middle_is_read_up_to_it_only_with_a_breakpoint_before_it():
    history = turns(40)
    changed = [*history[:10], "folded", *history[11:]]
    for marks, read_front in ((set(), False), ({9}, True)):
        cache = AnthropicCache()
        for n in range(2, 41):  # a growing session: every request's end is written
            cache.usage(blocks(body(history[:n]), COUNTER), 0)
        after = cache.usage(blocks(body(changed, marks), COUNTER), 0)
        front = blocks(body(history[:10]), COUNTER)[-1].end
        system = blocks(body([]), COUNTER)[-1].end
        # More than 20 blocks from the last breakpoint back to the change: without one before
        # it, only the system block is found again.
        assert after.cache_read_input_tokens == (front if read_front else system)


def test_openai_reads_the_longest_shared_prefix_in_steps_of_128_from_1024():
    cache = OpenAICache()
    cache.usage(blocks(body(turns(3)), COUNTER), 0)
    again = cache.usage(blocks(body(turns(5)), COUNTER), 0)
    shared = blocks(body(turns(3)), COUNTER)[-1].end
    assert again.cache_read_input_tokens == 1024 + (shared - 1024) // 128 * 128
    assert again.cache_creation_input_tokens == 0
    small = OpenAICache()
    tiny = {"messages": [{"role": "user", "content": "hi"}]}
    small.usage(blocks(tiny, COUNTER), 0)
    assert small.usage(blocks(tiny, COUNTER), 0).cache_read_input_tokens == 0  # under 1,024
