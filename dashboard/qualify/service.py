"""Running a qualification: the model it names (the rule-based baseline by its own name, else
the upstream URL in the chosen wire format, its key read from the named environment
variable), the suite in a temporary folder, the scorecard stored. A queued qualification is
claimed with one conditional update, so two processes never run the same one."""

from __future__ import annotations

import os
import re
import tempfile
import threading
from typing import Any

from django.db import close_old_connections
from django.utils import timezone

from dashboard.runs.models import TuningProfile
from scroll_core.errors import ConfigError, ScrollError
from scroll_core.models.policy import POLICY_NAME, PolicyModel
from scroll_core.qualify import APIS, run_suite, upstream_model
from scroll_core.qualify.scorecard import Scorecard

from .models import Qualification

__all__ = ["create", "execute", "start_in_background"]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")


def create(
    *, model: str, upstream: str = "", api: str = "openai", key_env: str = "",
    profile: str = "", user: Any = None,
) -> Qualification:  # fmt: skip
    """A queued qualification, its input checked first (a clear error, nothing stored)."""
    model = model.strip()
    if not model:
        raise ConfigError("a model name is required")
    if api not in APIS:
        raise ConfigError(f"unknown api {api!r}: expected one of {', '.join(APIS)}")
    if model != POLICY_NAME and not upstream.strip().startswith(("http://", "https://")):
        raise ConfigError(
            f"model {model!r} needs an upstream http(s) URL (only {POLICY_NAME!r} runs without)"
        )
    if key_env and not _ENV_NAME.fullmatch(key_env):
        # Never echoed: an operator may have pasted the key itself here.
        raise ConfigError(
            "the key variable must name an environment variable (letters, digits and _), "
            "not hold the key"
        )
    if key_env and key_env not in os.environ:
        raise ConfigError(f"the environment variable {key_env!r} is not set on the server")
    if profile and not TuningProfile.objects.filter(name=profile).exists():
        raise ConfigError(f"no tuning profile named {profile!r}")
    return Qualification.objects.create(
        model_name=model, upstream=upstream.strip(), api=api, key_env=key_env,
        profile=profile, created_by=user if getattr(user, "is_authenticated", False) else None,
    )  # fmt: skip


def _claim(pk: int) -> bool:
    return (
        Qualification.objects.filter(pk=pk, status=Qualification.QUEUED).update(
            status=Qualification.RUNNING
        )
        == 1
    )


def execute(qualification: Qualification, **suite_options: Any) -> Scorecard | None:
    """Run a queued qualification and store its scorecard (or its error); None when another
    process had claimed it."""
    if not _claim(qualification.pk):
        return None
    qualification.refresh_from_db()
    model: Any = None
    try:
        if qualification.model_name == POLICY_NAME and not qualification.upstream:
            model = PolicyModel()
        else:
            key = os.environ.get(qualification.key_env) if qualification.key_env else None
            model = upstream_model(
                qualification.upstream, qualification.model_name,
                api=qualification.api, api_key=key,
            )  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="scroll-qualify-") as workdir:
            card = run_suite(
                model, workdir, api=qualification.api, upstream=qualification.upstream,
                **suite_options,
            )  # fmt: skip
    except (ScrollError, OSError) as exc:
        qualification.status = Qualification.FAILED
        qualification.error = str(exc)[:4000]
        qualification.finished_at = timezone.now()
        qualification.save()
        return None
    finally:
        close = getattr(model, "close", None)
        if close is not None:
            close()
    qualification.record(card)
    return card


def start_in_background(qualification: Qualification) -> threading.Thread:
    """Run it on a thread of this process (the console's embedded default)."""

    def work() -> None:
        close_old_connections()
        try:
            execute(qualification)
        finally:
            close_old_connections()

    thread = threading.Thread(target=work, name=f"qualify-{qualification.pk}", daemon=True)
    thread.start()
    return thread
