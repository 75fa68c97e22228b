"""What a lint rule raises: the rule, the session, the cell (or reply) that shows the failure,
every seq that shows it and a plain explanation."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Flag"]


@dataclass(frozen=True)
class Flag:
    rule: str
    session_id: str
    cell_seq: int  # the call (or the reply) that shows the failure
    seqs: tuple[int, ...]  # every seq that shows it
    explanation: str
