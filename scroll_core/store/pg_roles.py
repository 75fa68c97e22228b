"""The logins a deployment of the Event Log on PostgreSQL gives its processes, as SQL the
owner runs once after migrating (``manage.py scroll_eventlog roles``).

The migrations make the NOLOGIN roles (``scroll_writer``: read and append; ``scroll_reader``:
model SQL under row-level security); a deployment then needs a login of each: the writer for
``SCROLL_EVENTLOG_URL`` (every web process and worker), the reader for
``SCROLL_EVENTLOG_READER_URL``. The reader login must be a member of ``scroll_reader`` only.
Each statement can run again: an existing login is granted its role, not made twice.
"""

from __future__ import annotations

import re

from .pg_schema import READER_ROLE, WRITER_ROLE

__all__ = ["login_statements"]

_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def _login(login: str, role: str) -> str:
    if not _NAME.fullmatch(login):
        raise ValueError(
            f"{login!r} is not a plain PostgreSQL role name (lower-case letters, digits, _)"
        )
    if login in (WRITER_ROLE, READER_ROLE, "scroll_host_reader"):
        raise ValueError(f"{login!r} is one of the roles the migrations make; name a login")
    return (
        "DO $$ BEGIN\n"
        f"    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{login}') THEN\n"
        f"        CREATE ROLE {login} LOGIN;\n"
        "    END IF;\n"
        "END $$;\n"
        f"GRANT {role} TO {login};"
    )


def login_statements(*, writer: str | None, reader: str | None) -> list[str]:
    """SQL making ``writer`` a login of ``scroll_writer`` and ``reader`` one of
    ``scroll_reader`` (either may be None). Passwords are the operator's to set
    (``\\password NAME`` in psql), so none is ever printed."""
    if writer is not None and writer == reader:
        raise ValueError("the writer and the reader must be two logins")
    statements = []
    if writer is not None:
        statements.append(_login(writer, WRITER_ROLE))
    if reader is not None:
        statements.append(_login(reader, READER_ROLE))
    return statements
