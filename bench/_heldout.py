"""A second retrieval check that is not shaped like LoCoMo, never tuned on.

The log is what the real importers make of the agent transcripts in ``../shared/data``: the
Claude Code sessions (code, tool calls and their results, summaries; a file the importer
refuses as a whole, ``edge_cases.jsonl``, is left out) and the Letta agent (JSON-wrapped user
messages, the model's private reasoning, memory-editing tool calls, the system prompt again
after every memory edit). Every search runs over the whole log, so every other transcript is
a distractor, and so is every LoCoMo conversation, imported into the same log first: with
only the transcripts' 146 events, three shared words single out their event so surely that
every search variant found every "words" question at recall@10 1.0, telling none of them
apart (the "note" family alone has 23 questions). No question is asked about a LoCoMo turn
and its dev/test split plays no part here. Two families of questions, each made by a fixed
rule from the content alone; no question is written by hand and nothing here is read while
choosing a constant:

- ``note``: the Letta agent writes a private note after each user message ("Sarah shared her
  favorite ice cream flavor...") before it acts. The note is the question; the evidence is
  the user message it answers (the latest ``"type": "user_message"`` event before the note,
  when no other note stands between them). The search sees the log as it stood when the
  note was written (``before_seq``). These are paraphrases written by a model, not by us.
- ``words``: for every searchable event whose text no other event repeats, the question is
  its ``WORDS`` rarest words (fewest events holding them, ties by first appearance) among
  those at least one other event also holds, in the order they appear; the evidence is
  that event. A word no other event has would name the event outright; words shared with
  others leave it to the ranking to weigh them. When another event holds all the chosen
  words too (the tool results that differ only in a time stamp), no question is asked.

- ``reply`` (added by the third issue-15 session, so that one item no longer decides a
  switch: the ``words`` questions are all found by every variant, leaving ``note``'s 23 to
  tell them apart): a reply the agent sent is the question, the user message it answers the
  evidence (the latest user message before the reply, when no other reply stands between
  them), searched before the reply. Letta's replies are the ``message`` argument of its
  ``send_message`` calls; Claude Code's are the assistant's text turns (naming no tool).
  Again written by a model, again by a fixed rule. The old set (``note`` and ``words``) is
  still reported as ``all``; ``all_grown`` adds ``reply``.

Words are FTS5's unicode61 tokens of at least three characters, not stop words and not all
digits. Figures: recall@5 and @10 (one evidence turn: the same as hit@k) and MRR@10, per
family and over both.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scroll_core import EventLog, SearchTuning
from scroll_core.errors import IngestError
from scroll_core.ingest import ingest
from scroll_core.store.fts_query import STOP_WORDS, tokens

__all__ = ["WORDS", "HeldoutItem", "build_items", "heldout_log", "score"]

WORDS = 3
FAMILIES = ("note", "words", "reply")
# The families of the first held-out set, reported as "all" so it stays comparable.
FIRST_SET = ("note", "words")


@dataclass(frozen=True)
class HeldoutItem:
    family: str
    question: str
    evidence: int
    before_seq: int | None


def _words(text: str) -> list[str]:
    return [w for w in tokens(text) if len(w) > 2 and w not in STOP_WORDS and not w.isdigit()]


@contextmanager
def heldout_log(data: Path, workdir: Path) -> Iterator[EventLog]:
    """An Event Log of LoCoMo, then every transcript the importers accept under ``data``."""
    with EventLog(workdir / "heldout.sqlite3") as log:
        ingest(log, "locomo", data / "locomo" / "locomo10.json", progress=False)
        for path in sorted((data / "claude-code").glob("*.jsonl")):
            try:
                ingest(log, "claude-code", path, progress=False)
            except IngestError:
                continue  # refused whole (the deliberately malformed file)
        ingest(log, "letta", data / "letta" / "memgpt_agent_with_convo.af", progress=False)
        yield log


def _events(path: Path) -> list[tuple[int, str, str, str | None, str]]:
    db = sqlite3.connect(path)
    try:
        return db.execute(
            "SELECT seq, session_id, kind, name, coalesce(content, '') FROM events "
            "WHERE searchable = 1 AND session_id NOT LIKE 'locomo:%' ORDER BY seq"
        ).fetchall()
    finally:
        db.close()


def build_items(log_path: Path) -> list[HeldoutItem]:
    events = _events(log_path)
    items: list[HeldoutItem] = []
    # note: a Letta reasoning turn (a model turn naming no tool) and the user message before it.
    last_user: dict[str, int | None] = {}
    text_of = {seq: text for seq, _, _, _, text in events}
    for seq, session, kind, name, text in events:
        if not session.startswith("letta:"):
            continue
        if kind == "context_msg" and '"type": "user_message"' in text:
            last_user[session] = seq
        elif kind == "model_turn" and name is None:
            answered = last_user.get(session)
            if answered is not None and _words(text):
                items.append(HeldoutItem("note", text, answered, seq))
            last_user[session] = None  # a later note answers nothing new
    items.extend(_replies(events))
    # words: the rarest shared words of a turn no other turn repeats.
    df: Counter[str] = Counter()
    for _, _, _, _, text in events:
        df.update(set(_words(text)))
    repeats = Counter(text_of.values())
    word_sets = {seq: set(_words(text)) for seq, _, _, _, text in events}
    for seq, _, _, _, text in events:
        if repeats[text] > 1:
            continue
        words = list(dict.fromkeys(_words(text)))
        shared = [w for w in words if df[w] > 1]
        if len(shared) < WORDS:
            continue
        chosen = set(sorted(shared, key=lambda w: (df[w], words.index(w)))[:WORDS])
        if any(chosen <= held for other, held in word_sets.items() if other != seq):
            continue  # the words do not single the event out: no answer to ask for
        items.append(HeldoutItem("words", " ".join(w for w in words if w in chosen), seq, None))
    return items


def _reply_text(session: str, kind: str, name: str | None, text: str) -> str | None:
    """The text of a reply the agent sent, or None for any other event."""
    if kind != "model_turn":
        return None
    if session.startswith("letta:"):
        if name != "send_message":
            return None
        try:
            arguments = json.loads(text.split(" ", 1)[1])
        except (IndexError, ValueError):
            return None
        message = arguments.get("message") if isinstance(arguments, dict) else None
        return message if isinstance(message, str) else None
    return text if session.startswith("claude-code:") and name is None else None


def _is_user_message(session: str, kind: str, name: str | None, text: str) -> bool:
    if kind != "context_msg":
        return False
    if session.startswith("letta:"):
        return '"type": "user_message"' in text
    # Claude Code: a user's prompt (its summary lines are context too, named "summary").
    return session.startswith("claude-code:") and name is None


def _replies(events: list[tuple[int, str, str, str | None, str]]) -> list[HeldoutItem]:
    items = []
    last_user: dict[str, int | None] = {}
    for seq, session, kind, name, text in events:
        if _is_user_message(session, kind, name, text):
            last_user[session] = seq
            continue
        reply = _reply_text(session, kind, name, text)
        if reply is None:
            continue
        answered = last_user.get(session)
        if answered is not None and _words(reply):
            items.append(HeldoutItem("reply", reply, answered, seq))
        last_user[session] = None
    return items


def score(log: EventLog, items: list[HeldoutItem], tuning: SearchTuning) -> dict[str, Any]:
    """recall@5, recall@10 and MRR@10 per family and over all items, under ``tuning``."""
    log.search_tuning = tuning
    per: dict[str, list[tuple[float, float, float]]] = {
        f: [] for f in ("all", "all_grown", *FAMILIES)
    }
    for item in items:
        top = [h.seq for h in log.search(item.question, 10, before_seq=item.before_seq)]
        rank = top.index(item.evidence) + 1 if item.evidence in top else 0
        row = (float(0 < rank <= 5), float(rank > 0), 1.0 / rank if rank else 0.0)
        if item.family in FIRST_SET:
            per["all"].append(row)
        per["all_grown"].append(row)
        per[item.family].append(row)
    out: dict[str, Any] = {}
    for family, rows in per.items():
        n = len(rows) or 1
        out[family] = {
            "recall_at_5": round(sum(r[0] for r in rows) / n, 4),
            "recall_at_10": round(sum(r[1] for r in rows) / n, 4),
            "mrr_at_10": round(sum(r[2] for r in rows) / n, 4),
            "items": len(rows),
        }
    return out
