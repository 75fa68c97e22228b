"""`python manage.py scroll_eventlog migrate|roles`: set up the Event Log on PostgreSQL."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = (
        "Set up the Event Log on PostgreSQL, as its owner (--owner-url, or "
        "SCROLL_EVENTLOG_OWNER_URL, else SCROLL_EVENTLOG_URL). migrate: apply the numbered "
        "migrations it has not seen. roles: print the SQL that makes the writer login (for "
        "SCROLL_EVENTLOG_URL) and the reader login (for SCROLL_EVENTLOG_READER_URL); with "
        "--apply, run it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["migrate", "roles"])
        parser.add_argument("--owner-url", help="the owner's postgres:// URL")
        parser.add_argument("--writer", help="the login every web process and worker uses")
        parser.add_argument("--reader", help="the login ms.sql_query runs model SQL as")
        parser.add_argument("--apply", action="store_true", help="run the roles' SQL")
        parser.add_argument(
            "--writer-password-env",
            metavar="VAR",
            help="with --apply: set the writer's password from this environment variable",
        )
        parser.add_argument(
            "--reader-password-env",
            metavar="VAR",
            help="with --apply: set the reader's password from this environment variable",
        )

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        url = (
            options["owner_url"]
            or os.environ.get("SCROLL_EVENTLOG_OWNER_URL")
            or settings.SCROLL_EVENTLOG_URL
        )
        if action == "roles" and not options["apply"]:
            self.stdout.write("\n".join(self._roles(options)))
            return
        if action == "roles":
            self._roles(options)
            self._passwords(options)  # bad input is refused before the database is touched
        if not url or not url.startswith(("postgres://", "postgresql://")):
            raise CommandError(
                "the Event Log is not on PostgreSQL: give --owner-url postgres://owner@host/db "
                "(or set SCROLL_EVENTLOG_OWNER_URL or SCROLL_EVENTLOG_URL)"
            )
        import psycopg
        from psycopg import sql

        from scroll_core.store.pg_log import redact
        from scroll_core.store.pg_schema import migrate

        try:
            with psycopg.connect(url, autocommit=True) as db:
                if action == "migrate":
                    applied = migrate(db)
                    said = ", ".join(applied) if applied else "nothing: it is up to date"
                    self.stdout.write(self.style.SUCCESS(f"{redact(url)}: applied {said}"))
                    return
                if migrate(db):
                    self.stdout.write(f"{redact(url)}: migrated first")
                for statement in self._roles(options):
                    db.execute(statement)
                for login, var in self._passwords(options):
                    db.execute(
                        sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                            sql.Identifier(login), sql.Literal(os.environ[var])
                        )
                    )
        except psycopg.Error as exc:
            raise CommandError(f"{redact(url)}: {exc}".strip()) from exc
        names = ", ".join(n for n in (options["writer"], options["reader"]) if n)
        self.stdout.write(self.style.SUCCESS(f"{redact(url)}: logins ready: {names}"))

    def _passwords(self, options: dict[str, Any]) -> list[tuple[str, str]]:
        """(login, variable) for each password asked for; refused before anything runs
        when a variable is unset or empty, or names no login."""
        found = []
        for which in ("writer", "reader"):
            var = options[f"{which}_password_env"]
            if not var:
                continue
            if not options[which]:
                raise CommandError(f"--{which}-password-env needs --{which}")
            if not os.environ.get(var):
                raise CommandError(f"--{which}-password-env: ${var} is unset or empty")
            found.append((options[which], var))
        return found

    def _roles(self, options: dict[str, Any]) -> list[str]:
        if not options["writer"] and not options["reader"]:
            raise CommandError("name a login: --writer NAME and/or --reader NAME")
        try:
            return _statements(options["writer"], options["reader"])
        except ValueError as exc:
            raise CommandError(str(exc)) from exc


def _statements(writer: str | None, reader: str | None) -> list[str]:
    from scroll_core.store.pg_roles import login_statements

    return login_statements(writer=writer, reader=reader)
