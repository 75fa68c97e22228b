"""The fixed dev/test split of LoCoMo's ten conversations, shared by every LoCoMo bench.

The rule was fixed before any result was looked at: conversations at even positions in the
file's order are the dev split, those at odd positions the test split. Every weight,
threshold and rule a bench tunes is chosen on ``DEV``; headline figures are reported on
``TEST``, with dev beside them.
"""

from __future__ import annotations

__all__ = ["DEV", "TEST", "split_of"]

# locomo10.json in file order: conv-26, conv-30, conv-41, conv-42, conv-43, conv-44,
# conv-47, conv-48, conv-49, conv-50.
DEV: tuple[str, ...] = ("conv-26", "conv-41", "conv-43", "conv-47", "conv-49")
TEST: tuple[str, ...] = ("conv-30", "conv-42", "conv-44", "conv-48", "conv-50")


def split_of(conversation_id: str) -> str:
    """``"dev"`` or ``"test"`` for a LoCoMo conversation id; ValueError for any other id."""
    if conversation_id in DEV:
        return "dev"
    if conversation_id in TEST:
        return "test"
    raise ValueError(f"{conversation_id!r} is not a LoCoMo conversation of the fixed split")
