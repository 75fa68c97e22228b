"""LoCoMo's answer scoring rules (snap-research/LoCoMo, ``task_eval/evaluation.py``), stdlib only.

Normalise: lowercase, strip punctuation, drop the articles ``a``, ``an``, ``the`` (and
``and``, as LoCoMo does), collapse whitespace. Token F1 over the normalised words.
Category 1 (multi-hop): the gold answer's comma-separated parts are each scored against the
best-matching comma-separated part of the prediction and averaged (partial credit).
Category 3 (open-domain): only the gold answer's part before the first ``;`` counts.
Category 5 (adversarial): correct (1.0) exactly when the prediction abstains.
One difference, stated: LoCoMo stems words with NLTK's Porter stemmer; this does not (NLTK is
not a dependency), so an inflected match scores lower here than there.
"""

from __future__ import annotations

import re
import string
from collections import Counter

__all__ = ["ABSTENTION_MARKERS", "abstained", "answer_f1", "multi_hop_f1", "normalise", "token_f1"]

ABSTENTION_MARKERS = (
    "no information available",
    "not mentioned",
    "i don't have that information",
)
_PUNCT = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")


def normalise(text: str) -> str:
    text = str(text).replace(",", "").lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def token_f1(prediction: str, gold: str) -> float:
    pred, truth = normalise(prediction).split(), normalise(gold).split()
    same = sum((Counter(pred) & Counter(truth)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(truth)
    return 2 * precision * recall / (precision + recall)


def multi_hop_f1(prediction: str, gold: str) -> float:
    predictions = [p.strip() for p in str(prediction).split(",")]
    golds = [g.strip() for g in str(gold).split(",")]
    return sum(max(token_f1(p, g) for p in predictions) for g in golds) / len(golds)


def abstained(prediction: str | None) -> bool:
    text = (prediction or "").lower().replace("’", "'")
    return any(marker in text for marker in ABSTENTION_MARKERS)


def answer_f1(prediction: str | None, gold: object, category: int) -> float:
    """The score LoCoMo gives ``prediction`` for an item of ``category``."""
    if category == 5:
        return 1.0 if abstained(prediction) else 0.0
    prediction = prediction or ""
    answer = str(gold)
    if category == 3:
        answer = answer.split(";")[0].strip()
    if category == 1:
        return multi_hop_f1(prediction, answer)
    return token_f1(prediction, answer)
