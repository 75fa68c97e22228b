"""The console's ASGI app under an ASGI server in a subprocess, over a temporary data folder:
what the benches that go through the real server (console, gateway) share.

``server="daphne"`` (what ships: ``make run``, the deployment files) or ``"uvicorn"`` (with
``uvloop`` and ``httptools``; an option the gateway bench measures beside daphne).
"""

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

__all__ = ["SERVERS", "DaphneServer", "free_port"]

SERVERS = ("daphne", "uvicorn")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DaphneServer:
    """``server`` (daphne unless told) serving ``dashboard.asgi`` on 127.0.0.1:``port`` over
    ``data_dir``, with ``env`` added to the environment (no OTLP exporter: nothing leaves the
    machine), from the code of ``checkout`` (this one unless told: ``bench/gateway_ab.py``
    times another checkout's beside it)."""

    def __init__(
        self,
        data_dir: Path,
        port: int,
        env: dict[str, str] | None = None,
        *,
        server: str = "daphne",
        checkout: Path = REPO,
    ) -> None:
        if server not in SERVERS:
            raise ValueError(f"server must be one of {', '.join(SERVERS)}, not {server!r}")
        self.server = server
        self.checkout = checkout
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.env = os.environ | {
            "SCROLL_DATA_DIR": str(data_dir),
            "SCROLL_STARTUP": "1",
            "SCROLL_DEMO": "0",
            "DJANGO_SETTINGS_MODULE": "dashboard.settings",
            **({"PYTHONPATH": str(checkout)} if checkout != REPO else {}),
            **(env or {}),
        }
        for name in list(self.env):
            if name.startswith("OTEL_EXPORTER_OTLP"):
                del self.env[name]
        data_dir.mkdir(parents=True, exist_ok=True)
        self.log = (data_dir / f"server-{server}-{port}.log").open("wb")
        self.proc: subprocess.Popen[bytes] | None = None

    def manage(self, *args: str, timeout: float = 180) -> str:
        """Run ``manage.py args`` against the data folder (no server start-up work); its
        standard output."""
        out = subprocess.run(
            [sys.executable, str(self.checkout / "manage.py"), *args],
            env=self.env | {"SCROLL_STARTUP": "0"},
            cwd=self.checkout,
            check=True,
            timeout=timeout,
            capture_output=True,
            text=True,
        )
        return out.stdout

    def migrate(self) -> None:
        self.manage("migrate", "--noinput", "-v", "0")

    def start(self, timeout: float) -> None:
        self.proc = subprocess.Popen(
            self.command(),
            cwd=self.checkout,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                raise RuntimeError(f"{self.server} exited with {code}; see {self.log.name}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"{self.server} did not listen within {timeout:g} s")

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RuntimeError("the server is not started")
        return self.proc.pid

    def command(self) -> list[str]:
        exe = shutil.which(self.server, path=str(Path(sys.executable).parent)) or self.server
        app = "dashboard.asgi:application"
        if self.server == "uvicorn":
            # Django's ASGI app has no lifespan protocol; access logs off as daphne's go to
            # the log file anyway.
            return [exe, "--host", "127.0.0.1", "--port", str(self.port), "--loop", "uvloop",
                    "--http", "httptools", "--ws", "websockets", "--lifespan", "off",
                    "--no-access-log", app]  # fmt: skip
        return [exe, "-b", "127.0.0.1", "-p", str(self.port), app]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()
