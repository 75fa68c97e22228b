"""The first admin account: created with a generated password, never a fixed one."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model

__all__ = ["ADMIN_USERNAME", "ensure_admin", "password_file"]

ADMIN_USERNAME = "admin"


def password_file() -> Path:
    return Path(settings.SCROLL_DATA_DIR) / "admin_password"


def ensure_admin(*, announce: bool = False) -> str | None:
    """Create a superuser ``admin`` when there is none; return its new password (once).

    The password is written to ``<data>/admin_password`` (mode 0600) and printed when
    ``announce``; later starts only say where it is."""
    users = get_user_model()
    path = password_file()
    if users.objects.filter(is_superuser=True).exists():
        if announce:
            where = f"; its first password is in {path}" if path.exists() else ""
            print(f"  Log in with your admin account{where}.", flush=True)
        return None
    password = secrets.token_urlsafe(18)
    users.objects.create_superuser(ADMIN_USERNAME, email="", password=password)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(password + "\n")
    if announce:
        print(
            f"  Created admin user {ADMIN_USERNAME!r} with password {password}\n"
            f"  (shown once; also written to {path})",
            flush=True,
        )
    return password
