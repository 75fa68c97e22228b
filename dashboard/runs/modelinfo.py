"""What a run started now will use as its model, said plainly on the Runs page (issue 11):
the configured OpenAI-compatible endpoint, or the rule-based baseline with what it can and
cannot do."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from scroll_core.models.policy import POLICY_NAME

__all__ = ["BASELINE_CAN", "BASELINE_CANNOT", "what_will_run"]

BASELINE_CAN = (
    "run the fenced ```python blocks of a task in the sandboxed kernel and report what they print",
    "answer a recall question by writing a real ms program (searches per name and key terms, a "
    "date filter, one expand of the best hits) and quoting the matching sentence",
    "answer when/yes-no/what questions short, citing the seq in its headline, or abstain",
    "end every reply with a headline, so eviction, the index and replay work as with an LLM",
)
BASELINE_CANNOT = (
    "understand or carry out a free-form task: every turn is read as code to run or a "
    "question to look up",
    "plan over several steps, reason, summarise or write new text",
    "answer from anything but the sessions' own events (no world knowledge)",
)


def what_will_run(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    env = os.environ if env is None else env
    name = env.get("SCROLL_MODEL_NAME", "").strip()
    return {
        "configured": bool(name),
        "name": name or POLICY_NAME,
        "base_url": env.get("SCROLL_MODEL_BASE_URL", "").strip() or "the OpenAI default",
        "context_size": env.get("SCROLL_MODEL_CONTEXT_SIZE", "").strip() or "8192",
        "baseline": POLICY_NAME,
        "can": BASELINE_CAN,
        "cannot": BASELINE_CANNOT,
    }
