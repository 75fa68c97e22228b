"""The host-side handle on one kernel process.

``Kernel.execute`` sends a cell, serves the host-function calls the cell makes, and waits
for the result until the timeout. At the timeout it asks the kernel to interrupt the cell;
if the cell has not stopped after the grace period the process is killed and a fresh one
started, and the result says the variables were lost.

Nothing the kernel does can hold the host past those deadlines: every write to the kernel
is non-blocking with a deadline (a kernel that stops reading is killed and restarted the
same way), every read is bounded in time and size, and any line the host will not accept
is a protocol error that replaces the kernel. ``restart()`` and ``close()`` kill a busy
kernel first and only then wait, for a bounded time, for the cell to let go of the lock.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Any

from ..errors import KernelError, KernelProtocolError, KernelUnresponsive
from ..telemetry import span, tool_span
from . import scratchfs
from .child.wire import MAX_PRINT_CAP
from .config import KernelConfig
from .hostfns import HostFunctions
from .protocol import LineReader, LineWriter, Seal, decode_message, encode
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
        self._writer: LineWriter | None = None
        self._seal = Seal()
        self._unsealed = 0  # lines dropped since the last cell began
        # Set by restart()/close() from another thread while a cell holds the lock: the
        # cell's failure is then theirs to report, and the cell must not restart the kernel.
        self._stopping: str | None = None
        self._closed = False
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
        try:
            proc = spawn(spec.argv, spec.env, spec.cwd, spec.user)
        except BaseException:
            if spec.host_scratch:  # made for a process that never started
                scratchfs.release(spec.host_scratch)
            raise
        self._spec, self._proc = spec, proc
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdin is not None
        self._reader = LineReader(proc.stdout.fileno())
        self._writer = LineWriter(proc.stdin.fileno())
        self._seal = Seal()
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
            "seal": self._seal.keys[b"r"].hex(),
            "seal_calls": self._seal.keys[b"c"].hex(),
            **spec.child_init(),
        }
        deadline = time.monotonic() + self.config.start_timeout_s
        try:
            self._send(init, deadline)
            ready = self._wait_for("ready", None, deadline)
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
        """Replace the process with a fresh one; every variable is lost.

        Answers in bounded time even while a cell is stuck: a busy kernel is killed first,
        which ends the cell; if the cell still has not let go of the lock in time (a host
        function is running), the kernel stays dead and the next cell starts a fresh one.
        Its ``scroll.kernel.restart`` span says ``scroll.requested``: asked for, not the
        recovery from a kernel that died, timed out or stopped answering."""
        old_pid = self.pid
        if not self._take_lock("restarted"):
            with span(
                "scroll.kernel.restart", kernel_tier=self.tier, **self.sandbox_attributes()
            ) as traced:
                traced.set(deferred=True, old_pid=old_pid, requested=True)
            return
        try:
            self._restart_locked(requested=True)
        finally:
            self._lock.release()

    def close(self) -> None:
        """Stop the kernel for good, in bounded time even while a cell is stuck."""
        self._closed = True
        _LIVE.discard(self)
        if not self._take_lock("closed"):
            return  # killed; the stuck cell cleans up when its host function returns
        try:
            proc = self._proc
            if proc is not None and proc.poll() is None:
                with contextlib.suppress(OSError, KernelUnresponsive):
                    self._send({"op": "shutdown"}, time.monotonic() + 0.5)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=0.5)
            self._kill()
        finally:
            self._stopping = None
            self._lock.release()

    def _take_lock(self, why: str) -> bool:
        """Hold the kernel's lock, killing a busy kernel first so its cell lets go.

        False if the cell did not let go within the bound (the process is dead by then)."""
        if self._lock.acquire(blocking=False):
            return True
        self._stopping = why
        self._terminate()
        bound = self.config.grace_s + self.config.start_timeout_s + 5.0
        if self._lock.acquire(timeout=bound):
            self._stopping = None
            return True
        return False

    def _terminate(self) -> None:
        """Kill the process without the lock (safe from any thread); no clean-up."""
        proc = self._proc
        if proc is not None:
            with contextlib.suppress(OSError):
                proc.kill()

    def _restart_locked(self, *, requested: bool = False) -> None:
        if self._closed:
            raise KernelError("kernel is closed")
        with span(
            "scroll.kernel.restart",
            kernel_tier=self.tier,
            requested=requested or None,
            **self.sandbox_attributes(),
        ) as traced:
            old_pid = self.pid
            self._stopping = None
            self._kill()
            self.restarts += 1
            self._start()
            traced.set(restarts=self.restarts, old_pid=old_pid, kernel_pid=self.pid)

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
            if not self.alive:
                self._restart_locked()  # a fresh kernel binds every name at start-up
                return
            self._next_id += 1
            deadline = time.monotonic() + self.config.start_timeout_s
            try:
                bind = {"op": "bind", "id": self._next_id, "names": sorted(functions)}
                self._send(bind, deadline)
                if self._wait_for("bound", self._next_id, deadline) is None:
                    raise KernelUnresponsive("kernel did not acknowledge new host functions")
            except (KernelError, EOFError, OSError):
                # Whatever it was, a fresh kernel gets every name in its init message.
                self._restart_locked()

    def ping(self) -> float:
        """Round trip of an empty message, in milliseconds."""
        with self._lock:
            began = time.perf_counter()
            self._next_id += 1
            deadline = time.monotonic() + 5
            try:
                self._send({"op": "ping", "id": self._next_id}, deadline)
                pong = self._wait_for("pong", self._next_id, deadline)
            except (KernelError, EOFError, OSError) as exc:
                self._restart_locked()
                raise KernelUnresponsive(f"kernel failed a ping ({exc}); restarted") from None
            if pong is None:
                self._restart_locked()
                raise KernelUnresponsive("kernel did not answer a ping; it was restarted")
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
            if self._closed:
                raise KernelError("kernel is closed")
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
                    # Above this a cell's own result would not fit in one accepted line.
                    cap = min(cap, MAX_PRINT_CAP)
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
        lost = None
        if not self.alive:
            self._restart_locked()
            lost = self._lost("the kernel had died before this cell; it was restarted")
        self._next_id += 1
        exec_id = self._next_id
        deadline = time.monotonic() + timeout
        interrupted = False
        self._unsealed = late = 0
        try:
            self._send(
                {"op": "exec", "id": exec_id, "code": code, "print_cap": print_cap},
                deadline + self.config.grace_s,
            )
            while True:
                # Checked every message, not only when the pipe is quiet: a kernel that
                # floods lines must not keep the cell alive past its deadline.
                now = time.monotonic()
                if now >= deadline:
                    if interrupted:
                        return self._stuck(
                            began, f"the cell ran past {timeout:g}s and did not stop when "
                            "interrupted"
                        )  # fmt: skip
                    interrupted = True
                    deadline = now + self.config.grace_s
                    self._send({"op": "interrupt"}, deadline)
                    continue
                message = self._read_message(deadline)
                if message is None:
                    continue
                if message["op"] == "call":
                    reply = self.host_functions.serve(message)
                    # A large answer gets at least the grace period to be taken.
                    self._send(reply, max(deadline, time.monotonic() + self.config.grace_s))
                    continue
                if message["op"] == "result" and 0 < message["id"] < exec_id:
                    # An earlier cell's result: that cell's result was already taken (a
                    # cell that sealed one itself). Dropped, so it cannot break this cell.
                    late += 1
                    continue
                if message["op"] == "result" and message.get("id") == exec_id:
                    result = self._from_child(message, began, timeout, print_cap)
                    dropped = []
                    if self._unsealed:
                        dropped.append(
                            f"the host dropped {self._unsealed} line(s) on the kernel's "
                            "channel that the worker did not seal (written by the cell)"
                        )
                    if late:
                        dropped.append(
                            f"the host dropped {late} result(s) of an earlier cell that came "
                            "late (that cell had sealed a result of its own)"
                        )
                    if dropped:
                        result = _with(result, denials=[*result.denials, *dropped])
                    if lost is not None:
                        return _with(result, variables_lost=True, notice=lost)
                    return result
                raise KernelProtocolError(
                    f"kernel sent {message['op']!r} for id {message.get('id')} while cell "
                    f"{exec_id} was running"
                )
        except KernelUnresponsive as exc:
            return self._stuck(
                began, f"the kernel stopped reading what the host sent during the cell ({exc})"
            )
        except (EOFError, OSError):
            return self._died(began, None)
        except KernelProtocolError as exc:
            return self._died(began, str(exc))

    def _stuck(self, began: float, why: str) -> ExecResult:
        """The timeout path: the kernel is killed and replaced, the variables are lost."""
        if self._stopping is not None or self._closed:
            return self._stopped(began)
        self._restart_locked()
        return self._result(
            "timeout",
            began,
            variables_lost=True,
            limit="timeout",
            notice=f"{why}; the kernel was restarted and all variables were lost",
        )

    def _stopped(self, began: float) -> ExecResult:
        """The cell ended because restart()/close() killed the kernel from another thread."""
        why = self._stopping or ("closed" if self._closed else "stopped")
        if self._closed:
            self._kill()
        return self._result(
            "killed",
            began,
            variables_lost=True,
            notice=f"the kernel was {why} by an operator while the cell ran; "
            "all variables were lost",
        )

    def _from_child(
        self, message: dict[str, Any], began: float, timeout: float, print_cap: int
    ) -> ExecResult:
        raw_status = message.get("status")
        status: ExecStatus = "error"
        if raw_status in ("ok", "timeout", "denied"):
            status = raw_status
        hidden = _int(message.get("hidden_chars"))
        stdout = _text(message.get("stdout"))
        stderr = _text(message.get("stderr"))
        # The kernel applies the cap; the host does not take its word for it.
        over = max(0, len(stdout) + len(stderr) - print_cap)
        if over:
            hidden += over
            stdout = stdout[:print_cap]
            stderr = stderr[: max(0, print_cap - len(stdout))]
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
        elif limit == "scratch":
            notice = (
                f"the scratch quota ({self.config.scratch_mb} MB, "
                f"{self.config.scratch_inodes:,} files, directories and links) is full; "
                "delete files in scratch to free it"
            )
        digest = message.get("digest")
        if not isinstance(digest, dict):
            digest = {}
        variables = digest.get("variables")
        if not isinstance(variables, list):
            variables = []
        raw_denials = message.get("denials")
        denials = raw_denials[:20] if isinstance(raw_denials, list) else []
        return ExecResult(
            status=status,
            stdout=stdout,
            stderr=stderr,
            truncated=hidden > 0,
            hidden_chars=hidden,
            error=exec_error,
            duration_ms=(time.perf_counter() - began) * 1000,
            digest=NamespaceDigest(
                variables=[_variable(v) for v in variables[:100] if isinstance(v, dict)],
                omitted=_int(digest.get("omitted")),
            ),
            tier=self.tier,
            limit=limit,
            notice=notice,
            denials=[_text(d)[:500] for d in denials],
            host_calls=_int(message.get("host_calls")),
        )

    def _died(self, began: float, protocol: str | None) -> ExecResult:
        if self._stopping is not None or self._closed:
            return self._stopped(began)
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
            limit = "protocol"
        elif code is not None and code < 0 and -code in _SIGNAL_LIMITS:
            limit = _SIGNAL_LIMITS[signal.Signals(-code)]
            reason = f"the kernel hit its {limit} limit ({signal.Signals(-code).name})"
        elif code is not None and code < 0:
            reason = f"the kernel was killed by {signal.Signals(-code).name}"
        else:
            reason = f"the kernel exited (code {code})"
        self._restart_locked()
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

    def _send(self, message: dict[str, Any], deadline: float) -> None:
        """Write one message, or raise ``KernelUnresponsive`` at the deadline."""
        writer = self._writer
        if self._proc is None or writer is None:
            raise OSError("kernel is not running")
        writer.write(encode(message), deadline)

    def _wait_for(self, op: str, msg_id: int | None, deadline: float) -> dict[str, Any] | None:
        """The kernel's answer ``op`` (to ``msg_id``); anything else is a protocol error."""
        message = self._read_message(deadline)
        if message is None:
            return None
        if message["op"] != op or (msg_id is not None and message.get("id") != msg_id):
            raise KernelProtocolError(f"kernel sent {message['op']!r} where {op!r} was due")
        return message

    def _read_message(self, deadline: float) -> dict[str, Any] | None:
        """The next message the worker sealed; ``None`` at the deadline.

        Lines without the worker's seal are dropped and counted, never parsed: a cell can
        write to the protocol descriptor, but what it writes is never taken as the
        worker's (``child/wire.py``)."""
        reader = self._reader_or_raise()
        while time.monotonic() < deadline:  # a flood of dropped lines ends at the deadline
            line = reader.readline(deadline)
            if line is None:
                return None
            if not line:
                continue  # each sealed line starts with a newline
            opened = self._seal.open(line)
            if opened is not None:
                message = decode_message(opened[1])
                if (message["op"] == "call") == (opened[0] == b"c"):
                    return message
            self._unsealed += 1
        return None

    def _kill(self) -> None:
        """Stop the process and forget it whole: the next cell starts a fresh kernel.

        Every piece of the old process's state is cleared before anything that could
        raise, so a failure below never leaves the kernel half-reset (a ``_spec`` kept
        would make every later cell of the session fail the same way). The scratch folder
        goes last, unmounted and removed (``scratchfs.release``): whatever a cell built there,
        it does not raise."""
        proc, spec = self._proc, self._spec
        self._proc = None
        self._spec = None
        self._reader = None
        self._writer = None
        try:
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
        finally:
            if spec is not None and spec.host_scratch:
                scratchfs.release(spec.host_scratch)

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


def _variable(entry: dict[str, Any]) -> dict[str, Any]:
    """One digest entry with only the keys and types ``NamespaceDigest.render`` expects."""
    clean: dict[str, Any] = {"name": _text(entry.get("name"))[:200] or "?"}
    for key in ("type", "item_type", "value"):
        if isinstance(entry.get(key), str):
            clean[key] = _text(entry[key])[:200]
    if isinstance(entry.get("len"), int) and not isinstance(entry.get("len"), bool):
        clean["len"] = entry["len"]
    shape = entry.get("shape")
    if isinstance(shape, list) and all(_int(d) == d and d is not False for d in shape[:8]):
        clean["shape"] = shape[:8]
    return clean


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
