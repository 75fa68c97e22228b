"""The console's ASGI app under daphne in a subprocess, over a temporary data folder: what the
benches that go through the real server (console, gateway) share."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from _common import REPO

__all__ = ["DaphneServer", "free_port"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DaphneServer:
    """daphne serving ``dashboard.asgi`` on 127.0.0.1:``port`` over ``data_dir``, with
    ``env`` added to the environment (no OTLP exporter: nothing leaves the machine)."""

    def __init__(self, data_dir: Path, port: int, env: dict[str, str] | None = None) -> None:
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.env = os.environ | {
            "SCROLL_DATA_DIR": str(data_dir),
            "SCROLL_STARTUP": "1",
            "SCROLL_DEMO": "0",
            "DJANGO_SETTINGS_MODULE": "dashboard.settings",
            **(env or {}),
        }
        for name in list(self.env):
            if name.startswith("OTEL_EXPORTER_OTLP"):
                del self.env[name]
        self.log = (data_dir / "server.log").open("wb")
        self.proc: subprocess.Popen[bytes] | None = None

    def manage(self, *args: str, timeout: float = 180) -> str:
        """Run ``manage.py args`` against the data folder (no server start-up work); its
        standard output."""
        out = subprocess.run(
            [sys.executable, str(REPO / "manage.py"), *args],
            env=self.env | {"SCROLL_STARTUP": "0"},
            check=True,
            timeout=timeout,
            capture_output=True,
            text=True,
        )
        return out.stdout

    def migrate(self) -> None:
        self.manage("migrate", "--noinput", "-v", "0")

    def start(self, timeout: float) -> None:
        daphne = shutil.which("daphne", path=str(Path(sys.executable).parent)) or "daphne"
        self.proc = subprocess.Popen(
            [daphne, "-b", "127.0.0.1", "-p", str(self.port), "dashboard.asgi:application"],
            cwd=REPO,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                raise RuntimeError(f"daphne exited with {code}; see {self.log.name}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"daphne did not listen within {timeout:g} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()
