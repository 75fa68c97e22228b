"""Scroll scaled out on loopback, without containers: the shape of ``deploy/scale.yml``.

daphne web processes and ``manage.py scroll_worker`` processes share one PostgreSQL database,
one Redis and one data folder, each a real process started here and stopped (with any kernel
it left behind) at the end. Used by ``tests/test_scaled_system.py`` and ``bench/scale.py``.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
USER = "operator"
START_TIMEOUT_S = 90.0

__all__ = ["Cluster", "Http", "drop_database", "fresh_database", "safe_id"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def safe_id(session_id: str) -> str:
    """The hash a session's live group and WebSocket path are named by."""
    return hashlib.sha1(session_id.encode("utf-8")).hexdigest()[:16]


def fresh_database(server_url: str) -> str:
    """A new, empty database on the server ``server_url`` names; its URL."""
    import psycopg

    name = f"scroll_{secrets.token_hex(5)}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urllib.parse.urlsplit(server_url)
    return urllib.parse.urlunsplit(parts._replace(path="/" + name))


def drop_database(url: str) -> None:
    """Remove a database ``fresh_database`` made (its connections are closed first)."""
    import psycopg

    parts = urllib.parse.urlsplit(url)
    name = parts.path.lstrip("/")
    admin = urllib.parse.urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Process:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    port: int = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class Cluster:
    """Processes over one data folder, database and channel layer.

    ``database_url`` None keeps the console database in SQLite under ``root``; ``redis_url``
    None keeps the in-memory channel layer (then only one process may serve and run).
    """

    root: Path
    database_url: str | None
    redis_url: str | None
    processes: int = 1
    workers: str = "external"
    lease_s: int = 3
    extra_env: dict[str, str] = field(default_factory=dict)
    started: list[Process] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.password = secrets.token_urlsafe(12)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SCROLL_", "OTEL_EXPORTER_OTLP", "DJANGO_"))
        }
        env.update(
            DJANGO_SETTINGS_MODULE="dashboard.settings",
            SCROLL_DATA_DIR=str(self.root),
            SCROLL_SECRET_KEY="cluster-" + secrets.token_hex(24),
            SCROLL_PROCESSES=str(self.processes),
            SCROLL_WORKERS=self.workers,
            SCROLL_WORKER_LEASE_S=str(self.lease_s),
            SCROLL_DEMO="0",
            SCROLL_KERNEL_POOL="0",
            PYTHONUNBUFFERED="1",
        )
        if self.database_url:
            env["SCROLL_DATABASE_URL"] = self.database_url
        if self.redis_url:
            env["SCROLL_REDIS_URL"] = self.redis_url
        env.update(self.extra_env)
        self.env = env

    # -- set-up ------------------------------------------------------------------------
    def manage(self, *args: str, timeout: float = 180) -> str:
        done = subprocess.run(
            [sys.executable, str(REPO / "manage.py"), *args],
            cwd=REPO,
            env={**self.env, "SCROLL_STARTUP": "0"},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed: {done.stderr[-2000:]}")
        return done.stdout

    def prepare(self) -> None:
        """The console database migrated, with the staff account the HTTP clients log in
        with: copied from one migrated once per process and backend (``_MigratedTemplate``),
        since migrating and creating the account took about 7 s per cluster, most of a
        gateway cluster test's set-up."""
        template = _MigratedTemplate.of(self.database_url)
        template.copy_to(self)
        self.password = template.password

    def migrate_and_login(self) -> None:
        """Migrate this cluster's console database and create its staff account."""
        self.manage("migrate", "--noinput", "-v", "0")
        create = (
            "from django.contrib.auth import get_user_model as g; "
            f"g().objects.create_superuser({USER!r}, 'op@example.invalid', {self.password!r})"
        )
        self.manage("shell", "-c", create)

    def _spawn(self, name: str, command: list[str], **env: str) -> Process:
        log = self.root / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                command,
                cwd=REPO,
                env={**self.env, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
                # Its own group: a worker's kernels go with it at the end (stop()).
                start_new_session=True,
            )
        process = Process(name, proc, log)
        self.started.append(process)
        return process

    def start_web(self, name: str, *, server: str = "daphne") -> Process:
        """``server`` (daphne, or uvicorn as docs/gateway.md offers it) serving the console;
        returns once it accepts connections."""
        port = _free_port()
        exe = shutil.which(server, path=str(Path(sys.executable).parent)) or server
        app = "dashboard.asgi:application"
        if server == "uvicorn":
            command = [exe, "--host", "127.0.0.1", "--port", str(port), "--loop", "uvloop",
                       "--http", "httptools", "--ws", "websockets", "--lifespan", "off",
                       app]  # fmt: skip
        else:
            command = [exe, "-b", "127.0.0.1", "-p", str(port), app]
        process = self._spawn(name, command, SCROLL_STARTUP="1")
        process.port = port
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if process.proc.poll() is not None:
                raise RuntimeError(f"{name} exited: {process.output()[-2000:]}")
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    return process
            time.sleep(0.1)
        raise RuntimeError(f"{name} did not listen within {START_TIMEOUT_S:g} s")

    def start_worker(self, name: str, *, slots: int = 4) -> Process:
        """``manage.py scroll_worker``; returns once it prints that it is claiming."""
        process = self._spawn(
            name,
            [sys.executable, str(REPO / "manage.py"), "scroll_worker", "--id", name,
             "--slots", str(slots), "--poll", "0.1"],
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if f"scroll_worker {name} ready" in process.output():
                return process
            if process.proc.poll() is not None:
                raise RuntimeError(f"{name} exited: {process.output()[-2000:]}")
            time.sleep(0.1)
        raise RuntimeError(f"{name} did not report ready within {START_TIMEOUT_S:g} s")

    def stop(self) -> None:
        """SIGTERM every process started here, then SIGKILL its group (kernels included)."""
        for process in self.started:
            if process.proc.poll() is None:
                process.proc.send_signal(signal.SIGTERM)
        for process in self.started:
            try:
                process.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.proc.kill()
                process.proc.wait(timeout=10)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.proc.pid, signal.SIGKILL)
        self.started.clear()

    # -- reading the shared state ------------------------------------------------------
    def query(self, code: str) -> Any:
        """Run ``code`` in ``manage.py shell`` against the cluster; it sets ``result``."""
        script = f"import json\n{code}\nprint('RESULT=' + json.dumps(result, default=str))"
        out = self.manage("shell", "-c", script)
        line = next(line for line in out.splitlines() if line.startswith("RESULT="))
        return json.loads(line[len("RESULT=") :])

    def stored_spans(self) -> int:
        """How many spans the console has stored (PostgreSQL only)."""
        import psycopg

        if not self.database_url:
            raise RuntimeError("stored_spans reads PostgreSQL; this cluster uses SQLite")
        with psycopg.connect(self.database_url) as conn:
            row = conn.execute("SELECT count(*) FROM dashboard_spanrecord").fetchone()
        return int(row[0]) if row else 0

    def runs(self) -> dict[str, dict[str, Any]]:
        """Every run's status, owner, attempts and turns (straight from PostgreSQL if used)."""
        fields = ("session_id", "status", "error", "worker", "attempts", "turns", "plan")
        if self.database_url:
            import psycopg

            with psycopg.connect(self.database_url) as conn:
                rows = conn.execute(f"SELECT {', '.join(fields)} FROM dashboard_runrecord")
                return {row[0]: dict(zip(fields, row, strict=True)) for row in rows}
        return {
            row["session_id"]: row
            for row in self.query(
                "from dashboard.runs.models import RunRecord\n"
                "result = list(RunRecord.objects.values("
                "'session_id', 'status', 'error', 'worker', 'attempts', 'turns', 'plan'))"
            )
        }


class _MigratedTemplate:
    """A console database migrated once, with its staff account, that each cluster of this
    process on the same backend starts from: a PostgreSQL database the cluster's own is
    recreated from (``CREATE DATABASE ... TEMPLATE``), or a SQLite file copied into the
    cluster's data folder. Migrations depend on the code alone, so the copy is what
    ``migrate`` would have made; one per xdist worker, since a template must have no other
    connection while it is copied."""

    _made: dict[str, _MigratedTemplate] = {}

    def __init__(self, server_url: str | None) -> None:
        self.server_url = server_url
        self.folder = Path(tempfile.mkdtemp(prefix="scroll-cluster-template-"))
        atexit.register(shutil.rmtree, self.folder, True)
        self.name = ""
        url = None
        if server_url is not None:
            worker = os.environ.get("PYTEST_XDIST_WORKER") or "main"
            self.name = f"scroll_console_template_{worker}_{os.getpid()}"
            admin = _on_database(server_url, "postgres")
            with psycopg_connect(admin) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.name}"')
                conn.execute(f'CREATE DATABASE "{self.name}"')
            atexit.register(_drop_quietly, admin, self.name)
            url = _on_database(server_url, self.name)
        maker = Cluster(self.folder / "data", url, None, workers="embedded")
        maker.root.mkdir(parents=True)
        maker.migrate_and_login()
        self.password = maker.password

    @classmethod
    def of(cls, database_url: str | None) -> _MigratedTemplate:
        key = "sqlite" if database_url is None else _on_database(database_url, "postgres")
        if key not in cls._made:
            cls._made[key] = cls(None if database_url is None else key)
        return cls._made[key]

    def copy_to(self, cluster: Cluster) -> None:
        if cluster.database_url is None:
            for made in (self.folder / "data").glob("console.sqlite3*"):
                shutil.copyfile(made, cluster.root / made.name)
            return
        name = urllib.parse.urlsplit(cluster.database_url).path.lstrip("/")
        with psycopg_connect(_on_database(cluster.database_url, "postgres")) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.name}"')


def psycopg_connect(url: str) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True)


def _on_database(url: str, name: str) -> str:
    """``url`` naming the database ``name`` on the same server, as the same login."""
    return urllib.parse.urlunsplit(urllib.parse.urlsplit(url)._replace(path="/" + name))


def _drop_quietly(admin_url: str, name: str) -> None:
    with contextlib.suppress(Exception), psycopg_connect(admin_url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def prepared(cluster: Cluster) -> Iterator[Cluster]:
    """``cluster`` with its data folder made, migrated and its login created; on the way out
    every process it started is stopped and its console database, if on PostgreSQL, dropped."""
    cluster.root.mkdir(parents=True, exist_ok=True)
    try:
        cluster.prepare()
        yield cluster
    finally:
        cluster.stop()
        if cluster.database_url:
            drop_database(cluster.database_url)


class Http:
    """A logged-in HTTP client of one web process (the login form, then the session cookie)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def cookie(self, name: str) -> str:
        return next((c.value or "" for c in self.jar if c.name == name), "")

    def request(self, path: str, data: dict[str, str] | None = None) -> tuple[str, str]:
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        req = urllib.request.Request(self.base + path, data=body)
        if body is not None:
            req.add_header("X-CSRFToken", self.cookie("csrftoken"))
            req.add_header("Referer", self.base + path)
        with self.opener.open(req, timeout=60) as response:
            return response.geturl(), response.read().decode("utf-8", "replace")

    def login(self, password: str) -> None:
        self.request("/login/")
        form = {"username": USER, "password": password}
        url, _ = self.request("/login/", {**form, "csrfmiddlewaretoken": self.cookie("csrftoken")})
        if "/login/" in url or not self.cookie("sessionid"):
            raise RuntimeError("logging in through the login form failed")

    def start_run(self, task: str) -> str:
        """Post the Runs form; the session id the console redirected to."""
        _, page = self.request("/runs/")
        profile = re.search(r'<select name="profile"><option value="(\d+)"', page)
        if profile is None:
            raise RuntimeError("the Runs page offers no profile")
        form = {
            "task": task,
            "profile": profile.group(1),
            "csrfmiddlewaretoken": self.cookie("csrftoken"),
        }
        url, body = self.request("/runs/", form)
        path = urllib.parse.urlsplit(url).path
        if not path.startswith("/sessions/"):
            raise RuntimeError(f"the run was not started: {body[-1500:]}")
        return urllib.parse.unquote(path[len("/sessions/") :].rstrip("/"))

    def ws_headers(self) -> dict[str, str]:
        cookies = f"sessionid={self.cookie('sessionid')}; csrftoken={self.cookie('csrftoken')}"
        return {"Cookie": cookies, "Origin": self.base}
