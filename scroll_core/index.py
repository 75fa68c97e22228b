"""The tiered eviction index: a map, kept in the view, of the spans that left it.

Every eviction adds one tier-0 block (its seq range and the evicted turns' headlines). When a
tier reaches ``tier_cap`` blocks it keeps its newest block and folds the other ``tier_cap - 1``
into one block a tier up, cascading like a carry. Recent history therefore keeps fine anchors
while distant history collapses to coarse ranges, and the block count grows with the log of the
number of evictions (4, 8, 16, 16 blocks after 100, 1,000, 10,000, 100,000 evictions).

The invariant asserted everywhere: the blocks tile ``[first evicted seq, last evicted seq]``
with no gap, so everything evicted stays reachable through the index.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import EvictionIndexError
from .headlines import NO_MILESTONE, shorten, unwrap
from .tokens import TokenCounter

__all__ = [
    "INDEX_HEADER",
    "SEAM_BANNER",
    "EvictionIndex",
    "IndexBlock",
    "IndexRender",
    "RenderLevel",
]

CHECKPOINT_VERSION = 1

# Constant text: it never changes between calls, so it never breaks a prefix (KV) cache. The
# banner exists because weaker models otherwise latch onto a headline of the map and answer it
# instead of the live request (the reference documents this for GLM and DeepSeek backbones).
INDEX_HEADER = (
    "[scroll index] Evicted history, oldest first. Every event is still in the Event Log, "
    "verbatim: ms.expand(lo, hi) reads a span, ms.search(query) finds one."
)
SEAM_BANNER = (
    "=== END OF ARCHIVED INDEX ===\n"
    "=== LIVE TURN BEGINS: answer the latest request below; the index above is only a map ==="
)

RenderLevel = Literal["empty", "full", "short", "endpoints", "pointer"]

# Tried in order until the render fits the budget: headline length cut, headlines per block.
_SHORTENING = ((160, None), (96, None), (64, 3), (40, 2), (24, 1))


@dataclass(frozen=True)
class IndexBlock:
    """One block: a seq range and up to ``max_headlines`` headlines of what it covers."""

    tier: int
    lo_seq: int
    hi_seq: int
    headlines: tuple[str, ...]
    evictions: int = 1
    events: int = 0
    tokens: int = 0

    @property
    def key(self) -> str:
        """A stable name for telemetry (retrieval counts per block)."""
        return f"t{self.tier}:{self.lo_seq}-{self.hi_seq}"

    def contains(self, seq: int) -> bool:
        return self.lo_seq <= seq <= self.hi_seq

    def to_dict(self) -> dict[str, Any]:
        return {
            "tier": self.tier,
            "lo_seq": self.lo_seq,
            "hi_seq": self.hi_seq,
            "headlines": list(self.headlines),
            "evictions": self.evictions,
            "events": self.events,
            "tokens": self.tokens,
        }


@dataclass(frozen=True)
class IndexRender:
    text: str
    tokens: int
    level: RenderLevel
    blocks: int


@dataclass
class EvictionIndex:
    """Tiers of blocks; ``tiers[0]`` holds the newest, finest blocks.

    ``max_headlines`` bounds the headlines a block keeps (a folded block keeps the newest
    headline of each block it absorbed), so the index stays small however long the session.
    """

    tier_cap: int = 10
    max_headlines: int | None = None
    tiers: list[list[IndexBlock]] = field(default_factory=lambda: [[]])
    _render_cache: dict[tuple[int, str, bool], IndexRender] = field(
        default_factory=dict, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if isinstance(self.tier_cap, bool) or not isinstance(self.tier_cap, int):
            raise EvictionIndexError(f"tier_cap must be an integer, got {self.tier_cap!r}")
        if self.tier_cap < 2:
            raise EvictionIndexError(f"tier_cap must be at least 2, got {self.tier_cap}")
        if self.max_headlines is None:
            self.max_headlines = self.tier_cap - 1
        if self.max_headlines < 1:
            raise EvictionIndexError(f"max_headlines must be positive, got {self.max_headlines}")
        if not self.tiers:
            self.tiers = [[]]

    # ------------------------------------------------------------------ reading
    @property
    def blocks(self) -> list[IndexBlock]:
        """All blocks, oldest (highest tier) first."""
        return [b for tier in reversed(self.tiers) for b in tier]

    def __len__(self) -> int:
        return sum(len(t) for t in self.tiers)

    @property
    def first_seq(self) -> int | None:
        top = next((t for t in reversed(self.tiers) if t), None)
        return None if top is None else top[0].lo_seq

    @property
    def last_seq(self) -> int | None:
        bottom = next((t for t in self.tiers if t), None)
        return None if bottom is None else bottom[-1].hi_seq

    def tier_profile(self) -> list[int]:
        """Blocks per tier, tier 0 first (``[1, 4, 6, 4, 1]`` after 10,000 evictions)."""
        return [len(t) for t in self.tiers]

    def coverage(self) -> list[tuple[int, int]]:
        """The blocks' seq ranges in seq order."""
        return [(b.lo_seq, b.hi_seq) for b in self.blocks]

    def check(self) -> None:
        """Raise ``EvictionIndexError`` unless the blocks tile the evicted range gap-free,
        older tiers hold older spans, and every settled tier is below ``tier_cap``."""
        previous: IndexBlock | None = None
        for block in self.blocks:
            if block.lo_seq > block.hi_seq:
                raise EvictionIndexError(f"block {block.key} has lo_seq above hi_seq")
            if previous is not None:
                if block.tier > previous.tier:
                    raise EvictionIndexError(
                        f"block {block.key} sits above {previous.key} but is newer"
                    )
                if block.lo_seq != previous.hi_seq + 1:
                    what = "gap" if block.lo_seq > previous.hi_seq + 1 else "overlap"
                    raise EvictionIndexError(
                        f"{what} in the eviction index between {previous.key} and {block.key}"
                    )
            previous = block
        for number, tier in enumerate(self.tiers):
            if len(tier) >= self.tier_cap:
                raise EvictionIndexError(
                    f"tier {number} holds {len(tier)} blocks; it should have carried at "
                    f"{self.tier_cap}"
                )
            if any(b.tier != number for b in tier):
                raise EvictionIndexError(f"tier {number} holds a block of another tier")

    def block_for(self, seq: int) -> IndexBlock | None:
        """The block covering ``seq`` (which evicted block an expand hit), or None."""
        for tier in self.tiers:
            if tier and tier[0].lo_seq <= seq <= tier[-1].hi_seq:
                lo, hi = 0, len(tier) - 1
                while lo <= hi:
                    mid = (lo + hi) // 2
                    block = tier[mid]
                    if seq < block.lo_seq:
                        hi = mid - 1
                    elif seq > block.hi_seq:
                        lo = mid + 1
                    else:
                        return block
        return None

    # ------------------------------------------------------------------ writing
    def add_eviction(
        self,
        lo_seq: int,
        hi_seq: int,
        headlines: Iterable[str | None] = (),
        *,
        events: int = 0,
        tokens: int = 0,
    ) -> IndexBlock:
        """Record one evicted span as a tier-0 block and carry; return the new block.

        Spans must come in seq order. When ``lo_seq`` is past the previous span's end, the
        block starts right after it: the seqs between belong to other sessions (one log holds
        them all) and the index must still tile with no gap. A ``None`` or blank headline
        (a turn without a milestone) is shown as ``(no milestone)``.
        """
        lo_seq, hi_seq = int(lo_seq), int(hi_seq)
        if lo_seq > hi_seq:
            raise EvictionIndexError(f"evicted span {lo_seq}-{hi_seq} is empty (lo above hi)")
        last = self.last_seq
        if last is not None:
            if lo_seq <= last:
                raise EvictionIndexError(
                    f"evicted span {lo_seq}-{hi_seq} overlaps or precedes the index, which "
                    f"already covers up to seq {last}"
                )
            lo_seq = last + 1
        block = IndexBlock(
            tier=0,
            lo_seq=lo_seq,
            hi_seq=hi_seq,
            headlines=self._bounded(
                [h.strip() if h and h.strip() else NO_MILESTONE for h in headlines]
                or [NO_MILESTONE]
            ),
            evictions=1,
            events=int(events),
            tokens=int(tokens),
        )
        self.tiers[0].append(block)
        self._carry(0)
        self._render_cache.clear()
        return block

    def _carry(self, t: int) -> None:
        while len(self.tiers[t]) >= self.tier_cap:
            older, kept = self.tiers[t][:-1], self.tiers[t][-1:]
            self.tiers[t] = kept
            if t + 1 == len(self.tiers):
                self.tiers.append([])
            self.tiers[t + 1].append(
                IndexBlock(
                    tier=t + 1,
                    lo_seq=older[0].lo_seq,
                    hi_seq=older[-1].hi_seq,
                    headlines=self._bounded([b.headlines[-1] for b in older]),
                    evictions=sum(b.evictions for b in older),
                    events=sum(b.events for b in older),
                    tokens=sum(b.tokens for b in older),
                )
            )
            t += 1

    def _bounded(self, headlines: Sequence[str]) -> tuple[str, ...]:
        """Drop repeats in a row, then keep at most ``max_headlines`` spread evenly and always
        including the newest."""
        deduped: list[str] = []
        for h in headlines:
            if not deduped or deduped[-1] != h:
                deduped.append(h)
        cap = self.max_headlines or 1
        if len(deduped) <= cap:
            return tuple(deduped)
        if cap == 1:
            return (deduped[-1],)
        step = (len(deduped) - 1) / (cap - 1)
        picks = sorted({round(i * step) for i in range(cap)})
        return tuple(deduped[i] for i in picks)

    # ------------------------------------------------------------------ render
    def render(
        self, budget_tokens: int, counter: TokenCounter, *, banner: bool = True
    ) -> IndexRender:
        """The index as view text within ``budget_tokens`` (the seam banner included).

        Highest tier first, each block its seq range and headlines. Under pressure headlines
        shorten and thin out, then blocks collapse to their endpoints, and at worst the whole
        index becomes one pointer to the evicted range. An empty index renders as nothing.
        """
        cache_key = (int(budget_tokens), getattr(counter, "name", type(counter).__name__), banner)
        cached = self._render_cache.get(cache_key)
        if cached is not None:
            return cached
        result = self._render(int(budget_tokens), counter, banner)
        self._render_cache[cache_key] = result
        return result

    def _render(self, budget: int, counter: TokenCounter, banner: bool) -> IndexRender:
        blocks = self.blocks
        if not blocks:
            return IndexRender("", 0, "empty", 0)
        tail = [SEAM_BANNER] if banner else []

        def attempt(body: list[str], level: RenderLevel) -> IndexRender:
            text = "\n".join([INDEX_HEADER, *body, *tail])
            return IndexRender(text, counter.count(text), level, len(blocks))

        full = attempt(self._lines(blocks, None, None), "full")
        if full.tokens <= budget:
            return full
        for max_chars, per_block in _SHORTENING:
            short = attempt(self._lines(blocks, max_chars, per_block), "short")
            if short.tokens <= budget:
                return short
        endpoints = attempt([_range_line(b) for b in blocks], "endpoints")
        if endpoints.tokens <= budget:
            return endpoints
        first, last = blocks[0].lo_seq, blocks[-1].hi_seq
        evictions = sum(b.evictions for b in blocks)
        pointer = (
            f"seq {first}-{last}: {evictions} evicted spans; find them with ms.search(query) "
            f"and read them with ms.expand(lo, hi)"
        )
        return attempt([pointer], "pointer")

    @staticmethod
    def _lines(blocks: list[IndexBlock], max_chars: int | None, per_block: int | None) -> list[str]:
        lines: list[str] = []
        for block in blocks:
            lines.extend(_block_lines(block, max_chars, per_block))
        return lines

    # ------------------------------------------------------------------ checkpoint
    def to_checkpoint(self) -> dict[str, Any]:
        return {
            "version": CHECKPOINT_VERSION,
            "tier_cap": self.tier_cap,
            "max_headlines": self.max_headlines,
            "tiers": [[b.to_dict() for b in tier] for tier in self.tiers],
        }

    @classmethod
    def from_checkpoint(cls, data: Mapping[str, Any]) -> EvictionIndex:
        """Restore an index; a checkpoint that breaks the invariant is refused."""
        try:
            if data.get("version") != CHECKPOINT_VERSION:
                raise EvictionIndexError(
                    f"unsupported index checkpoint version {data.get('version')!r}"
                )
            index = cls(tier_cap=int(data["tier_cap"]), max_headlines=data.get("max_headlines"))
            index.tiers = [
                [
                    IndexBlock(
                        tier=int(b["tier"]),
                        lo_seq=int(b["lo_seq"]),
                        hi_seq=int(b["hi_seq"]),
                        headlines=tuple(str(h) for h in b["headlines"]),
                        evictions=int(b.get("evictions", 1)),
                        events=int(b.get("events", 0)),
                        tokens=int(b.get("tokens", 0)),
                    )
                    for b in tier
                ]
                for tier in data["tiers"]
            ] or [[]]
        except EvictionIndexError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise EvictionIndexError(f"index checkpoint is malformed: {exc!r}") from None
        index.check()
        return index

    def retier(self, tier_cap: int) -> EvictionIndex:
        """A copy under a new ``tier_cap`` (a profile change): replays the blocks' spans so
        the carry holds for the new cap. Headlines of already folded blocks are kept."""
        new = EvictionIndex(tier_cap=tier_cap)
        for block in self.blocks:
            new.tiers[0].append(
                IndexBlock(
                    tier=0,
                    lo_seq=block.lo_seq,
                    hi_seq=block.hi_seq,
                    headlines=new._bounded(block.headlines),
                    evictions=block.evictions,
                    events=block.events,
                    tokens=block.tokens,
                )
            )
            new._carry(0)
        return new


# A block never changes once made and an eviction touches only the lowest tiers, so the
# lines of most blocks are the same from one render to the next. Without this every render
# re-wrapped every headline at every shortening level it tried, and a longer history has
# more blocks (the tiers grow with the log of the evictions), so each evicting step paid a
# little more for the history behind it.
@functools.lru_cache(maxsize=8192)
def _block_lines(
    block: IndexBlock, max_chars: int | None, per_block: int | None
) -> tuple[str, ...]:
    lines = [_range_line(block)]
    shown = block.headlines if per_block is None else block.headlines[-per_block:]
    for headline in shown:
        text = unwrap(headline)
        lines.append(f"  - {text if max_chars is None else shorten(text, max_chars)}")
    return tuple(lines)


def _range_line(block: IndexBlock) -> str:
    spans = f", {block.evictions} spans" if block.evictions > 1 else ""
    return f"[tier {block.tier}] seq {block.lo_seq}-{block.hi_seq}{spans}"
