"""The "eviction a net loss" rule's arithmetic for one evicted block, read from the Event Log.

Under a prefix cache (seed, section 4b) keeping a span costs its tokens W once; evicting it
costs its index line H once plus every re-read prefilled again. The alert engine adds up the
re-read tokens of each block as expand spans arrive and fires once ``H + re-read > W``.
"""

from __future__ import annotations

import re

from dashboard.eventlog import get_event_log
from scroll_core.store import KIND_MODEL_TURN, Event
from scroll_core.view import MESSAGE_OVERHEAD_TOKENS

__all__ = ["block_range", "block_size", "reread_tokens"]

_BLOCK = re.compile(r"^t\d+:(\d+)-(\d+)$")
# A block wider than this is read by its first events only (its size is then a lower bound).
MAX_BLOCK_EVENTS = 5000


def block_range(key: str) -> tuple[int, int] | None:
    """``t<tier>:<lo>-<hi>`` (an index block's key, as expand spans name it) as (lo, hi)."""
    match = _BLOCK.match(key)
    return (int(match[1]), int(match[2])) if match else None


def _events(session_id: str, lo: int, hi: int) -> list[Event]:
    log = get_event_log()
    limit = min(MAX_BLOCK_EVENTS, hi - lo + 1)
    return [e for e in log.session_events(session_id, after_seq=lo - 1, limit=limit) if e.seq <= hi]


def block_size(session_id: str, lo: int, hi: int) -> tuple[int, int]:
    """(W, H): the block's tokens as the view held them, and its headline line's tokens."""
    events = _events(session_id, lo, hi)
    tokens = sum(e.tokens + MESSAGE_OVERHEAD_TOKENS for e in events)
    headlines = [e.headline for e in events if e.kind == KIND_MODEL_TURN and e.headline]
    line = f"seq {lo}-{hi}: " + ("; ".join(headlines) or "(no milestone)")
    return tokens, get_event_log().tokens.count(line)


def reread_tokens(session_id: str, lo: int, hi: int, seq_lo: int, seq_hi: int) -> int:
    """Tokens of the block's events inside the retrieved range [seq_lo, seq_hi]."""
    a, b = max(lo, seq_lo), min(hi, seq_hi)
    return sum(e.tokens for e in _events(session_id, a, b)) if a <= b else 0
