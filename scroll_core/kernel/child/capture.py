"""Capped stdout/stderr for one cell: keep the head, count what was hidden.

Both streams draw on one budget (the print cap), so a flood on either side cannot grow the
kernel's memory or the model's observation; the characters past the cap are only counted.
"""

from __future__ import annotations

import io


class Budget:
    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.used = 0
        self.hidden = 0

    def take(self, text: str) -> str:
        room = self.cap - self.used
        if room >= len(text):
            self.used += len(text)
            return text
        kept = text[: max(room, 0)]
        self.used += len(kept)
        self.hidden += len(text) - len(kept)
        return kept


class CappedStream(io.TextIOBase):
    """A text stream that keeps at most what the shared budget allows."""

    def __init__(self, budget: Budget, name: str) -> None:
        super().__init__()
        self._budget = budget
        self._parts: list[str] = []
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        kept = self._budget.take(text)
        if kept:
            self._parts.append(kept)
        return len(text)

    def getvalue(self) -> str:
        return "".join(self._parts)
