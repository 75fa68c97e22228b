"""Counterfactual replay: what a recorded session would have cost, and lost, under another
profile or another context policy, rebuilt from the Event Log with no model calls.

    trace = load_trace(log, session_id, steps=recorded_steps)   # steps optional
    report = counterfactual(trace, Profile(context_size=8192, trigger_ratio=0.7),
                            recorded_profile=Profile(context_size=8192))

``trace`` (the events, compress points, model calls and recorded retrievals), ``engine``
(the four policies), ``regret`` (needless and newly needed retrievals; how exactly the
recorded run is reproduced).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..profile import Profile
from ..tokens import TokenCounter
from .engine import (
    FLAT_TIER_CAP,
    POLICIES,
    CallView,
    CompressOutcome,
    Observer,
    Policy,
    ReplayResult,
    SummaryOptions,
    facts_status,
    replay,
    salience,
)
from .regret import regret, reproduction
from .trace import (
    CallPoint,
    CompressPoint,
    RecordedCompress,
    Retrieval,
    Trace,
    TraceError,
    load_trace,
)
from .window import CallDiff, CallWindow, WindowPart, inspect_call

__all__ = [
    "FLAT_TIER_CAP",
    "POLICIES",
    "CallDiff",
    "CallPoint",
    "CallView",
    "CallWindow",
    "CompressOutcome",
    "CompressPoint",
    "Observer",
    "Policy",
    "RecordedCompress",
    "ReplayResult",
    "Retrieval",
    "SummaryOptions",
    "Trace",
    "TraceError",
    "WindowPart",
    "counterfactual",
    "facts_status",
    "inspect_call",
    "load_trace",
    "regret",
    "replay",
    "reproduction",
    "salience",
]


def counterfactual(
    trace: Trace,
    profile: Profile,
    policy: Policy = "scroll",
    *,
    recorded_profile: Profile,
    recorded_profiles: Sequence[Profile] | None = None,
    counter: TokenCounter | None = None,
    system: str | None = None,
    summary: SummaryOptions | None = None,
    facts: Mapping[str, int] | None = None,
    per_call: bool = True,
) -> dict[str, Any]:
    """The recorded run (its own profile replayed, checked against the records) beside the
    replay under ``profile`` and ``policy``, with the regret and the differences.

    ``recorded_profiles`` (one per compress point) are the profiles in force when the run
    compressed, for a run tuned while it ran; ``recorded_profile`` is then the last of them.
    """
    options: dict[str, Any] = {"counter": counter, "system": system}
    recorded = replay(trace, recorded_profile, "scroll", profiles=recorded_profiles, **options)
    same = policy == "scroll" and profile == recorded_profile
    result = recorded if same else replay(trace, profile, policy, summary=summary, **options)
    out: dict[str, Any] = {
        "session_id": trace.session_id,
        "source": trace.source,
        "exact_inputs": trace.exact,
        "policy": policy,
        "recorded": recorded.to_dict(per_call=per_call),
        "replay": result.to_dict(per_call=per_call),
        "reproduction": reproduction(trace, recorded),
        "regret": regret(trace, result, recorded),
        "delta": {
            key: getattr(result, key) - getattr(recorded, key)
            for key in ("billed_prompt_tokens", "prefill_tokens", "evictions", "folds", "peak_view")
        },
    }
    if facts:
        out["facts"] = facts_status(result, facts)
        out["facts_recorded"] = facts_status(recorded, facts)
    return out
