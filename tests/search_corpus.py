"""Small hand-written corpora for the search tests: turns appended one second apart, and the
seqs a search ranks first under a given ``SearchTuning``."""

from __future__ import annotations

from typing import Any

from scroll_core import SearchTuning


def add(log: Any, *texts: str, session: str = "s", name: str | None = None,
        day: str = "2026-01-01") -> list[int]:  # fmt: skip
    """Append ``texts`` as chat turns of ``session`` (by ``name``), one second apart on ``day``."""
    return [
        log.append(
            session_id=session,
            kind="chat_turn",
            role="user",
            name=name,
            content=text,
            created_at=f"{day}T00:00:{i:02d}Z",
        )
        for i, text in enumerate(texts)
    ]


def ranked(log: Any, query: str, tuning: SearchTuning, k: int = 10) -> list[int]:
    """The seqs of the top ``k`` hits for ``query`` with the log's search set to ``tuning``."""
    log.search_tuning = tuning
    return [h.seq for h in log.search(query, k=k)]
