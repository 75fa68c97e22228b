"""What workers share with every web process through the database: commands to the worker
that owns a run, each session's kernel state and index, and once-per-folder markers.

Nothing a page shows lives in one process's memory: a worker writes these rows, any web
process reads them. Commands go through a table rather than the channel layer because the
embedded default's in-memory layer does not cross processes, a row survives a web process
restart, and the answer is written next to the question.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.utils import timezone

__all__ = ["GATEWAY_OWNER_PREFIX", "ConsoleMarker", "KernelState", "SessionIndex", "WorkerCommand"]

# A kernel whose owner starts so is a gateway session's, in that web process (not a run
# worker's): alive while the process's heartbeat keeps its row fresh, and console actions,
# which run workers answer, do not apply to it.
GATEWAY_OWNER_PREFIX = "gateway:"


class WorkerCommand(models.Model):
    """A console action for the worker that owns a session's run, and its answer."""

    STOP, RESTART_KERNEL, STOP_KERNEL, KERNEL_STATUS, DIGEST = (
        "stop", "restart_kernel", "stop_kernel", "kernel_status", "digest",
    )  # fmt: skip
    ACTIONS = (STOP, RESTART_KERNEL, STOP_KERNEL, KERNEL_STATUS, DIGEST)
    PENDING, TAKEN, DONE, FAILED, EXPIRED = "pending", "taken", "done", "failed", "expired"
    STATE_CHOICES = [(s, s) for s in (PENDING, TAKEN, DONE, FAILED, EXPIRED)]

    session_id = models.CharField(max_length=200)
    action = models.CharField(max_length=32, choices=[(a, a) for a in ACTIONS])
    worker = models.CharField(max_length=200)  # the owner when the command was sent
    state = models.CharField(max_length=16, choices=STATE_CHOICES, default=PENDING)
    created_at = models.DateTimeField(default=timezone.now)
    answered_at = models.DateTimeField(null=True, blank=True)
    answer = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        db_table = "dashboard_workercommand"
        ordering = ["id"]
        indexes = [models.Index(fields=["worker", "state"])]

    def __str__(self) -> str:
        return f"{self.action} {self.session_id} ({self.state})"


class KernelState(models.Model):
    """A session's kernel as its worker last saw it (after each cell and on commands)."""

    session_id = models.CharField(max_length=200, unique=True)
    worker = models.CharField(max_length=200, blank=True)
    tier = models.CharField(max_length=32, blank=True)
    strength = models.CharField(max_length=32, blank=True)
    layers = models.CharField(max_length=400, blank=True)
    missing_layers = models.JSONField(default=list, blank=True)
    alive = models.BooleanField(default=False)
    pid = models.IntegerField(null=True, blank=True)
    memory_bytes = models.BigIntegerField(null=True, blank=True)
    started_at = models.FloatField(null=True, blank=True)  # time.time() of the kernel start
    cells = models.PositiveIntegerField(default=0)
    restarts = models.PositiveIntegerField(default=0)
    last_status = models.CharField(max_length=32, blank=True)
    digest = models.TextField(blank=True)
    running = models.BooleanField(default=False)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "dashboard_kernelstate"
        ordering = ["session_id"]

    def __str__(self) -> str:
        return f"kernel of {self.session_id} ({'alive' if self.alive else 'stopped'})"

    @property
    def gateway(self) -> bool:
        """Driven by the gateway in a web process (see ``GATEWAY_OWNER_PREFIX``)."""
        return self.worker.startswith(GATEWAY_OWNER_PREFIX)

    def to_row(self) -> dict[str, Any]:
        """What the Kernels page and the session page show."""
        uptime = 0.0
        if self.alive and self.started_at:
            uptime = round(max(0.0, timezone.now().timestamp() - self.started_at), 1)
        return {
            "session_id": self.session_id,
            "worker": self.worker,
            "tier": self.tier,
            "strength": self.strength,
            "layers": self.layers,
            "missing_layers": list(self.missing_layers or ()),
            "alive": self.alive,
            "pid": self.pid,
            "memory_bytes": self.memory_bytes,
            "uptime_s": uptime,
            "cells": self.cells,
            "restarts": self.restarts,
            "last_status": self.last_status or "idle",
            "digest": self.digest,
            "running": self.running,
            "updated_at": self.updated_at,
            "gateway": self.gateway,
        }


class SessionIndex(models.Model):
    """A session's eviction index, saved by its worker after each compress."""

    session_id = models.CharField(max_length=200, unique=True)
    data = models.JSONField(default=dict)  # EvictionIndex.to_checkpoint()
    blocks = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "dashboard_sessionindex"
        ordering = ["session_id"]

    def __str__(self) -> str:
        return f"index of {self.session_id} ({self.blocks} blocks)"


class ConsoleMarker(models.Model):
    """Something done once per console database (so once per data folder), e.g. the demo."""

    name = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    detail = models.CharField(max_length=200, blank=True)

    class Meta:
        db_table = "dashboard_consolemarker"

    def __str__(self) -> str:
        return self.name
