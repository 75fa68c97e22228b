"""The gateway's tables: agents' keys, stored responses and stored conversations.

Every model keeps the table it had when the console was one app (``db_table``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from dashboard.projects.models import AgentOwner, Project, default_project_id
from dashboard.runs.models import TuningProfile, cached_profile_id

__all__ = ["KEY_PREFIX", "GatewayKey", "StoredConversation", "StoredResponse", "hash_key"]

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
    project = models.ForeignKey(
        Project,
        on_delete=models.PROTECT,
        default=default_project_id,
        blank=True,
        related_name="gateway_keys",
        help_text="The project whose agents this key reaches: its agent must be one of them "
        "(blank: the default project).",
    )
    name = models.CharField(max_length=120, blank=True)
    prefix = models.CharField(max_length=32, unique=True, editable=False)
    key_hash = models.CharField(max_length=64, editable=False)
    profile = models.ForeignKey(
        TuningProfile,
        null=True,
        blank=True,
        default=cached_profile_id,
        on_delete=models.SET_NULL,
        related_name="gateway_keys",
        help_text="The knobs of this key's sessions. A new key starts with long-window-cache "
        "(cheaper behind a provider's prompt cache past a 40k window); blank: the default "
        "profile.",
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
        db_table = "dashboard_gatewaykey"
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
        if self.project_id is None:
            self.project = Project.objects.get(pk=default_project_id())
        owner = self.owning_project_id()
        if owner is not None and owner != self.project_id:
            errors["project"] = [
                f"Agent {self.agent_id!r} belongs to another project: a key reaches only its "
                "own project's agents."
            ]
        if errors:
            raise ValidationError(errors)

    def owning_project_id(self) -> int | None:
        """The project that owns this key's agent (None: no project claims it yet)."""
        return (
            AgentOwner.objects.filter(agent_id=self.agent_id)
            .values_list("project_id", flat=True)
            .first()
        )

    def save(self, *args: Any, **kwargs: Any) -> None:
        super().save(*args, **kwargs)
        # The key's agent joins the key's project (if no project owns it yet).
        AgentOwner.objects.get_or_create(
            agent_id=self.agent_id, defaults={"project_id": self.project_id}
        )

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
        if key.owning_project_id() not in (None, key.project_id):
            return None  # its agent was moved to another project: the key reaches it no more
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
        db_table = "dashboard_storedresponse"
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
        db_table = "dashboard_storedconversation"
        ordering = ["-created_at"]
        verbose_name = "stored conversation"

    def __str__(self) -> str:
        return f"{self.conversation_id} ({self.session_id})"
