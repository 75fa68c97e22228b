"""The append path's per-row loops, written for mypyc (``native.COMPILED``).

An append of the common event costs, besides its INSERT, a few microseconds of Python per
row: summing its words' token counts, and checking that its values survive the JSON
insert. Each is a loop over rows and their values that CPython runs one bytecode at a
time; compiled (``docs/native.md``), the type checks are pointer comparisons and the table
lookups direct dict calls. This source is the reference and the fallback: its callers get
the same answers either way (``tests/test_native.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["exact_json_values", "plain_tuples", "word_counts"]

_INT_MIN = -(2**63)
_INT_MAX = 2**63 - 1


def word_counts(texts: list[str], first: dict[str, int], spaced: dict[str, int]) -> list[int]:
    """Per text, its words' counts summed (``token_pieces.PieceCounter``'s tables): the
    first word's from ``first``, each later one's from ``spaced``, the words being the
    text cut at single spaces; -1 for a text with a word in neither table (its caller
    counts that text another way)."""
    counts: list[int] = []
    for text in texts:
        words = text.split(" ")
        total = first.get(words[0], -1)
        if total >= 0:
            for i in range(1, len(words)):
                n = spaced.get(words[i], -1)
                if n < 0:
                    total = -1
                    break
                total += n
        counts.append(total)
    return counts


def exact_json_values(values: Sequence[tuple[Any, ...]], width: int) -> bool:
    """Whether every row of ``values`` has ``width`` values, each a ``str``, an ``int``
    (not a ``bool``) within SQLite's 64 bits, or None, and no column holds both texts and
    integers: the values a JSON array gives back exactly through ``json_each`` and ``->>``
    (``json_insert.json_rows``)."""
    # Per column: 1 once it holds a text, 2 once it holds an integer.
    kinds = [0] * width
    for row in values:
        if len(row) != width:
            return False
        for i in range(width):
            value = row[i]
            if value is None:
                continue
            kind = type(value)
            if kind is str:
                kinds[i] |= 1
            elif kind is int:
                number: int = value
                if number < _INT_MIN or number > _INT_MAX:
                    return False
                kinds[i] |= 2
            else:
                return False
    return 3 not in kinds


# A chunk's computed columns (tool_input, metadata, created_at), from its events.
Computed = Callable[[list[Any]], tuple[list[Any], list[Any], list[Any]]]


def plain_tuples(
    events: list[Any], payload_threshold: int, text_holds_nul: bool, computed: Computed
) -> list[tuple[Any, ...]] | None:
    """The value tuples of a chunk of plain events (``plain_rows.plain_values``), checked
    event by event in one pass, or None as soon as one is not plain: every event a
    ``dict``; session_id and kind non-blank strings, agent_id a string (``"main"`` when
    missing or empty), role, name, tool_call_id, headline and dedup_key strings or None,
    all of them ASCII without NUL; content an ASCII string of at most
    ``payload_threshold`` characters (and without NUL unless ``text_holds_nul``); no
    payload. ``computed`` gives the other columns once the checks pass (it may raise, as
    ``plain_values`` expects)."""
    session_ids: list[str] = []
    agent_ids: list[str] = []
    kinds: list[str] = []
    roles: list[Any] = []
    names: list[Any] = []
    contents: list[str] = []
    tool_call_ids: list[Any] = []
    headlines: list[Any] = []
    dedup_keys: list[Any] = []
    searchable: list[int] = []
    short: list[str] = []  # the ids and names, joined once for the ASCII and NUL scans
    for event in events:
        if type(event) is not dict:
            return None
        fields: dict[str, Any] = event
        session_id = fields.get("session_id")
        kind = fields.get("kind")
        agent_id = fields.get("agent_id")
        if not agent_id:
            agent_id = "main"
        if type(session_id) is not str or type(kind) is not str or type(agent_id) is not str:
            return None
        session: str = session_id
        of_kind: str = kind
        agent: str = agent_id
        if not session or not of_kind or session.isspace() or of_kind.isspace():
            return None
        short.append(session)
        short.append(of_kind)
        short.append(agent)
        role = fields.get("role")
        name = fields.get("name")
        tool_call_id = fields.get("tool_call_id")
        headline = fields.get("headline")
        dedup_key = fields.get("dedup_key")
        for value in (role, name, tool_call_id, headline, dedup_key):
            if value is not None:
                if type(value) is not str:
                    return None
                text: str = value
                short.append(text)
        content = fields.get("content")
        if type(content) is not str:
            return None
        body: str = content
        if not body.isascii() or len(body) > payload_threshold:
            return None
        if not text_holds_nul and "\x00" in body:
            return None
        if fields.get("payload") is not None:
            return None
        session_ids.append(session)
        agent_ids.append(agent)
        kinds.append(of_kind)
        roles.append(role)
        names.append(name)
        contents.append(body)
        tool_call_ids.append(tool_call_id)
        headlines.append(headline)
        dedup_keys.append(dedup_key)
        searchable.append(1 if fields.get("searchable", True) else 0)
    joined = "".join(short)
    if not joined.isascii() or "\x00" in joined:
        return None
    tool_inputs, metadata, created_at = computed(events)
    rows: list[tuple[Any, ...]] = []
    for i in range(len(events)):
        rows.append(
            (
                session_ids[i],
                agent_ids[i],
                kinds[i],
                roles[i],
                names[i],
                contents[i],
                tool_call_ids[i],
                tool_inputs[i],
                None,
                None,
                None,
                headlines[i],
                metadata[i],
                created_at[i],
                dedup_keys[i],
                searchable[i],
            )
        )
    return rows
