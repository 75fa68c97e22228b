"""LoCoMo's answer scoring rules (snap-research/LoCoMo, ``task_eval/evaluation.py``).

As the official code does it:

* Normalise: drop commas, lowercase, strip punctuation, drop the articles ``a``, ``an``,
  ``the`` (and ``and``), collapse whitespace; then stem every word with NLTK's Porter
  stemmer (``nltk.stem.PorterStemmer()``, its default mode). Token F1 over the stems.
* Category 1 (multi-hop): the prediction and the gold answer are split on ``,``; each gold
  part scores its best-matching prediction part, and the parts are averaged.
* Categories 2 and 4: token F1 of the whole strings.
* Category 3 (open-domain): only the gold answer's part before the first ``;`` counts.
* Category 5 (adversarial): 1 exactly when the lowercased prediction contains
  ``"no information available"`` or ``"not mentioned"``, else 0. No other phrase counts:
  a model that abstains in other words is wrong here, as it is in LoCoMo's own scoring.

No deviation from the official rules is left in this module. The bench may normalise the
*predictions* before scoring (``bench/e2e.py`` rewrites ISO dates into LoCoMo's date style);
it does so identically for every arm and says so beside the figures.
"""

from __future__ import annotations

import calendar
import re
import string
from collections import Counter
from functools import lru_cache

from nltk.stem import PorterStemmer

__all__ = [
    "ABSTENTION_MARKERS",
    "LOCOMO_ABSTENTION",
    "abstained",
    "answer_f1",
    "locomo_dates",
    "multi_hop_f1",
    "normalise",
    "stemmed_tokens",
    "token_f1",
]

# The official rule for category 5, verbatim: these two substrings and nothing else.
ABSTENTION_MARKERS = ("no information available", "not mentioned")
# The wording LoCoMo's own prompts give a model for "the conversation does not say".
LOCOMO_ABSTENTION = "Not mentioned in the conversation."

_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_STEMMER = PorterStemmer()


def normalise(text: object) -> str:
    """LoCoMo's ``normalize_answer``: no commas, lowercase, no punctuation, no articles."""
    text = str(text).replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


@lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    return str(_STEMMER.stem(word))


def stemmed_tokens(text: object) -> list[str]:
    """The normalised words of ``text``, each Porter-stemmed as LoCoMo's ``f1_score`` does."""
    return [_stem(w) for w in normalise(text).split()]


def token_f1(prediction: object, gold: object) -> float:
    pred, truth = stemmed_tokens(prediction), stemmed_tokens(gold)
    same = sum((Counter(pred) & Counter(truth)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(truth)
    return 2 * precision * recall / (precision + recall)


def multi_hop_f1(prediction: object, gold: object) -> float:
    predictions = [p.strip() for p in str(prediction).split(",")]
    golds = [g.strip() for g in str(gold).split(",")]
    return sum(max(token_f1(p, g) for p in predictions) for g in golds) / len(golds)


def abstained(prediction: str | None) -> bool:
    """LoCoMo's category-5 test: the prediction says "no information available" or "not
    mentioned" (any case)."""
    text = (prediction or "").lower()
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


# -- not part of the official rules --------------------------------------------------------
_ISO_DAY = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_ISO_MONTH = re.compile(r"\b(\d{4})-(\d{2})\b(?!-\d)")


def locomo_dates(text: str) -> str:
    """ISO dates rewritten in LoCoMo's style (``2023-05-07`` -> ``7 May 2023``, ``2023-05``
    -> ``May 2023``). Not an official rule: the e2e bench applies it to every arm's
    predictions alike, so the model need not carry the data set's date format."""

    def day(m: re.Match[str]) -> str:
        month = int(m[2])
        if not 1 <= month <= 12:
            return m[0]
        return f"{int(m[3])} {calendar.month_name[month]} {m[1]}"

    def month(m: re.Match[str]) -> str:
        number = int(m[2])
        return f"{calendar.month_name[number]} {m[1]}" if 1 <= number <= 12 else m[0]

    return _ISO_MONTH.sub(month, _ISO_DAY.sub(day, text))
