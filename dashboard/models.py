"""The console's own tables: tuning profiles and their audit, runs, compress records,
persisted spans and the "rotting index" alerts.

The Event Log stays in its own SQLite file (scroll_core); these rows only describe what the
console ran and saw.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from scroll_core.errors import ConfigError
from scroll_core.profile import Profile

from .grants import AgentGrant

__all__ = [
    "PROFILE_FIELDS",
    "AgentGrant",
    "Alert",
    "AlertRule",
    "CompressEvent",
    "ConsoleMarker",
    "GatewayKey",
    "KernelState",
    "ModelPrice",
    "ProfileChange",
    "RunRecord",
    "SessionIndex",
    "SpanRecord",
    "TuningProfile",
    "WorkerCommand",
]

# Every knob of scroll_core.Profile, in its order; the model below has one column each.
PROFILE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Profile))
_DEFAULTS = Profile()
DEFAULT_PROFILE_NAME = "default"


def _help(name: str) -> str:
    return {
        "context_size": "C: the model's window in tokens.",
        "trigger_ratio": "Compress when the view passes this share of C; in (0, 1].",
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
        ordering = ["name"]
        # Editing profiles in admin needs Django's own change permission; this one is for the
        # replay lab's "save these knobs as a new profile" (dashboard/permissions.py).
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
    # users holding dashboard.run_task_code (and for runs the server starts itself).
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
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["status", "lease_until"], name="run_claim_idx")]
        # Running code is a permission, not a login (dashboard/permissions.py enforces them;
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


class SpanRecord(models.Model):
    """A finished span, kept for the Traces page (oldest pruned past SCROLL_SPAN_RETENTION)."""

    trace_id = models.CharField(max_length=32, db_index=True)
    span_id = models.CharField(max_length=16, unique=True)
    parent_id = models.CharField(max_length=16, null=True, blank=True)
    name = models.CharField(max_length=200, db_index=True)
    session_id = models.CharField(max_length=200, blank=True, db_index=True)
    kind = models.CharField(max_length=16, default="internal")
    start_ns = models.BigIntegerField()
    end_ns = models.BigIntegerField()
    duration_ms = models.FloatField()
    status = models.CharField(max_length=8, default="unset")  # ok, error, unset
    status_message = models.TextField(blank=True)
    attributes = models.JSONField(default=dict, blank=True)
    events = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["session_id", "-id"])]

    def __str__(self) -> str:
        return f"{self.name} {self.duration_ms:.1f} ms"

    @property
    def started(self) -> datetime:
        return datetime.fromtimestamp(self.start_ns / 1e9, tz=UTC)

    @classmethod
    def from_core(cls, record: Any) -> SpanRecord:
        """A row for a ``scroll_core.telemetry.SpanRecord`` (not saved)."""
        return cls(
            trace_id=record.trace_id,
            span_id=record.span_id,
            parent_id=record.parent_id,
            name=record.name[:200],
            session_id=(record.session_id or "")[:200],
            kind=record.kind,
            start_ns=record.start_ns,
            end_ns=record.end_ns,
            duration_ms=record.duration_ms,
            status=record.status,
            status_message=record.status_message or "",
            attributes=record.attributes,
            events=record.events,
        )

    def to_dict(self) -> dict[str, Any]:
        """The span as sent in ``span.finished`` messages (the core record's fields + id)."""
        return {
            "id": self.pk,
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "parent_id": self.parent_id,
            "name": self.name,
            "session_id": self.session_id or None,
            "kind": self.kind,
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "duration_ms": self.duration_ms,
            "status": self.status,
            "status_message": self.status_message or None,
            "attributes": self.attributes,
            "events": self.events,
        }


class AlertRule(models.Model):
    """One "rotting index" rule and its threshold; a migration seeds one per kind."""

    INDEX_GAP = "index_gap"
    HEADLINE_QUALITY = "headline_quality"
    SPAN_REREAD = "span_reread"
    PRINT_TRUNCATION = "print_truncation"
    KERNEL_FAILURE = "kernel_failure"
    CONTEXT_UNFIT = "context_unfit"
    EVICTION_NET_LOSS = "eviction_net_loss"
    KIND_CHOICES = [
        (INDEX_GAP, "Index gap (the blocks no longer tile the evicted range)"),
        (HEADLINE_QUALITY, "Headline quality falling (missing, malformed, duplicate)"),
        (SPAN_REREAD, "Evicted span re-read instead of computed in the kernel"),
        (PRINT_TRUNCATION, "Repeated print-cap truncation"),
        (KERNEL_FAILURE, "Kernel crash or timeout"),
        (CONTEXT_UNFIT, "Context window unfit"),
        (EVICTION_NET_LOSS, "Evicted span re-read past its cost (a net loss under a prefix cache)"),
    ]

    kind = models.CharField(max_length=32, choices=KIND_CHOICES, unique=True)
    threshold = models.PositiveIntegerField(
        default=1, help_text="How many occurrences (within the window) raise the alert."
    )
    window = models.PositiveIntegerField(
        "window (spans)",
        default=10,
        help_text="Recent relevant spans of a session considered (0: all).",
    )
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["kind"]

    def __str__(self) -> str:
        return self.get_kind_display()


class Alert(models.Model):
    """One raised alert; repeated triggers bump ``count`` instead of opening another."""

    OPEN, ACKNOWLEDGED, RESOLVED = "open", "acknowledged", "resolved"
    STATE_CHOICES = [(s, s) for s in (OPEN, ACKNOWLEDGED, RESOLVED)]

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="alerts")
    session_id = models.CharField(max_length=200, blank=True, db_index=True)
    key = models.CharField(max_length=200, blank=True)  # e.g. the re-read block
    message = models.TextField()
    state = models.CharField(max_length=16, choices=STATE_CHOICES, default=OPEN)
    count = models.PositiveIntegerField(default=1)
    first_seen = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now)
    span_id = models.CharField(max_length=16, blank=True)  # the span that last triggered it
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-last_seen", "-id"]
        indexes = [models.Index(fields=["state", "-last_seen"])]
        # Several processes evaluate rules at once: the database keeps one open alert per
        # rule and subject (raise_alert bumps it when its insert loses the race).
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "session_id", "key"],
                condition=Q(state="open"),
                name="one_open_alert_per_rule_and_subject",
            )
        ]

    def __str__(self) -> str:
        return f"{self.rule.kind} {self.session_id} ({self.state})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.pk,
            "kind": self.rule.kind,
            "title": self.rule.get_kind_display(),
            "session_id": self.session_id,
            "key": self.key,
            "message": self.message,
            "state": self.state,
            "count": self.count,
            "first_seen": self.first_seen.isoformat(),
            "last_seen": self.last_seen.isoformat(),
            "span_id": self.span_id or None,
            "acknowledged_by": (
                self.acknowledged_by.get_username() if self.acknowledged_by else None
            ),
            "acknowledged_at": self.acknowledged_at.isoformat() if self.acknowledged_at else None,
            "resolved_at": self.resolved_at.isoformat() if self.resolved_at else None,
        }


class ModelPrice(models.Model):
    """What one model costs, per million tokens: fresh input, cached input, output.

    A call's cost: its uncached prompt tokens at ``input``, the prompt tokens a prefix cache
    serves (the part of the view unchanged since the call before) at ``cached_input``, and its
    output at ``output``. Models without a row show no cost.
    """

    model = models.CharField(
        max_length=200, unique=True, help_text="The model name as runs record it, e.g. gpt-4o."
    )
    input_per_mtok = models.DecimalField(
        "input per 1M tokens", max_digits=12, decimal_places=4, default=0,
        validators=[MinValueValidator(0)],
    )  # fmt: skip
    cached_input_per_mtok = models.DecimalField(
        "cached input per 1M tokens", max_digits=12, decimal_places=4, default=0,
        validators=[MinValueValidator(0)],
    )  # fmt: skip
    output_per_mtok = models.DecimalField(
        "output per 1M tokens", max_digits=12, decimal_places=4, default=0,
        validators=[MinValueValidator(0)],
    )  # fmt: skip
    currency = models.CharField(max_length=8, default="USD")

    class Meta:
        ordering = ["model"]
        verbose_name = "model price"

    def __str__(self) -> str:
        return f"{self.model} ({self.currency})"


from dashboard.workstate import (  # noqa: E402  (models of this app kept in a module of their own)
    ConsoleMarker,
    KernelState,
    SessionIndex,
    WorkerCommand,
)

KEY_PREFIX = "sk-scroll-"
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


class GatewayKey(models.Model):
    """One agent's key to the gateway (``/v1/chat/completions``, ``/v1/messages``).

    Only the sha256 of the key is stored, with its first characters (``prefix``) to find it
    and to show in admin; the key itself is shown once, when it is created. The upstream's
    own key is never stored: ``upstream_key_env`` names the environment variable that holds
    it. ``model_map`` maps the model a client asks for to the upstream's (``"*"`` for any
    other); a name it does not map goes upstream as it is.
    """

    agent_id = models.CharField(
        max_length=120, unique=True, help_text="The agent (tenant) this key's sessions belong to."
    )
    name = models.CharField(max_length=120, blank=True)
    prefix = models.CharField(max_length=32, unique=True, editable=False)
    key_hash = models.CharField(max_length=64, editable=False)
    profile = models.ForeignKey(
        TuningProfile, null=True, blank=True, on_delete=models.SET_NULL, related_name="gateway_keys"
    )
    upstream_format = models.CharField(
        max_length=16,
        choices=[
            ("openai", "OpenAI Chat Completions"),
            ("anthropic", "Anthropic Messages"),
        ],
        default="openai",
        help_text="The API the upstream speaks: OpenAI Chat Completions (POST "
        "{base}/chat/completions) or Anthropic Messages (POST {base}/v1/messages).",
    )
    upstream_base_url = models.URLField(
        max_length=500,
        help_text="OpenAI format: e.g. http://127.0.0.1:8000/v1; Anthropic format: e.g. "
        "https://api.anthropic.com",
    )
    upstream_key_env = models.CharField(
        max_length=120,
        blank=True,
        help_text="The environment variable holding the upstream's key (never the key).",
    )
    model_map = models.JSONField(
        default=dict,
        blank=True,
        help_text='Client model to upstream model, e.g. {"gpt-4o": "qwen2.5", "*": "qwen2.5"}.',
    )
    upstream_timeout_s = models.FloatField(default=120.0)
    max_recall_steps = models.PositiveSmallIntegerField(
        default=6, help_text="Upstream calls one request may make (recall steps included)."
    )
    rate_limit_per_minute = models.PositiveIntegerField(
        default=0, help_text="Requests per minute; 0 means no limit."
    )
    token_budget = models.PositiveBigIntegerField(
        default=0,
        help_text="Upstream tokens (input + output) it may spend; 0 means no limit.",
    )
    tokens_used = models.PositiveBigIntegerField(default=0, editable=False)
    requests = models.PositiveBigIntegerField(default=0, editable=False)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["agent_id"]

    def __str__(self) -> str:
        return f"{self.agent_id} ({self.prefix}…)"

    def clean(self) -> None:
        super().clean()
        errors: dict[str, list[str]] = {}
        if self.upstream_key_env and not _ENV_NAME.match(self.upstream_key_env):
            errors["upstream_key_env"] = [
                "An environment variable name (A-Z, 0-9, _), not the key itself."
            ]
        if not isinstance(self.model_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and k and v for k, v in self.model_map.items()
        ):
            errors["model_map"] = ["A JSON object of model names to model names."]
        if not 0 < self.upstream_timeout_s <= 3600:
            errors["upstream_timeout_s"] = ["Between 0 and 3600 seconds."]
        if not 1 <= self.max_recall_steps <= 32:
            errors["max_recall_steps"] = ["Between 1 and 32."]
        if errors:
            raise ValidationError(errors)

    def set_new_key(self) -> str:
        """Give the row a fresh key and return it (the only time it is readable)."""
        secret = KEY_PREFIX + secrets.token_urlsafe(32)
        self.prefix = secret[: len(KEY_PREFIX) + 8]
        self.key_hash = hash_key(secret)
        return secret

    @classmethod
    def issue(cls, **fields: Any) -> tuple[GatewayKey, str]:
        """Create and save a key; returns the row and the key (shown once)."""
        key = cls(**fields)
        secret = key.set_new_key()
        key.full_clean()
        key.save()
        return key, secret

    @classmethod
    def authenticate(cls, secret: str | None) -> GatewayKey | None:
        """The active key ``secret`` is, compared in constant time; None otherwise."""
        if not secret or not secret.startswith(KEY_PREFIX):
            return None
        key = (
            cls.objects.select_related("profile")
            .filter(prefix=secret[: len(KEY_PREFIX) + 8], active=True)
            .first()
        )
        if key is None or not hmac.compare_digest(key.key_hash, hash_key(secret)):
            return None
        return key

    def upstream_model(self, requested: str) -> str:
        mapping = self.model_map if isinstance(self.model_map, dict) else {}
        return str(mapping.get(requested) or mapping.get("*") or requested)

    def client_models(self) -> list[str]:
        mapping = self.model_map if isinstance(self.model_map, dict) else {}
        names = [k for k in mapping if k != "*"]
        return names or sorted(set(mapping.values())) or ["scroll"]


class StoredResponse(models.Model):
    """A gateway reply stored for the Responses API (``store`` true, the API's default): a
    later request of the same agent names it as ``previous_response_id`` and sends only what
    follows, and ``GET /v1/responses/{id}`` returns it.

    The conversation itself is in the Event Log; this row only says where the reply sits
    there: its session, its place in the chain of client messages and its fingerprint, and
    ``logged_as``, the response id its event is tagged with (the first request's when this
    reply was a retry served from the log). Written before the answer leaves, so the
    client's next request finds it. Deleting the row (``DELETE /v1/responses/{id}``, or
    ``SCROLL_GATEWAY_RESPONSE_DAYS`` passing) forgets the id, never the history.
    """

    response_id = models.CharField(max_length=64, unique=True)
    agent_id = models.CharField(max_length=120, db_index=True)
    session_id = models.CharField(max_length=300)
    position = models.PositiveIntegerField()
    reply_fp = models.CharField(max_length=64)
    logged_as = models.CharField(max_length=64, blank=True)
    response = models.JSONField(help_text="The response object as the client got it whole.")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "stored response"

    def __str__(self) -> str:
        return f"{self.response_id} ({self.session_id})"


class StoredConversation(models.Model):
    """A conversation of the OpenAI Conversations API (``/v1/conversations``) made through
    the gateway: its items are the client messages of its own session in the Event Log
    (``gw:<agent>:<conversation id>``), where a response naming the conversation adds its
    input and its reply. This row holds only what the log does not: the id, the agent it
    belongs to, its session and its metadata. Deleting it forgets the id, never the history.
    """

    conversation_id = models.CharField(max_length=64, unique=True)
    agent_id = models.CharField(max_length=120, db_index=True)
    session_id = models.CharField(max_length=300)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "stored conversation"

    def __str__(self) -> str:
        return f"{self.conversation_id} ({self.session_id})"
