"""What a streaming client is shown of the upstream's text, as it arrives.

The client must never see a headline, and the reply the gateway logs must be exactly what the
client saw (its next request resends it, and alignment compares the two). ``parse_headline``
removes the last line that opens a headline and strips trailing whitespace, so the relay lets
text through at once except from the first line holding ``⟦`` on, and except trailing
whitespace; when an upstream reply is complete, ``settle(visible)`` sends what the headline
parse kept of the part held back; ``settle_early()`` does the same as soon as a reply's text is
known complete (a client's tool call is about to stream after it). Text of successive
upstream replies (recall steps, then the answer) is joined with a blank line. ``shown`` is
everything sent.
"""

from __future__ import annotations

from collections.abc import Callable

from ..headlines import OPEN, parse_headline

__all__ = ["TextRelay"]

STEP_SEPARATOR = "\n\n"


class TextRelay:
    """See the module docstring. ``emit`` is called with each piece the client gets."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self._emit = emit
        self.shown = ""
        self._buffer = ""
        self._sent = 0  # of this reply's buffer
        self._new_reply = False
        self._early: str | None = None  # this reply's text as settled before its end

    def feed(self, piece: str) -> None:
        """A piece of the current upstream reply's text, as it arrived."""
        self._buffer += piece
        if self._early is not None:
            return  # after ``settle_early``: held for ``settle``
        cut = len(self._buffer)
        opened = self._buffer.find(OPEN)
        if opened >= 0:
            cut = self._buffer.rfind("\n", 0, opened) + 1
        safe = len(self._buffer[:cut].rstrip())
        if safe > self._sent:
            self._send(self._buffer[self._sent : safe])
            self._sent = safe

    def settle(self, visible: str) -> None:
        """The current upstream reply is complete; ``visible`` is its text as the client
        should have it (the headline parsed off). Sends the rest of it."""
        forwarded = self._buffer[: self._sent] if self._early is None else self._early
        # Always true for parse_headline's output; what was sent stands if it is not.
        if visible.startswith(forwarded):
            self._send(visible[len(forwarded) :])
        self._buffer = ""
        self._sent = 0
        self._early = None
        self._new_reply = True

    def settle_early(self) -> None:
        """The current reply's text is complete before the reply is (a block that must
        follow the text, a client's tool call, is about to go out): send what was held back
        of it, the headline parsed off as ``settle`` would. Text that still comes in this
        reply waits for ``settle``."""
        if self._early is not None:
            return
        visible = parse_headline(self._buffer).text
        forwarded = self._buffer[: self._sent]
        if visible.startswith(forwarded):
            self._send(visible[len(forwarded) :])
        self._early = visible if visible.startswith(forwarded) else forwarded

    def _send(self, text: str) -> None:
        if not text:
            return
        if self._new_reply and self.shown:
            text = STEP_SEPARATOR + text
        self._new_reply = False
        self.shown += text
        self._emit(text)
