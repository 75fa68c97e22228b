"""The host-side handle on one kernel process.

``Kernel.execute`` sends a cell, serves the host-function calls the cell makes, and waits
for the result until the timeout. At the timeout it asks the kernel to interrupt the cell;
if the cell has not stopped after the grace period the process is killed and a fresh one
started, and the result says the variables were lost.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any

from ..errors import KernelError, KernelProtocolError
from ..telemetry import span, tool_span
from .child.wire import write_all
from .config import KernelConfig
from .hostfns import HostFunctions
from .protocol import LineReader, decode_message, encode
from .results import ExecError, ExecResult, ExecStatus, NamespaceDigest, truncation_notice
from .sandbox import (
    TIER_STRENGTH,
    LaunchSpec,
    launch_spec,
    layers_of,
    resolve_tier,
    sandbox_attributes,
)
from .spawner import spawn

__all__ = ["Kernel", "KernelStatus"]

_LIVE: weakref.WeakSet[Kernel] = weakref.WeakSet()
_SIGNAL_LIMITS = {signal.SIGXCPU: "cpu", signal.SIGXFSZ: "file_size"}


@dataclass(frozen=True)
class KernelStatus:
    tier: str
    strength: str
    alive: bool
    pid: int | None
    cells: int
    restarts: int
    started_at: float
    last_used: float
    layers: tuple[str, ...] = ()  # sandbox layers in force, e.g. "seccomp", "landlock:7"
    missing_layers: tuple[str, ...] = ()  # "name: why" for each layer this host lacks


class Kernel:
    """A persistent, sandboxed Python process; see the module docstring."""

    def __init__(
        self,
        config: KernelConfig | None = None,
        *,
        sandbox: str | None = None,
        host_functions: Mapping[str, Callable[..., Any]] | None = None,
    ) -> None:
        self.config = config or KernelConfig.from_env()
        self.tier = resolve_tier(sandbox or self.config.sandbox, self.config.fallback)
        self.layers: tuple[str, ...] = ()
        self.missing_layers: tuple[str, ...] = ()
        self.host_functions = HostFunctions(host_functions)
        self._lock = threading.RLock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._spec: LaunchSpec | None = None
        self._reader: LineReader | None = None
        self._stderr_tail: deque[bytes] = deque(maxlen=16)
        self._next_id = 0
        self.cells = 0
        self.restarts = 0
        self.started_at = 0.0
        self.last_used = time.monotonic()
        self.cold_start_ms = 0.0
        self.busy = False
        self._start()
        _LIVE.add(self)

    @staticmethod
    def resolve(config: KernelConfig) -> str:
        """The tier a kernel with ``config`` would run in (raises if bwrap is required)."""
        return resolve_tier(config.sandbox, config.fallback)

    # -- lifecycle ------------------------------------------------------------------------

    def _start(self) -> None:
        began = time.perf_counter()
        spec = launch_spec(self.tier, self.config)
        proc = spawn(spec.argv, spec.env, spec.cwd, spec.user)
        self._spec, self._proc = spec, proc
        assert proc.stdout is not None and proc.stderr is not None
        self._reader = LineReader(proc.stdout.fileno())
        self._stderr_tail = deque(maxlen=16)
        threading.Thread(target=_drain, args=(proc.stderr, self._stderr_tail), daemon=True).start()
        init = {
            "op": "init",
            "scratch": spec.scratch,
            "read_roots": list(spec.read_roots),
            "allow_sqlite": spec.allow_sqlite,
            "limits": self.config.limits(),
            "print_cap": self.config.print_cap,
            "cell_cpu_seconds": self.config.cell_cpu_s,
            "max_created_files": self.config.max_created_files,
            "host_functions": self.host_functions.names(),
            **spec.child_init(),
        }
        try:
            self._send(init)
            ready = self._wait_for("ready", time.monotonic() + self.config.start_timeout_s)
        except (KernelError, EOFError, OSError) as exc:
            self._kill()
            raise KernelError(f"kernel ({self.tier}) did not start: {exc}{self._diag()}") from None
        if ready is None:
            self._kill()
            raise KernelError(f"kernel ({self.tier}) did not start in time{self._diag()}")
        self.layers, self.missing_layers = layers_of(ready)
        self.started_at = time.time()
        self.cold_start_ms = (time.perf_counter() - began) * 1000

    def restart(self) -> None:
        """Replace the process with a fresh one; every variable is lost."""
        with (
            self._lock,
            span(
                "scroll.kernel.restart", kernel_tier=self.tier, **self.sandbox_attributes()
            ) as traced,
        ):
            old_pid = self.pid
            self._kill()
            self.restarts += 1
            self._start()
            traced.set(restarts=self.restarts, old_pid=old_pid, kernel_pid=self.pid)

    def close(self) -> None:
        with self._lock:
            proc = self._proc
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(OSError):
                    self._send({"op": "shutdown"})
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=0.5)
            self._kill()
        _LIVE.discard(self)

    def __enter__(self) -> Kernel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def status(self) -> KernelStatus:
        return KernelStatus(
            tier=self.tier,
            strength=TIER_STRENGTH[self.tier],
            alive=self.alive,
            pid=self.pid,
            cells=self.cells,
            restarts=self.restarts,
            started_at=self.started_at,
            last_used=self.last_used,
            layers=self.layers,
            missing_layers=self.missing_layers,
        )

    def sandbox_attributes(self) -> dict[str, Any]:
        """``scroll.sandbox.*`` span attributes: the tier, its strength and its layers."""
        return sandbox_attributes(self.tier, self.layers, self.missing_layers)

    # -- host functions -------------------------------------------------------------------

    def register(self, functions: Mapping[str, Callable[..., Any]]) -> None:
        """Expose more host functions; they appear in the kernel before the next cell."""
        with self._lock:
            for name, fn in functions.items():
                self.host_functions.register(name, fn)
            self._next_id += 1
            self._send({"op": "bind", "id": self._next_id, "names": sorted(functions)})
            if self._wait_for("bound", time.monotonic() + self.config.start_timeout_s) is None:
                raise KernelError("kernel did not acknowledge new host functions")

    def ping(self) -> float:
        """Round trip of an empty message, in milliseconds."""
        with self._lock:
            began = time.perf_counter()
            self._next_id += 1
            self._send({"op": "ping", "id": self._next_id})
            if self._wait_for("pong", time.monotonic() + 5) is None:
                raise KernelError("kernel did not answer a ping")
            return (time.perf_counter() - began) * 1000

    # -- cells ----------------------------------------------------------------------------

    def execute(
        self,
        code: str,
        timeout: float | None = None,
        *,
        tool: str = "repl_exec",
        tool_call_id: str | None = None,
        print_cap: int | None = None,
    ) -> ExecResult:
        """Run ``code`` in the persistent namespace and return what it printed.

        ``print_cap`` overrides the configured cap for this cell, so a profile change
        reaches a kernel that is already running.

        ``tool`` and ``tool_call_id`` name the model's tool call in telemetry: the cell is
        an ``execute_tool {tool}`` span and the ``ms`` calls it makes are its children."""
        if not isinstance(code, str):
            raise TypeError("code must be a str")
        with self._lock:
            self.last_used = time.monotonic()
            self.cells += 1
            self.busy = True
            try:
                with tool_span(
                    tool,
                    tool_call_id=tool_call_id,
                    kernel_tier=self.tier,
                    code_chars=len(code),
                    **self.sandbox_attributes(),
                ) as traced:
                    cap = self.config.print_cap if print_cap is None else max(1, int(print_cap))
                    result = self._execute(
                        code, self.config.timeout_s if timeout is None else timeout, cap
                    )
                    if traced.recording:
                        _trace_result(traced, result, self.pid)
                    return result
            finally:
                self.busy = False
                self.last_used = time.monotonic()

    def _execute(self, code: str, timeout: float, print_cap: int) -> ExecResult:
        began = time.perf_counter()
        if not self.alive:
            self.restart()
            lost = self._lost("the kernel had died before this cell; it was restarted")
        else:
            lost = None
        self._next_id += 1
        exec_id = self._next_id
        try:
            self._send({"op": "exec", "id": exec_id, "code": code, "print_cap": print_cap})
        except OSError:
            return self._died(began, None)
        deadline = time.monotonic() + timeout
        interrupted = False
        while True:
            try:
                line = self._reader_or_raise().readline(deadline)
            except EOFError:
                return self._died(began, None)
            except KernelProtocolError as exc:
                return self._died(began, str(exc))
            if line is None:
                if not interrupted:
                    interrupted = True
                    with contextlib.suppress(OSError):
                        self._send({"op": "interrupt"})
                    deadline = time.monotonic() + self.config.grace_s
                    continue
                self.restart()
                return self._result(
                    "timeout",
                    began,
                    variables_lost=True,
                    limit="timeout",
                    notice=(
                        f"the cell ran past {timeout:g}s and did not stop when interrupted; "
                        "the kernel was restarted and all variables were lost"
                    ),
                )
            try:
                message = decode_message(line)
            except KernelProtocolError as exc:
                return self._died(began, str(exc))
            if message["op"] == "call":
                with contextlib.suppress(OSError):
                    self._send(self.host_functions.serve(message))
                continue
            if message["op"] == "result" and message.get("id") == exec_id:
                result = self._from_child(message, began, timeout, print_cap)
                if lost is not None:
                    return _with(result, variables_lost=True, notice=lost)
                return result
            # A stale pong or a forged message: ignore it, the cell is still running.

    def _from_child(
        self, message: dict[str, Any], began: float, timeout: float, print_cap: int
    ) -> ExecResult:
        raw_status = message.get("status")
        status: ExecStatus = "error"
        if raw_status in ("ok", "timeout", "denied"):
            status = raw_status
        hidden = _int(message.get("hidden_chars"))
        stdout = _text(message.get("stdout"))
        if hidden:
            stdout += truncation_notice(hidden, print_cap)
        error = message.get("error")
        exec_error = None
        if isinstance(error, dict):
            exec_error = ExecError(
                type=_text(error.get("type"))[:200],
                message=_text(error.get("message"))[:2000],
                traceback=_text(error.get("traceback"))[:4000],
                note=_text(error.get("note")) or None,
            )
        notice = None
        limit = message.get("limit") if isinstance(message.get("limit"), str) else None
        if status == "timeout":
            notice = f"the cell was interrupted after {timeout:g}s; variables are kept"
            limit = "timeout"
        elif limit == "memory":
            notice = f"the kernel's memory limit ({self.config.memory_mb} MB) was reached"
        elif limit == "file_size":
            notice = f"the kernel's file-size limit ({self.config.file_size_mb} MB) was reached"
        digest = message.get("digest")
        if not isinstance(digest, dict):
            digest = {}
        variables = digest.get("variables")
        if not isinstance(variables, list):
            variables = []
        return ExecResult(
            status=status,
            stdout=stdout,
            stderr=_text(message.get("stderr")),
            truncated=hidden > 0,
            hidden_chars=hidden,
            error=exec_error,
            duration_ms=(time.perf_counter() - began) * 1000,
            digest=NamespaceDigest(
                variables=[v for v in variables[:100] if isinstance(v, dict)],
                omitted=_int(digest.get("omitted")),
            ),
            tier=self.tier,
            limit=limit,
            notice=notice,
            denials=[_text(d)[:500] for d in (message.get("denials") or [])[:20]],
            host_calls=_int(message.get("host_calls")),
        )

    def _died(self, began: float, protocol: str | None) -> ExecResult:
        proc = self._proc
        code = None
        if proc is not None:
            if protocol is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=1.0)
            code = proc.poll()
        limit = None
        if code is not None and code > 128 and self.tier == "bwrap":
            # bwrap reports a child killed by signal N as exit status 128 + N.
            with contextlib.suppress(ValueError):
                code = -signal.Signals(code - 128).value
        if protocol is not None:
            reason = f"the kernel broke the protocol ({protocol})"
        elif code is not None and code < 0 and -code in _SIGNAL_LIMITS:
            limit = _SIGNAL_LIMITS[signal.Signals(-code)]
            reason = f"the kernel hit its {limit} limit ({signal.Signals(-code).name})"
        elif code is not None and code < 0:
            reason = f"the kernel was killed by {signal.Signals(-code).name}"
        else:
            reason = f"the kernel exited (code {code})"
        self.restart()
        return self._result(
            "killed",
            began,
            variables_lost=True,
            limit=limit,
            notice=f"{reason}; it was restarted and all variables were lost",
        )

    def _result(self, status: ExecStatus, began: float, **kw: Any) -> ExecResult:
        return ExecResult(
            status=status, duration_ms=(time.perf_counter() - began) * 1000, tier=self.tier, **kw
        )

    def _lost(self, why: str) -> str:
        return f"{why}; all variables were lost"

    # -- plumbing -------------------------------------------------------------------------

    def _reader_or_raise(self) -> LineReader:
        if self._reader is None:
            raise KernelError("kernel is not running")
        return self._reader

    def _send(self, message: dict[str, Any]) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None:
            raise OSError("kernel is not running")
        write_all(proc.stdin.fileno(), encode(message))

    def _wait_for(self, op: str, deadline: float) -> dict[str, Any] | None:
        while True:
            line = self._reader_or_raise().readline(deadline)
            if line is None:
                return None
            message = decode_message(line)
            if message["op"] == op:
                return message

    def _kill(self) -> None:
        proc = self._proc
        if proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        self._proc = None
        self._reader = None
        if self._spec is not None and self._spec.host_scratch:
            shutil.rmtree(self._spec.host_scratch, ignore_errors=True)
        self._spec = None

    def _diag(self) -> str:
        tail = b"".join(self._stderr_tail).decode("utf-8", "replace").strip()
        return f": {tail[-1500:]}" if tail else ""


def _trace_result(traced: Any, result: ExecResult, pid: int | None) -> None:
    traced.set(
        status=result.status,
        duration_ms=round(result.duration_ms, 3),
        truncated=result.truncated,
        hidden_chars=result.hidden_chars,
        variables_lost=result.variables_lost,
        limit=result.limit,
        host_calls=result.host_calls,
        stdout_chars=len(result.stdout),
        denials=len(result.denials),
        kernel_pid=pid,
    )
    if result.status != "ok":
        error_type = result.error.type if result.error is not None else result.status
        traced.error(result.notice or result.status, error_type)


def _drain(stream: IO[bytes], tail: deque[bytes]) -> None:
    # Kept small and bounded: a kernel writing to fd 2 forever cannot grow the host.
    with contextlib.suppress(OSError, ValueError):
        while chunk := os.read(stream.fileno(), 4096):
            tail.append(chunk)


def _text(value: Any) -> str:
    if not isinstance(value, str):
        return ""
    return value.encode("utf-8", "replace").decode("utf-8")


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _with(result: ExecResult, **changes: Any) -> ExecResult:
    from dataclasses import replace

    return replace(result, **changes)


@atexit.register
def _close_all() -> None:
    for kernel in list(_LIVE):
        with contextlib.suppress(Exception):
            kernel.close()
