"""A console in a process of its own (tests/console_child.py), for the tests that stop the
PostgreSQL server under it: pytest-django's process keeps its own test database, which a
test cannot stop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


class ConsoleProcess:
    """tests/console_child.py in a process of its own: ``ask`` sends one command and reads
    its JSON answer; ``close`` ends it and returns its log (stderr)."""

    def __init__(self, database_url: str, data: Path, **settings: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SCROLL_", "OTEL_"))}
        env.update(
            SCROLL_DATABASE_URL=database_url,
            SCROLL_DATA_DIR=str(data),
            SCROLL_SECRET_KEY="x" * 50,
            DJANGO_SETTINGS_MODULE="dashboard.settings",
            PYTHONPATH=str(REPO),
            **settings,
        )
        self.log = data / "child.log"
        with self.log.open("w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, str(REPO / "tests" / "console_child.py")],
                cwd=REPO, env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=stderr,
            )  # fmt: skip
        assert self._answer() == {"ready": True}

    def _answer(self) -> dict:
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        assert line, f"the console process ended: {self.log.read_text()[-2000:]}"
        return json.loads(line)

    def ask(self, command: str) -> dict:
        self.proc.stdin.write(command + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        return self._answer()

    def close(self) -> str:
        """End the process (it ends when its stdin does); its log."""
        if self.proc.poll() is None:
            self.proc.stdin.close()  # type: ignore[union-attr]
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()  # type: ignore[union-attr]
        return self.log.read_text()
