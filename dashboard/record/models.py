"""The call record's tables: one row per upstream model call (``WireCall``) and the
content-addressed pieces its request is made of (``WireBlob``); see
``scroll_core.wire.encoding`` for the format."""

from __future__ import annotations

from django.db import models

__all__ = ["WireBlob", "WireCall"]


class WireBlob(models.Model):
    """One message, tool list, long field or whole body, stored once by its SHA-256."""

    digest = models.CharField(max_length=64, primary_key=True)
    body = models.TextField()

    class Meta:
        verbose_name = "record blob"


class WireCall(models.Model):
    """One model call of a session, ``index`` counting from 0 in the order calls ended.

    ``request`` holds the body's fields (messages as digests and runs copied from the call
    before; see ``scroll_core.wire.encoding``); ``body_bytes`` is the size of the body as
    sent, ``stored_bytes`` what storing it added (its row's request and the blobs that were
    new). ``view`` is the working view's section sizes when the call was built.
    """

    SOURCES = [("run", "run"), ("gateway", "gateway")]
    STATUSES = [("ok", "ok"), ("error", "error")]

    session_id = models.CharField(max_length=200)
    index = models.PositiveIntegerField()
    source = models.CharField(max_length=16, choices=SOURCES)
    model = models.CharField(max_length=200, blank=True)
    url = models.CharField(max_length=500, blank=True)
    turn = models.IntegerField(null=True, blank=True)
    step = models.IntegerField(null=True, blank=True)
    attempt = models.PositiveSmallIntegerField(default=1)
    sends = models.PositiveSmallIntegerField(default=0)
    started_at = models.DateTimeField()
    duration_ms = models.FloatField(default=0.0)
    status = models.CharField(max_length=8, choices=STATUSES, default="ok")
    error = models.TextField(blank=True)
    encoding = models.CharField(max_length=16)
    keyframe = models.BooleanField(default=False)
    request = models.JSONField()
    body_bytes = models.PositiveIntegerField(default=0)
    stored_bytes = models.PositiveIntegerField(default=0)
    reply = models.JSONField(null=True, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    view = models.JSONField(null=True, blank=True)
    trace_id = models.CharField(max_length=32, blank=True)
    span_id = models.CharField(max_length=16, blank=True, db_index=True)

    class Meta:
        ordering = ["session_id", "index"]
        constraints = [
            models.UniqueConstraint(fields=["session_id", "index"], name="record_call_unique")
        ]
        verbose_name = "recorded call"

    def __str__(self) -> str:
        return f"{self.session_id} call {self.index}"
