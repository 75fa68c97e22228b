"""Throwaway PostgreSQL, Redis and Arize Phoenix servers on loopback, for the tests that need
real ones.

Each server runs from Debian's packages (``postgresql``, ``redis-server``) in a temporary
folder, listens on 127.0.0.1 on a free port and is stopped and removed at the end. As root
(CI runs as root) PostgreSQL runs as the unprivileged ``postgres`` user, since it refuses
to run as root. ``SCROLL_TEST_POSTGRES_URL`` / ``SCROLL_TEST_REDIS_URL`` point the tests at
servers started elsewhere instead.

Arize Phoenix runs from a virtualenv of its own, ``.phoenix-venv/`` at the top of the
checkout (``make phoenix`` makes it; ``.ci/run`` does so beside the other setup), in a
temporary working folder with everything that would reach the network turned off;
``SCROLL_TEST_PHOENIX`` names another ``phoenix`` executable.

Fixtures that use these call :func:`unavailable`: with ``CI=true`` a server that cannot
start fails the run; elsewhere the test skips and says why.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = [
    "ServerControl",
    "ServerUnavailable",
    "in_ci",
    "phoenix",
    "postgres",
    "redis",
    "unavailable",
]

START_TIMEOUT_S = 30.0
# Phoenix migrates a fresh database and imports a large stack first: 36 s on 2 busy cores.
PHOENIX_START_TIMEOUT_S = 240.0
PHOENIX = Path(__file__).resolve().parents[1] / ".phoenix-venv" / "bin" / "phoenix"


class ServerUnavailable(RuntimeError):
    """A test server could not be started; the message says which and why."""


class ServerControl:
    """Stops a server this module started and starts it again on the same port and data,
    for the fault tests: ``launch`` starts its process, ``ready`` waits until it serves."""

    def __init__(
        self,
        launch: Callable[[], subprocess.Popen[bytes]],
        ready: Callable[[subprocess.Popen[bytes]], None],
    ) -> None:
        self.launch, self.ready = launch, ready
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self.proc is None:
            self.proc = self.launch()
            self.ready(self.proc)

    def stop(self, sig: int = signal.SIGINT) -> None:
        """Stop the server (SIGINT: PostgreSQL's fast shutdown, ``pg_ctl stop -m fast``)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass(frozen=True)
class Server:
    url: str
    host: str
    port: int
    # Stop and start it again (a server this module started); None for one from elsewhere.
    control: ServerControl | None = None


def in_ci() -> bool:
    """Whether ``CI`` says this is a CI run (``true``, ``1`` or ``yes``, in any case), as
    ``.ci/run`` and ``tests/conftest.py`` read it."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def unavailable(what: str, why: str) -> None:
    """Fail under ``CI=true`` (a component CI must have), skip elsewhere."""
    message = f"{what} is not available: {why}"
    if in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _postgres_bindir() -> Path:
    found = shutil.which("pg_config")
    if found:
        out = subprocess.run([found, "--bindir"], capture_output=True, text=True, check=False)
        candidate = Path(out.stdout.strip())
        if (candidate / "initdb").exists():
            return candidate
    for bindir in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(bindir, "initdb").exists():
            return Path(bindir)
    raise ServerUnavailable("PostgreSQL binaries not found (apt-get install postgresql)")


def _as_user() -> dict[str, object]:
    """Popen arguments that drop to ``postgres`` when running as root."""
    if os.geteuid() != 0:
        return {}
    try:
        entry = pwd.getpwnam("postgres")
    except KeyError as exc:
        raise ServerUnavailable("running as root and no 'postgres' user to run as") from exc
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerUnavailable(f"{what} exited with {proc.returncode}: {_tail(log)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise ServerUnavailable(f"{what} did not listen on 127.0.0.1:{port}: {_tail(log)}")


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-800:]
    except OSError:
        return "(no log)"


@contextmanager
def postgres(settings: Mapping[str, str] | None = None, *, own: bool = False) -> Iterator[Server]:
    """A fresh PostgreSQL cluster with a database ``scroll`` owned by superuser ``scroll``;
    ``settings`` are server parameters on top of the test ones (a bench sizes its buffers).
    ``own``: always start one here (a fault test stops it), even when
    ``SCROLL_TEST_POSTGRES_URL`` names a shared one."""
    external = os.environ.get("SCROLL_TEST_POSTGRES_URL")
    if external and not own:
        yield Server(external, "", 0)
        return
    bindir = _postgres_bindir()
    user = _as_user()
    root = Path(tempfile.mkdtemp(prefix="scroll-pg-"))
    root.chmod(0o755)
    data, sockets, log = root / "data", root / "sockets", root / "postgres.log"
    for folder in (data, sockets):
        folder.mkdir()
    log.touch()
    if user:
        for path in (data, sockets, log):
            os.chown(path, int(user["user"]), int(user["group"]))  # type: ignore[call-overload]
    control: ServerControl | None = None
    try:
        init = subprocess.run(
            [str(bindir / "initdb"), "-D", str(data), "-U", "scroll", "-A", "trust", "--no-sync"],
            capture_output=True,
            check=False,
            **user,  # type: ignore[arg-type]
        )
        if init.returncode != 0:
            raise ServerUnavailable(f"initdb failed: {init.stderr.decode(errors='replace')}")
        port = _free_port()

        def launch() -> subprocess.Popen[bytes]:
            with log.open("ab") as out:
                return subprocess.Popen(
                    [
                        str(bindir / "postgres"),
                        "-D", str(data),
                        "-h", "127.0.0.1",
                        "-p", str(port),
                        "-k", str(sockets),
                        "-c", "fsync=off",
                        "-c", "synchronous_commit=off",
                        "-c", "full_page_writes=off",
                        "-c", "max_connections=200",
                        *(arg for k, v in (settings or {}).items() for arg in ("-c", f"{k}={v}")),
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    **user,  # type: ignore[arg-type]
                )  # fmt: skip

        def ready(proc: subprocess.Popen[bytes]) -> None:
            _wait_for_port(port, proc, "PostgreSQL", log)
            _wait_for_sessions(bindir, port)

        control = ServerControl(launch, ready)
        control.proc = launch()
        _wait_for_port(port, control.proc, "PostgreSQL", log)
        createdb = [str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "scroll"]
        # The port opens before the server accepts sessions ("the database system is starting
        # up"): retry until createdb gets through or the start-up time is over.
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            created = subprocess.run([*createdb, "scroll"], capture_output=True, check=False)
            if created.returncode == 0:
                break
            error = created.stderr.decode(errors="replace")
            if "starting up" not in error or time.monotonic() > deadline:
                raise ServerUnavailable(f"createdb failed: {error}")
            time.sleep(0.1)
        yield Server(f"postgres://scroll@127.0.0.1:{port}/scroll", "127.0.0.1", port, control)
    finally:
        if control is not None:
            control.stop(signal.SIGTERM)
        shutil.rmtree(root, ignore_errors=True)


def _wait_for_sessions(bindir: Path, port: int) -> None:
    """Wait until a restarted server accepts sessions (the port opens while it recovers)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    ready = [str(bindir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port), "-U", "scroll"]
    while subprocess.run(ready, check=False).returncode != 0:
        if time.monotonic() > deadline:
            raise ServerUnavailable("PostgreSQL did not accept sessions after its restart")
        time.sleep(0.05)


@contextmanager
def redis(*, own: bool = False) -> Iterator[Server]:
    """A fresh Redis server with no persistence. ``own``: always start one here (a fault test
    stops it and starts it again, empty, as a restart without persistence leaves it), even
    when ``SCROLL_TEST_REDIS_URL`` names a shared one."""
    external = os.environ.get("SCROLL_TEST_REDIS_URL")
    if external and not own:
        yield Server(external, "", 0)
        return
    exe = shutil.which("redis-server")
    if not exe:
        raise ServerUnavailable("redis-server not found (apt-get install redis-server)")
    root = Path(tempfile.mkdtemp(prefix="scroll-redis-"))
    log = root / "redis.log"
    port = _free_port()

    def launch() -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            return subprocess.Popen(
                [
                    exe, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(root),
                    "--save", "", "--appendonly", "no", "--protected-mode", "yes",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )  # fmt: skip

    control = ServerControl(launch, lambda proc: _wait_for_port(port, proc, "Redis", log))
    try:
        control.start()
        yield Server(f"redis://127.0.0.1:{port}/0", "127.0.0.1", port, control)
    finally:
        control.stop(signal.SIGTERM)
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def phoenix() -> Iterator[Server]:
    """A fresh Arize Phoenix on loopback: its URL takes OTLP/HTTP at ``/v1/traces`` and
    answers its REST API under ``/v1``. Ready when ``/healthz`` answers."""
    exe = Path(os.environ.get("SCROLL_TEST_PHOENIX") or PHOENIX)
    if not exe.is_file():
        raise ServerUnavailable(f"{exe} not found (make phoenix installs it)")
    root = Path(tempfile.mkdtemp(prefix="scroll-phoenix-"))
    log = root / "phoenix.log"
    port, grpc_port = _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))}
    env.update(
        PHOENIX_WORKING_DIR=str(root / "work"),
        PHOENIX_HOST="127.0.0.1",
        PHOENIX_PORT=str(port),
        PHOENIX_GRPC_PORT=str(grpc_port),
        # Nothing that would reach the network: usage telemetry, the docs assistant's MCP
        # server, the code sandboxes' downloads.
        PHOENIX_TELEMETRY_ENABLED="false",
        PHOENIX_ALLOW_EXTERNAL_RESOURCES="false",
        PHOENIX_DISABLE_AGENT_ASSISTANT="true",
        PHOENIX_ALLOWED_SANDBOX_PROVIDERS="NONE",
    )
    url = f"http://127.0.0.1:{port}"
    proc: subprocess.Popen[bytes] | None = None
    try:
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [str(exe), "serve"], stdout=out, stderr=subprocess.STDOUT, env=env,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + PHOENIX_START_TIMEOUT_S
        while not _healthy(f"{url}/healthz"):
            if proc.poll() is not None:
                raise ServerUnavailable(f"Phoenix exited with {proc.returncode}: {_tail(log)}")
            if time.monotonic() > deadline:
                raise ServerUnavailable(
                    f"Phoenix was not healthy after {PHOENIX_START_TIMEOUT_S:.0f} s: {_tail(log)}"
                )
            time.sleep(0.25)
        yield Server(url, "127.0.0.1", port)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(root, ignore_errors=True)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def main(argv: list[str]) -> int:
    """``python -m tests.servers [--] COMMAND...``: run COMMAND with both servers up.

    COMMAND sees ``SCROLL_DATABASE_URL`` and ``SCROLL_REDIS_URL`` (settings put the console
    database on PostgreSQL and the channel layer on Redis) and ``SCROLL_TEST_*_URL`` (the
    fixtures reuse these servers). This is how CI runs the suite a second time: pytest-django
    needs the database URL when settings are imported, before any fixture could start one.
    A server that cannot start fails under ``CI=true``; elsewhere this warns and exits 0.
    """
    command = argv[1:] if argv[:1] == ["--"] else argv
    if not command:
        print("usage: python -m tests.servers [--] COMMAND [ARG...]", file=sys.stderr)
        return 2
    try:
        with postgres() as pg, redis() as rd:
            urls = {
                "SCROLL_DATABASE_URL": pg.url,
                "SCROLL_REDIS_URL": rd.url,
                "SCROLL_TEST_POSTGRES_URL": pg.url,
                "SCROLL_TEST_REDIS_URL": rd.url,
            }
            for name, url in urls.items():
                print(f"{name}={url}", flush=True)
            return subprocess.call(command, env={**os.environ, **urls})
    except ServerUnavailable as exc:
        if in_ci():
            print(f"!! CI=true: PostgreSQL/Redis could not start: {exc}", file=sys.stderr)
            return 1
        print(f"!! WARNING: skipped the PostgreSQL/Redis pass: {exc}", file=sys.stderr)
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
