"""The tables of runs: tuning profiles and their audit, operators' kernel actions, the runs the
console started, their compress records, and (in modules of their own) agent grants and the
workers' shared state.

Every model keeps the table it had when the console was one app (``db_table``), so moving it
here moved no row.
"""

from __future__ import annotations

import re
from dataclasses import fields
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from dashboard.runs.grants import AgentGrant
from scroll_core.errors import ConfigError
from scroll_core.profile import Profile

__all__ = [
    "PROFILE_FIELDS",
    "AgentGrant",
    "CompressEvent",
    "ConsoleMarker",
    "KernelAction",
    "KernelState",
    "ProfileChange",
    "RunRecord",
    "SessionIndex",
    "TuningProfile",
    "WorkerCommand",
]

# Every knob of scroll_core.Profile, in its order; the model below has one column each.
PROFILE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Profile))
_DEFAULTS = Profile()
DEFAULT_PROFILE_NAME = "default"
# Seeded by migration 0005: the knobs a gateway key starts with (``cached_profile_id``).
CACHED_PROFILE_NAME = "long-window-cache"


def _help(name: str) -> str:
    return {
        "context_size": "C: the model's window in tokens.",
        "trigger_ratio": "Compress when the view passes this share of C; in (0, 1].",
        "trigger_cap_tokens": "Compress at the latest when the view passes this many tokens.",
        "reserve_ratio": "Share of C kept as the protected tail; in (0, 1).",
        "tail_cap_tokens": "The protected tail never exceeds this many tokens.",
        "tail_floor_tokens": "The protected tail's floor (capped by tail_floor_ratio of C).",
        "tail_floor_ratio": "Share of C the tail floor may take; in (0, 1).",
        "protected_recent_tool_results": "Newest tool results never pre-folded.",
        "pre_trim_min_chars": "Results this short or shorter are never folded (fold floor).",
        "tier_cap": "Blocks per index tier before nine fold into one a tier up.",
        "print_cap": "Characters a cell may print before the rest is hidden.",
        "index_budget_ratio": "Share of C the eviction index may take in the view.",
        "output_reserve_cap": "At most this many tokens are kept free for the answer.",
        "output_reserve_ratio": "Share of C kept free for the answer (capped above).",
        "exec_timeout_s": "Wall time of one kernel cell, in seconds.",
    }.get(name, "")


class TuningProfile(models.Model):
    """The knobs of context management an operator tunes in admin.

    ``clean()`` builds a ``scroll_core.Profile`` from the row, so a profile the admin
    accepts is one the core accepts. Runs re-read their profile before every compress.
    """

    name = models.SlugField(max_length=64, unique=True)
    description = models.CharField(max_length=200, blank=True)
    context_size = models.PositiveIntegerField(
        default=_DEFAULTS.context_size, help_text=_help("context_size")
    )
    trigger_ratio = models.FloatField(
        default=_DEFAULTS.trigger_ratio, help_text=_help("trigger_ratio")
    )
    # A database default too: code that knows the table as it was before this column (an
    # older migration's model, a process not yet restarted on upgrade) can still add a row.
    trigger_cap_tokens = models.IntegerField(
        default=_DEFAULTS.trigger_cap_tokens,
        db_default=_DEFAULTS.trigger_cap_tokens,
        help_text=_help("trigger_cap_tokens"),
    )
    reserve_ratio = models.FloatField(
        default=_DEFAULTS.reserve_ratio, help_text=_help("reserve_ratio")
    )
    tail_cap_tokens = models.IntegerField(
        default=_DEFAULTS.tail_cap_tokens, help_text=_help("tail_cap_tokens")
    )
    tail_floor_tokens = models.IntegerField(
        default=_DEFAULTS.tail_floor_tokens, help_text=_help("tail_floor_tokens")
    )
    tail_floor_ratio = models.FloatField(
        default=_DEFAULTS.tail_floor_ratio, help_text=_help("tail_floor_ratio")
    )
    protected_recent_tool_results = models.IntegerField(
        default=_DEFAULTS.protected_recent_tool_results,
        help_text=_help("protected_recent_tool_results"),
    )
    pre_trim_min_chars = models.IntegerField(
        default=_DEFAULTS.pre_trim_min_chars, help_text=_help("pre_trim_min_chars")
    )
    tier_cap = models.IntegerField(default=_DEFAULTS.tier_cap, help_text=_help("tier_cap"))
    print_cap = models.IntegerField(default=_DEFAULTS.print_cap, help_text=_help("print_cap"))
    index_budget_ratio = models.FloatField(
        default=_DEFAULTS.index_budget_ratio, help_text=_help("index_budget_ratio")
    )
    output_reserve_cap = models.IntegerField(
        default=_DEFAULTS.output_reserve_cap, help_text=_help("output_reserve_cap")
    )
    output_reserve_ratio = models.FloatField(
        default=_DEFAULTS.output_reserve_ratio, help_text=_help("output_reserve_ratio")
    )
    exec_timeout_s = models.FloatField(
        default=_DEFAULTS.exec_timeout_s, help_text=_help("exec_timeout_s")
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "dashboard_tuningprofile"
        ordering = ["name"]
        # Editing profiles in admin needs Django's own change permission; this one is for the
        # replay lab's "save these knobs as a new profile" (dashboard/runs/permissions.py).
        permissions = [
            ("save_profile_from_replay", "Can save a tuning profile from the replay lab")
        ]

    def __str__(self) -> str:
        return self.name

    def knobs(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in PROFILE_FIELDS}

    def to_core(self) -> Profile:
        """The ``scroll_core.Profile`` this row describes (ConfigError when it is invalid)."""
        return Profile.from_mapping(self.knobs())

    def clean(self) -> None:
        """Every knob's own error at once (each checked against the defaults of the rest),
        then, when each is fine alone, the rules that tie knobs together."""
        super().clean()
        errors: dict[str, list[str]] = {}
        for name, value in self.knobs().items():
            if value is None or isinstance(value, bool) or not isinstance(value, int | float):
                continue  # the form field reports it
            try:
                Profile.from_mapping({name: value})
            except ConfigError as exc:
                if str(exc).startswith(name):  # its own rule, not one shared with defaults
                    errors[name] = [str(exc)]
        if errors:
            raise ValidationError(errors)
        try:
            self.to_core()
        except ConfigError as exc:
            raise ValidationError(_config_error_by_field(str(exc))) from None

    @classmethod
    def get_default(cls) -> TuningProfile:
        """The profile named ``default`` (created by a migration; recreated if deleted)."""
        profile, _ = cls.objects.get_or_create(name=DEFAULT_PROFILE_NAME)
        return profile


def _config_error_by_field(message: str) -> dict[str, list[str]]:
    """Put the core's message on the field it names (its first word), else on the form."""
    first = re.match(r"\w+", message)
    if first and first.group(0) in PROFILE_FIELDS:
        return {first.group(0): [message]}
    # The tail-against-trigger rule involves several knobs; trigger_ratio is the usual one.
    if "protected tail" in message:
        return {"trigger_ratio": [message]}
    return {"__all__": [message]}


class ProfileChange(models.Model):
    """One knob changed on one profile: who, when, old and new value."""

    profile = models.ForeignKey(TuningProfile, on_delete=models.CASCADE, related_name="changes")
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    changed_at = models.DateTimeField(default=timezone.now, db_index=True)
    field = models.CharField(max_length=64)
    old_value = models.CharField(max_length=64, blank=True)
    new_value = models.CharField(max_length=64)

    class Meta:
        db_table = "dashboard_profilechange"
        ordering = ["-changed_at", "-id"]

    def __str__(self) -> str:
        return f"{self.profile}.{self.field}: {self.old_value} -> {self.new_value}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile.name,
            "changed_by": self.changed_by.get_username() if self.changed_by else None,
            "changed_at": self.changed_at.isoformat(),
            "field": self.field,
            "old": self.old_value,
            "new": self.new_value,
        }


class KernelAction(models.Model):
    """An operator restarted or stopped a session's kernel from the Kernels page: who, when,
    what, and what came of it. The session's timeline shows these; they raise no alert."""

    RESTART, STOP = "restart", "stop"

    session_id = models.CharField(max_length=200, db_index=True)
    at = models.DateTimeField(default=timezone.now)
    action = models.CharField(max_length=16, choices=[(RESTART, RESTART), (STOP, STOP)])
    # The username as it was: the record outlives the account.
    operator = models.CharField(max_length=150)
    done = models.BooleanField(default=False)
    # Done: the worker that did it. Not done: why not.
    detail = models.CharField(max_length=400, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.session_id}: kernel {self.action} by {self.operator}"


class RunRecord(models.Model):
    """One agent session the console started (from the Runs page or the demo)."""

    QUEUED, RUNNING, DONE, FAILED, STOPPED = "queued", "running", "done", "failed", "stopped"
    STATUS_CHOICES = [(s, s) for s in (QUEUED, RUNNING, DONE, FAILED, STOPPED)]
    ACTIVE = (QUEUED, RUNNING)

    session_id = models.CharField(max_length=200, unique=True)
    # The run's tenant in the Event Log: its own (``run-…``, ``demo-…``) unless the operator
    # chose to continue an existing agent, whose memory the run then reads.
    agent_id = models.CharField(max_length=200, blank=True)
    task = models.TextField()
    kind = models.CharField(max_length=32, default="task")  # "task" or "demo"
    # Whether the policy model may execute the task's fenced ```python blocks: only for
    # users holding runs.run_task_code (and for runs the server starts itself).
    task_code = models.BooleanField(default=True)
    profile = models.ForeignKey(
        TuningProfile, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    model_name = models.CharField(max_length=200)
    status = models.CharField(max_length=16, choices=STATUS_CHOICES, default=QUEUED)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    turns = models.PositiveIntegerField(default=0)
    steps = models.PositiveIntegerField(default=0)
    evictions = models.PositiveIntegerField(default=0)
    folds = models.PositiveIntegerField(default=0)
    expands = models.PositiveIntegerField(default=0)
    view_tokens = models.PositiveIntegerField(default=0)
    trigger_tokens = models.PositiveIntegerField(default=0)
    context_size = models.PositiveIntegerField(default=0)
    last_report = models.JSONField(default=dict, blank=True)
    last_answer = models.TextField(blank=True)
    # What a worker needs to run it (or resume it in another process): the turns, the
    # options (max_steps, pause_s, the named host function set) and the last checkpoint.
    plan = models.JSONField(default=list, blank=True)
    options = models.JSONField(default=dict, blank=True)
    checkpoint = models.JSONField(default=dict, blank=True)
    # Ownership: the worker holding the lease, until when, and how often it was claimed.
    worker = models.CharField(max_length=200, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    # Runs with host functions held in one process's memory: only that process runs them.
    pinned_to = models.CharField(max_length=200, blank=True)

    class Meta:
        db_table = "dashboard_runrecord"
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "lease_until"], name="run_claim_idx")]
        # Running code is a permission, not a login (dashboard/runs/permissions.py enforces them;
        # migration 0003 gives them to the "Operators" group).
        permissions = [
            ("start_run", "Can start agent runs"),
            ("stop_run", "Can stop running agent runs"),
            ("control_kernel", "Can restart or stop a session's kernel"),
            ("run_task_code", "Can have a run execute the task's own fenced code"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id} ({self.status})"

    @property
    def active(self) -> bool:
        return self.status in self.ACTIVE

    def summary(self) -> dict[str, Any]:
        """What the sessions table shows; sent as ``session.changed``."""
        return {
            "session_id": self.session_id,
            "status": self.status,
            "kind": self.kind,
            "model": self.model_name,
            "profile": self.profile.name if self.profile else None,
            "turns": self.turns,
            "steps": self.steps,
            "evictions": self.evictions,
            "folds": self.folds,
            "expands": self.expands,
            "view_tokens": self.view_tokens,
            "trigger_tokens": self.trigger_tokens,
            "context_size": self.context_size,
            "error": self.error,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "ended_at": self.ended_at.isoformat() if self.ended_at else None,
        }

    def profile_changes(self) -> models.QuerySet[ProfileChange]:
        """Changes to this run's profile while it ran: the session timeline shows them."""
        if self.profile_id is None or self.started_at is None:
            return ProfileChange.objects.none()
        changes = ProfileChange.objects.filter(
            profile_id=self.profile_id, changed_at__gte=self.started_at
        )
        if self.ended_at is not None:
            changes = changes.filter(changed_at__lte=self.ended_at)
        return changes.order_by("changed_at", "id")


class CompressEvent(models.Model):
    """One ``compress`` of one session: the budget-over-time chart draws these."""

    run = models.ForeignKey(
        RunRecord, null=True, blank=True, on_delete=models.CASCADE, related_name="compressions"
    )
    session_id = models.CharField(max_length=200, db_index=True)
    at = models.DateTimeField(default=timezone.now)
    turn = models.PositiveIntegerField(default=0)
    step = models.PositiveIntegerField(default=0)
    reason = models.CharField(max_length=32, blank=True)  # turn_start, after_step, overflow
    action = models.CharField(max_length=32)  # none, prefold, evict, live_fold
    forced = models.BooleanField(default=False)
    tokens_before = models.PositiveIntegerField(default=0)
    tokens_after = models.PositiveIntegerField(default=0)
    prefix_tokens = models.PositiveIntegerField(default=0)
    index_tokens = models.PositiveIntegerField(default=0)
    digest_tokens = models.PositiveIntegerField(default=0)
    folded_tokens = models.PositiveIntegerField(default=0)
    tail_tokens = models.PositiveIntegerField(default=0)
    trigger_tokens = models.PositiveIntegerField(default=0)
    hard_limit = models.PositiveIntegerField(default=0)
    context_size = models.PositiveIntegerField(default=0)
    folds = models.PositiveIntegerField(default=0)
    evicted_lo = models.BigIntegerField(null=True, blank=True)
    evicted_hi = models.BigIntegerField(null=True, blank=True)
    evicted_events = models.PositiveIntegerField(default=0)
    evicted_tokens = models.PositiveIntegerField(default=0)
    index_blocks = models.PositiveIntegerField(default=0)
    tier_profile = models.JSONField(default=list, blank=True)
    duration_ms = models.FloatField(default=0.0)

    class Meta:
        db_table = "dashboard_compressevent"
        ordering = ["session_id", "id"]

    def __str__(self) -> str:
        return f"{self.session_id} t{self.turn}s{self.step} {self.action}"

    @classmethod
    def from_step(
        cls, run: RunRecord | None, session_id: str, turn: int, step: int, item: Any, index: Any
    ) -> CompressEvent:
        """The row for one ``CompressStep`` of the agent loop (unsaved); ``index`` is the
        session's EvictionIndex after it, or None."""
        c = item.record
        report = c.view.report if c.view is not None else None
        return cls(
            run=run,
            session_id=session_id,
            turn=turn,
            step=step,
            reason=item.reason,
            action=c.action,
            forced=c.forced,
            tokens_before=c.tokens_before,
            tokens_after=c.tokens_after,
            prefix_tokens=report.prefix if report else 0,
            index_tokens=report.index if report else 0,
            digest_tokens=report.digest if report else 0,
            folded_tokens=report.folded if report else 0,
            tail_tokens=report.tail if report else 0,
            trigger_tokens=c.trigger_tokens,
            hard_limit=c.hard_limit,
            context_size=report.context_size if report else (run.context_size if run else 0),
            folds=len(c.pre_folded) + len(c.live_folded) + len(c.active_folded),
            evicted_lo=c.evicted[0] if c.evicted else None,
            evicted_hi=c.evicted[1] if c.evicted else None,
            evicted_events=c.evicted_events,
            evicted_tokens=c.evicted_tokens,
            index_blocks=len(index) if index is not None else 0,
            tier_profile=index.tier_profile() if index is not None else [],
            duration_ms=c.duration_ms,
        )

    def sections(self) -> dict[str, int]:
        return {
            "prefix": self.prefix_tokens,
            "index": self.index_tokens,
            "digest": self.digest_tokens,
            "folded": self.folded_tokens,
            "tail": self.tail_tokens,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "at": self.at.isoformat(),
            "turn": self.turn,
            "step": self.step,
            "reason": self.reason,
            "action": self.action,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "sections": self.sections(),
            "trigger_tokens": self.trigger_tokens,
            "context_size": self.context_size,
            "folds": self.folds,
            "evicted": [self.evicted_lo, self.evicted_hi] if self.evicted_lo else None,
            "index_blocks": self.index_blocks,
            "tier_profile": self.tier_profile,
        }


from dashboard.runs.workstate import (  # noqa: E402  (models of this app kept in a module of their own)
    ConsoleMarker,
    KernelState,
    SessionIndex,
    WorkerCommand,
)


def cached_profile_id() -> int | None:
    """The ``long-window-cache`` profile's id, which a new gateway key starts with; None when
    an operator deleted it (the key then follows the default profile).

    A gateway session always sits in front of a provider's prompt cache, and there this
    profile's caps cost less than the reference's defaults past a 40k window (0.90x the
    agent's own compaction at 128k, against 1.02x) while answering as many questions about
    what it evicted (``bench/gateway_cost.py``'s recall probes: 34 of 40 under either). Below
    40k the two profiles give the same view. Runs keep the default profile."""
    row = TuningProfile.objects.filter(name=CACHED_PROFILE_NAME).values_list("pk", flat=True)
    return row.first()
