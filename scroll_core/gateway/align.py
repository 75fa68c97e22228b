"""History alignment: what part of a client's resent history the log already holds.

Clients send the whole conversation on every call. The gateway keeps, per session, the
chain of fingerprints of the messages the client's history is made of (its own replies
included, as the client received them). A new request is compared with that chain:

* ``extend``: the chain is a prefix of the request; only the suffix is new;
* ``retry``: the request is a proper prefix of the chain and the next link is a reply the
  gateway gave: the client asks again for an answer it did not get; nothing is appended and
  the logged reply is sent again;
* ``rewrite``: the request leaves the chain before its end (the client edited or compacted
  its history): the links from ``common`` on are no longer the conversation; they stay in
  the log, and the new suffix continues the session.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["Alignment", "align"]

AlignKind = Literal["extend", "retry", "rewrite"]


@dataclass(frozen=True)
class Alignment:
    kind: AlignKind
    common: int  # how many leading messages the chain already holds


def align(chain: Sequence[str], incoming: Sequence[str], replies: Sequence[bool]) -> Alignment:
    """Compare the logged ``chain`` of fingerprints with the ``incoming`` ones;
    ``replies[i]`` says whether chain link ``i`` is a reply the gateway gave."""
    common = 0
    for logged, sent in zip(chain, incoming, strict=False):
        if logged != sent:
            break
        common += 1
    if common == len(chain):
        return Alignment("extend", common)
    if common == len(incoming) and replies[common]:
        return Alignment("retry", common)
    return Alignment("rewrite", common)
