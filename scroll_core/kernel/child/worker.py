"""The kernel process: a persistent namespace that runs cells sent by the host.

Start-up order matters. Before this process image existed, ``launch`` applied the resource
limits and put the kernel-enforced layers on, then exec'd this interpreter with a report of
them as ``sys.argv[1]``. Here: take the protocol pipes off fds 0 and 1, read ``init``, start
the reader thread, remove what the audit hook cannot see, install the hook, and only then
accept cells. The reader thread also acts as the watchdog: when the host's end of the pipe
closes (the host exited or was killed) the kernel exits at once.
"""

from __future__ import annotations

import json
import linecache
import os
import queue
import resource
import signal
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable
from typing import Any

from . import capture, digest, guard, proxy, wire

MAX_TRACEBACK_CHARS = 3000
TRACEBACK_FRAMES = 12
MAX_MESSAGE_CHARS = 1000


class _State:
    running = False


def main() -> None:
    in_fd, out_fd = os.dup(0), os.dup(1)
    devnull = os.open("/dev/null", os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    reader = os.fdopen(in_fd, "rb", buffering=1 << 16)
    init = json.loads(reader.readline() or b"{}")
    # Each key lives on only inside the OpenSSL HMAC object its sealer keeps.
    seal_calls = wire.sealer(bytes.fromhex(str(init.pop("seal_calls", ""))), b"c")
    seal = wire.sealer(bytes.fromhex(str(init.pop("seal", ""))), b"r")
    report = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    Worker(init, reader, out_fd, report, seal_calls).serve(seal)


class Worker:
    def __init__(
        self,
        init: dict[str, Any],
        reader: Any,
        out_fd: int,
        report: dict[str, Any],
        seal_calls: Callable[[dict[str, Any]], bytes],
    ) -> None:
        self.init = init
        self.seal_calls = seal_calls
        self.report = report
        self.reader = reader
        self.out_fd = out_fd
        self.write_lock = threading.Lock()
        self.state = _State()
        self.commands: queue.Queue[dict[str, Any]] = queue.Queue()
        self.replies: queue.Queue[dict[str, Any]] = queue.Queue()
        self.main_ident = threading.get_ident()
        self.caller = proxy.HostCaller(self.send_call, self.replies)
        self.cells = 0
        self.cap = int(init.get("print_cap", 32000))
        self.cell_cpu = int(init.get("cell_cpu_seconds", 0))
        self.hidden: set[str] = set()
        module = types.ModuleType("__main__")
        sys.modules["__main__"] = module
        self.namespace: dict[str, Any] = module.__dict__
        self.namespace["__builtins__"] = __builtins__

    def send_call(self, message: dict[str, Any]) -> None:
        """A host-function call, on the call channel: the only op the host takes there."""
        with self.write_lock:  # sealed under the lock: sequence numbers follow the pipe
            wire.write_all(self.out_fd, self.seal_calls({**message, "op": "call"}))

    def serve(self, seal: Callable[[dict[str, Any]], bytes]) -> None:
        """The main loop. ``seal`` (the result channel's) stays a local of this frame."""

        def send(message: dict[str, Any]) -> None:
            with self.write_lock:
                wire.write_all(self.out_fd, seal(message))

        signal.signal(signal.SIGINT, self._on_sigint)
        # Past the file-size limit a write should fail with EFBIG, not kill the kernel.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        scratch = str(self.init.get("scratch") or os.getcwd())
        os.chdir(scratch)
        if self.report:
            layers = [str(x) for x in self.report.get("layers") or []]
            missing = {str(k): str(v) for k, v in (self.report.get("missing") or {}).items()}
        else:  # started without ``launch``: limits only, and say so
            self._apply_limits(self.init.get("limits") or {})
            layers, missing = [], {"kernel_layers": "started without the launch stage"}
        threading.Thread(target=self._read_loop, name="scroll-reader", daemon=True).start()
        self._strip_unaudited()
        self.denials: list[str] = []
        if self.init.get("guard", True):
            self.denials = guard.install(
                scratch,
                tuple(self.init.get("read_roots") or ()),
                self.main_ident,
                int(self.init.get("max_created_files", 256)),
                bool(self.init.get("allow_sqlite", False)),
            )
            layers.append("audit_hook")
        else:
            missing["audit_hook"] = "started without the audit hook"
        self._bind(list(self.init.get("host_functions") or []))
        send(
            {
                "op": "ready",
                "pid": os.getpid(),
                "python": sys.version.split()[0],
                "layers": layers,
                "missing": missing,
            }
        )
        while True:
            message = self.commands.get()
            op = message.get("op")
            if op == "exec":
                send(self._run_cell(message))
            elif op == "bind":
                self._bind(list(message.get("names") or []))
                send({"op": "bound", "id": message.get("id")})
            elif op == "ping":
                send({"op": "pong", "id": message.get("id")})
            elif op == "shutdown":
                os._exit(0)

    def _read_loop(self) -> None:
        try:
            for line in self.reader:
                message = json.loads(line)
                op = message.get("op")
                if op == "reply":
                    self.replies.put(message)
                elif op == "interrupt":
                    if self.state.running:
                        signal.pthread_kill(self.main_ident, signal.SIGINT)
                else:
                    self.commands.put(message)
        finally:
            # The host is gone (or sent garbage): a kernel never outlives its host.
            os._exit(0)

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self.state.running:
            raise KeyboardInterrupt

    def _apply_limits(self, limits: dict[str, Any]) -> None:
        names = {
            "memory_bytes": resource.RLIMIT_AS,
            "file_size_bytes": resource.RLIMIT_FSIZE,
            "processes": resource.RLIMIT_NPROC,
            "open_files": resource.RLIMIT_NOFILE,
            "cpu_seconds": resource.RLIMIT_CPU,
        }
        for key, which in names.items():
            value = limits.get(key)
            if value is not None:
                resource.setrlimit(which, (int(value), int(value)))

    def _strip_unaudited(self) -> None:
        # These reach other processes without raising any audit event.
        import _signal
        import posix

        for module, name in (
            (posix, "pidfd_open"),
            (os, "pidfd_open"),
            (_signal, "pidfd_send_signal"),
            (signal, "pidfd_send_signal"),
        ):
            if hasattr(module, name):
                delattr(module, name)

    def _bind(self, names: list[str]) -> None:
        self.hidden |= proxy.bind(self.namespace, self.caller, names)

    def _set_cell_cpu(self) -> None:
        if self.cell_cpu <= 0:
            return
        used = resource.getrusage(resource.RUSAGE_SELF)
        spent = int(used.ru_utime + used.ru_stime) + 1
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft = spent + self.cell_cpu
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))

    def _run_cell(self, message: dict[str, Any]) -> dict[str, Any]:
        self.cells += 1
        code = str(message.get("code", ""))
        filename = f"<cell-{self.cells}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        budget = capture.Budget(int(message.get("print_cap", self.cap)))
        out = capture.CappedStream(budget, "<stdout>")
        err = capture.CappedStream(budget, "<stderr>")
        denials_before = len(self.denials)
        calls_before = self.caller.calls
        status, error, limit = "ok", None, None
        saved = sys.stdout, sys.stderr
        self._set_cell_cpu()
        started = time.perf_counter()
        sys.stdout, sys.stderr = out, err
        try:
            compiled = compile(code, filename, "exec")
            self.state.running = True
            exec(compiled, self.namespace)
            self.state.running = False
        except KeyboardInterrupt as exc:
            self.state.running = False
            status, error = "timeout", _error(exc, "interrupted at the time limit")
        except MemoryError as exc:
            self.state.running = False
            status, limit = "error", "memory"
            error = _error(exc, "the kernel's memory limit was reached")
        except BaseException as exc:
            self.state.running = False
            denied = _is_denial(exc) or len(self.denials) > denials_before
            status, error = ("denied" if denied else "error"), _error(exc, None)
            if isinstance(exc, OSError) and exc.errno == 27:  # EFBIG
                limit = "file_size"
            elif isinstance(exc, OSError) and exc.errno in (28, 122):  # ENOSPC, EDQUOT
                limit = "scratch"
        finally:
            self.state.running = False
            sys.stdout, sys.stderr = saved
        duration = (time.perf_counter() - started) * 1000
        try:
            names = digest.digest(self.namespace, frozenset(self.hidden))
        except BaseException:
            names = {"variables": [], "omitted": 0, "failed": True}
        return {
            "op": "result",
            "id": message.get("id"),
            "status": status,
            "stdout": out.getvalue(),
            "stderr": err.getvalue(),
            "hidden_chars": budget.hidden,
            "error": error,
            "limit": limit,
            "digest": names,
            "denials": [str(d) for d in self.denials[denials_before:][:20]],
            "host_calls": self.caller.calls - calls_before,
            "duration_ms": duration,
        }


def _is_denial(exc: BaseException) -> bool:
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 20:
        if isinstance(current, guard.SandboxDenied):
            return True
        current = current.__cause__ or current.__context__
        seen += 1
    return False


def _error(exc: BaseException, note: str | None) -> dict[str, Any]:
    tb = exc.__traceback__
    # Drop the worker's own frames: the model only needs its cell's lines.
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell-"):
        tb = tb.tb_next
    lines = traceback.format_exception(type(exc), exc, tb, limit=-TRACEBACK_FRAMES)
    text = "".join(lines)
    if len(text) > MAX_TRACEBACK_CHARS:
        head = MAX_TRACEBACK_CHARS // 3
        tail = MAX_TRACEBACK_CHARS - head
        cut = len(text) - head - tail
        text = f"{text[:head]}\n... [{cut} characters of traceback cut] ...\n{text[-tail:]}"
    try:
        message = str(exc)
    except Exception:
        message = "<unprintable exception>"
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS] + " ..."
    return {"type": type(exc).__name__, "message": message, "traceback": text, "note": note}
