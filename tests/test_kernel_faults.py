"""A kernel cannot hang or bloat its host: one test per fault, on both tiers.

Each fault is made by a real kernel: the cell reaches the worker's own pipe to the host
(``probe._caller._send.__self__`` is the worker, ``out_fd`` its protocol fd) and writes
whatever the fault needs, or stops the worker's reader thread. Every test asserts that
``execute`` comes back by its deadline with a clear status, that the kernel was replaced,
and that the next cell runs. Markers are explicit: a host function the cell calls sets an
``Event``, and "the host is stuck writing" is the kernel's stdin pipe observed full.
"""

from __future__ import annotations

import fcntl
import json
import os
import termios
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from scroll_core.errors import KernelError, KernelProtocolError, KernelUnresponsive
from scroll_core.kernel import Kernel, KernelConfig, KernelManager, bwrap_status
from scroll_core.kernel.child.wire import MAX_CHILD_LINE, MAX_PRINT_CAP, shape_problem
from scroll_core.kernel.protocol import LineReader, LineWriter, decode_message
from scroll_core.kernel.results import ExecResult

BWRAP_OK, BWRAP_WHY = bwrap_status()
TIERS = [
    "process",
    pytest.param("bwrap", marks=pytest.mark.skipif(not BWRAP_OK, reason=BWRAP_WHY)),
]
BIG_ANSWER = 50 * 1024 * 1024
# Generous: a cell's deadline plus grace plus a kernel restart on a loaded machine.
RETURNS_WITHIN = 90.0
MB = 1024 * 1024

# The worker object and a raw write to its protocol pipe, from inside a cell.
RAW = "import os\nW = probe._caller._send.__self__\ndef raw(b):\n    os.write(W.out_fd, b)\n"
# A cell that walks the frames down to the worker's main loop, takes the result channel's
# sealer and seals any bytes with it: the host's parser must still survive what it sends.
SEALED = RAW + (
    "import sys\nF = sys._getframe()\nwhile 'seal' not in F.f_locals:\n    F = F.f_back\n"
    "C = {type(c.cell_contents).__name__: c.cell_contents for c in "
    "F.f_locals['seal'].__closure__}\n"
    "def sealed(b):\n"
    "    head = b'r%d ' % next(C['count'])\n"
    "    mac = C['HMAC'].copy()\n    mac.update(head)\n    mac.update(b[:-1])\n"
    "    raw(b'\\n' + mac.hexdigest().encode() + b' ' + head + b)\n"
)
# The worker's reader thread blocks on the next message it reads, so it stops reading.
JAM_READER = "import threading\nGATE = threading.Event()\nW.replies.put = lambda m: GATE.wait()\n"


class Host:
    """Host functions for the kernel, with markers the test can wait on."""

    def __init__(self) -> None:
        self.big_called = threading.Event()
        self.reached = threading.Event()

    def functions(self) -> dict[str, Callable[..., Any]]:
        return {"probe": lambda: "ok", "big": self.big, "reached": self.reach}

    def big(self) -> str:
        self.big_called.set()
        return "x" * BIG_ANSWER

    def reach(self) -> bool:
        self.reached.set()
        return True


@pytest.fixture
def host() -> Host:
    return Host()


@pytest.fixture(params=TIERS)
def kernel(request: pytest.FixtureRequest, host: Host) -> Iterator[Kernel]:
    config = KernelConfig(sandbox=request.param, timeout_s=10, grace_s=0.5, memory_mb=512)
    with Kernel(config, host_functions=host.functions()) as k:
        yield k


class Running:
    """``execute`` on a thread of its own, so the test can act while the cell is stuck."""

    def __init__(self, kernel: Kernel, code: str, timeout: float) -> None:
        self.result: ExecResult | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(kernel, code, timeout))
        self.thread.start()

    def _run(self, kernel: Kernel, code: str, timeout: float) -> None:
        try:
            self.result = kernel.execute(code, timeout=timeout)
        except BaseException as exc:
            self.error = exc

    def wait(self) -> ExecResult:
        self.thread.join(RETURNS_WITHIN)
        assert not self.thread.is_alive(), "execute did not come back by its deadline"
        assert self.error is None, self.error
        assert self.result is not None
        return self.result


def answers(action: Callable[[], object]) -> None:
    """Run a lifecycle call on a thread and assert it returns, bounded."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(RETURNS_WITHIN)
    assert not thread.is_alive(), "the call did not answer while the cell was stuck"
    assert not errors, errors


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + RETURNS_WITHIN
    while not condition():
        assert time.monotonic() < deadline, f"never saw: {what}"
        time.sleep(0.01)


def stdin_pipe_full(kernel: Kernel) -> bool:
    """The host's pipe into the kernel holds as much as it can: the kernel is not reading."""
    proc = kernel._proc
    if proc is None or proc.stdin is None:
        return False
    fd = proc.stdin.fileno()
    size = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
    queued = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, queued)
    return int.from_bytes(queued, "little") >= size


def assert_replaced(kernel: Kernel, old_pid: int | None, result: ExecResult) -> None:
    assert result.variables_lost
    assert "variables were lost" in (result.notice or "")
    assert kernel.pid != old_pid and kernel.alive
    after = kernel.execute("print('kept' in globals(), probe())")
    assert after.status == "ok" and after.stdout == "False ok\n"


def protocol_fault(kernel: Kernel, payload: bytes) -> ExecResult:
    """A cell that writes ``payload`` to the host pipe, then waits to be killed."""
    kernel.execute("kept = 1")
    pid = kernel.pid
    code = f"{SEALED}sealed({payload!r})\nimport time\nwhile True:\n    time.sleep(0.05)\n"
    result = Running(kernel, code, timeout=30).wait()
    assert result.status == "killed" and result.limit == "protocol", result
    assert "broke the protocol" in (result.notice or "")
    assert_replaced(kernel, pid, result)
    return result


# -- a kernel that stops reading ---------------------------------------------------------


def test_a_kernel_that_stops_reading_a_large_answer_is_restarted_at_the_deadline(kernel, host):
    kernel.execute("kept = 1")
    pid = kernel.pid
    code = (
        f"{RAW}{JAM_READER}"
        "W.send_call({'op': 'call', 'id': -1, 'name': 'probe', 'args': [], 'kwargs': {}})\n"
        "print(big())\n"
    )
    result = Running(kernel, code, timeout=2).wait()
    assert host.big_called.is_set()
    assert result.status == "timeout" and result.limit == "timeout"
    assert "stopped reading" in (result.notice or "")
    assert_replaced(kernel, pid, result)


def test_restart_answers_while_the_host_is_stuck_writing_to_the_kernel(kernel, host):
    pid = kernel.pid
    code = (
        f"{RAW}{JAM_READER}"
        "W.send_call({'op': 'call', 'id': -1, 'name': 'probe', 'args': [], 'kwargs': {}})\n"
        "big()\n"
    )
    running = Running(kernel, code, timeout=600)
    wait_until(host.big_called.is_set, "the cell asking for the big answer")
    wait_until(lambda: stdin_pipe_full(kernel), "the host blocked on a full pipe")
    answers(kernel.restart)
    result = running.wait()
    assert result.status == "killed"
    assert "restarted by an operator" in (result.notice or "")
    assert kernel.pid != pid
    assert kernel.execute("print(probe())").stdout == "ok\n"


def test_close_answers_while_a_cell_ignores_its_interrupt(kernel, host):
    code = (
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nreached()\n"
        "while True:\n    time.sleep(0.05)\n"
    )
    running = Running(kernel, code, timeout=600)
    wait_until(host.reached.is_set, "the cell reaching its endless loop")
    answers(kernel.close)
    result = running.wait()
    assert result.status == "killed" and result.variables_lost
    assert "closed by an operator" in (result.notice or "")
    assert not kernel.alive
    with pytest.raises(KernelError, match="closed"):
        kernel.execute("print(1)")


def test_stopping_a_session_from_the_manager_answers_while_its_cell_is_stuck():
    host = Host()
    config = KernelConfig(sandbox="process", timeout_s=10, grace_s=0.5)
    with KernelManager(config, pool_size=0) as manager:
        kernel = manager.get("stuck", host.functions())
        code = f"{RAW}{JAM_READER}W.send_call({{'op': 'call', 'id': -1, 'name': 'probe'}})\nbig()\n"
        running = Running(kernel, code, timeout=600)
        wait_until(host.big_called.is_set, "the cell asking for the big answer")
        answers(lambda: manager.release("stuck"))
        assert running.wait().status == "killed"
        assert "stuck" not in manager.status()["sessions"]
        assert manager.get("stuck").execute("print(2)").stdout == "2\n"


def test_manager_shutdown_answers_while_every_session_is_stuck():
    hosts = [Host(), Host()]
    code = (
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nreached()\n"
        "while True:\n    time.sleep(0.05)\n"
    )
    config = KernelConfig(sandbox="process", timeout_s=10, grace_s=0.5)
    manager = KernelManager(config, pool_size=0)
    kernels = [manager.get(f"s{i}", h.functions()) for i, h in enumerate(hosts)]
    running = [Running(k, code, timeout=600) for k in kernels]
    for h in hosts:
        wait_until(h.reached.is_set, "each cell reaching its endless loop")
    answers(manager.shutdown)
    for r in running:
        assert "closed by an operator" in (r.wait().notice or "")
    assert not any(k.alive for k in kernels)


def test_a_ping_the_kernel_never_answers_fails_and_restarts_it(kernel):
    pid = kernel.pid
    # The worker's reader drops every command from now on, so no pong ever comes.
    assert kernel.execute(f"{RAW}W.commands.put = lambda m: None").ok
    with pytest.raises(KernelUnresponsive, match="restarted"):
        kernel.ping()
    assert kernel.pid != pid
    assert kernel.execute("print(3)").stdout == "3\n"


# -- lines the host will not accept ------------------------------------------------------


def test_a_huge_line_is_a_protocol_error_and_host_memory_stays_bounded(kernel):
    before = _reset_peak_rss()
    code = (
        f"{RAW}chunk = b'y' * (1 << 20)\n"
        "for _ in range(256):\n    raw(chunk)\n"  # 256 MB, no newline
        "raw(b'\\n')\n"
    )
    kernel.execute("kept = 1")
    pid = kernel.pid
    result = Running(kernel, code, timeout=30).wait()
    assert result.status == "killed" and result.limit == "protocol"
    assert f"over {MAX_CHILD_LINE:,} bytes" in (result.notice or "")
    assert _peak_rss() - before < 64 * MB
    assert_replaced(kernel, pid, result)


def test_endless_lines_end_at_the_deadline_and_host_memory_stays_bounded(kernel):
    before = _reset_peak_rss()
    line = json.dumps({"op": "call", "id": 7, "name": "nope", "args": [], "kwargs": {}})
    # Blocks under PIPE_BUF are written whole, so the interrupt never cuts a line in two.
    code = f"{RAW}block = ({line!r} + '\\n').encode() * 50\nwhile True:\n    raw(block)\n"
    result = Running(kernel, code, timeout=2).wait()
    assert result.status == "timeout" and result.limit == "timeout"
    assert _peak_rss() - before < 64 * MB
    assert kernel.execute("print(probe(), len(block))").stdout == f"ok {(len(line) + 1) * 50}\n"


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"[" * 100_000 + b"\n", "unbalanced brackets"),
        (b"[" * 100_000 + b"]" * 100_000 + b"\n", "nested deeper than"),
        (
            b'{"op": "result", "id": 1, "stdout": ' + b"[" * 900 + b"]" * 900 + b"}\n",
            "nested deeper than",
        ),
        (json.dumps({"op": "call", "id": 1, "args": [0] * 300_000}).encode() + b"\n", "values"),
    ],
    ids=["unclosed", "balanced", "inside_a_result", "too_many_values"],
)
def test_a_deeply_nested_or_bloated_line_is_a_protocol_error(kernel, payload, why):
    result = protocol_fault(kernel, payload)
    assert why in (result.notice or "")


@pytest.mark.parametrize(
    "payload",
    [b"\xff\xfe\x00garbage\x80\n", b"\x00" * 1000 + b"\n", b"\n", b'"\xed\xa0\x80"\n'],
    ids=["invalid_utf8", "nul_bytes", "empty_line", "surrogate"],
)
def test_garbage_bytes_are_a_protocol_error(kernel, payload):
    protocol_fault(kernel, payload)


@pytest.mark.parametrize(
    "message",
    [
        {"op": "shutdown"},
        {"op": "exec", "id": 1, "code": "print(1)"},
        {"op": "ready"},
        {"op": "pong", "id": 424242},
        {"op": "bound", "id": 424242},
        {"op": "call", "name": "probe", "args": [], "kwargs": {}},
        {"op": "result", "id": "1"},
        {"op": "result", "id": True},
        [1, 2, 3],
        "result",
    ],
    ids=[
        "unknown_op",
        "host_op",
        "second_ready",
        "forged_pong",
        "forged_bound",
        "call_without_id",
        "string_id",
        "bool_id",
        "array",
        "bare_string",
    ],
)
def test_a_forged_or_unexpected_message_is_a_protocol_error(kernel, message):
    protocol_fault(kernel, json.dumps(message).encode() + b"\n")


def test_a_result_for_the_wrong_cell_is_a_protocol_error(kernel):
    wrong = kernel._next_id + 1000
    forged = {"op": "result", "id": wrong, "status": "ok", "stdout": "forged\n"}
    result = protocol_fault(kernel, json.dumps(forged).encode() + b"\n")
    assert f"id {wrong}" in (result.notice or "")
    assert "forged" not in result.stdout


def test_a_forged_result_for_the_cell_is_cut_to_the_cap_and_sanitised(kernel):
    cell_id = kernel._next_id + 1
    forged = {
        "op": "result",
        "id": cell_id,
        "status": "ok",
        "stdout": "z" * 200_000,
        "stderr": "e" * 10,
        "hidden_chars": -5,
        "denials": {"not": "a list"},
        "digest": {"variables": [{"name": 3, "shape": 7, "len": "many", "type": ["x"]}]},
        "error": "not a dict",
    }
    payload = json.dumps(forged).encode() + b"\n"
    code = f"{SEALED}sealed({payload!r})\nos._exit(0)\n"
    result = kernel.execute(code, timeout=30)
    assert result.status == "ok"
    assert result.truncated and result.hidden_chars == 200_010 - kernel.config.print_cap
    assert result.stdout.startswith("z" * kernel.config.print_cap)
    assert result.denials == [] and result.error is None
    assert result.digest.render() == "?: ?"
    assert kernel._proc is not None and kernel._proc.wait(RETURNS_WITHIN) == 0
    after = kernel.execute("print(probe())")
    assert after.stdout == "ok\n" and after.variables_lost


def test_a_cell_whose_call_would_be_refused_by_the_host_fails_in_the_cell(kernel):
    kernel.execute("kept = 1")
    deep = kernel.execute("x = []\nfor _ in range(100):\n    x = [x]\nprobe(x)")
    assert deep.status == "error" and deep.error is not None
    assert deep.error.type == "TypeError" and "nested deeper" in deep.error.message
    big = kernel.execute("probe('w' * (5 * 1024 * 1024))")
    assert big.status == "error" and big.error is not None and big.error.type == "TypeError"
    assert kernel.execute("print(kept)").stdout == "1\n"


def test_a_print_cap_too_large_for_one_line_is_clamped_so_the_result_still_arrives(kernel):
    kernel.execute("kept = 1")
    # Astral characters are 12 bytes each once escaped: 2M of them would be a 24 MB line.
    result = kernel.execute("print('\\U0001F600' * 2_000_000)", print_cap=10**8)
    assert result.status == "ok" and result.truncated
    assert result.stdout.startswith("\U0001f600" * MAX_PRINT_CAP)
    assert kernel.execute("print(kept)").stdout == "1\n"


def test_a_large_answer_to_a_kernel_that_reads_it_still_arrives(kernel, host):
    result = kernel.execute("print(len(big()))", timeout=60)
    assert result.status == "ok" and result.stdout == f"{BIG_ANSWER}\n"


# -- host memory --------------------------------------------------------------------------


def _status_kb(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/self/status")


def _reset_peak_rss() -> int:
    """Reset the peak-RSS mark (Linux clear_refs 5) and return the current RSS."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
    except OSError as exc:
        pytest.skip(f"cannot reset the peak RSS here: {exc}")
    return _status_kb("VmRSS")


def _peak_rss() -> int:
    return _status_kb("VmHWM")


# -- the wire itself, without a kernel ----------------------------------------------------


def test_the_line_reader_never_buffers_more_than_one_maximal_line():
    read_fd, write_fd = os.pipe()
    try:
        reader = LineReader(read_fd, max_line=1000)
        os.write(write_fd, b"a" * 5000)
        with pytest.raises(KernelProtocolError, match="over 1,000 bytes"):
            reader.readline(time.monotonic() + 30)
        assert len(reader._buf) <= 1001
        # What was not read stays in the pipe, not in the host.
        assert os.read(read_fd, 10_000) == b"a" * (5000 - len(reader._buf))
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_the_line_reader_gives_up_at_its_deadline_and_keeps_a_partial_line():
    read_fd, write_fd = os.pipe()
    try:
        reader = LineReader(read_fd)
        os.write(write_fd, b'{"op": "pong", ')
        assert reader.readline(time.monotonic() + 0.05) is None
        os.write(write_fd, b'"id": 1}\n')
        assert reader.readline(time.monotonic() + 30) == b'{"op": "pong", "id": 1}'
        os.close(write_fd)
        write_fd = -1
        with pytest.raises(EOFError):
            reader.readline(time.monotonic() + 30)
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)


def test_the_line_writer_gives_up_at_its_deadline_when_nobody_reads():
    read_fd, write_fd = os.pipe()
    try:
        writer = LineWriter(write_fd)
        writer.write(b"small\n", time.monotonic() + 30)
        with pytest.raises(KernelUnresponsive, match="stopped reading"):
            writer.write(b"x" * (4 * MB), time.monotonic() + 0.1)
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_the_line_writer_reports_a_reader_that_is_gone():
    read_fd, write_fd = os.pipe()
    os.close(read_fd)
    try:
        with pytest.raises(BrokenPipeError):
            LineWriter(write_fd).write(b"hello\n", time.monotonic() + 30)
    finally:
        os.close(write_fd)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (b'{"op": "result", "id": 1, "stdout": "[[[[[[[[{{{{"}', None),
        (b'{"s": "\\"[[[["}', None),
        (b"[" * 64 + b"]" * 64, None),
        (b"[" * 65 + b"]" * 65, "nested deeper than 64 levels"),
        (b"[" * 100_000, "unbalanced brackets"),
        (b"[" + b"0," * 300_000 + b"0]", "more than 250,000 values"),
        (b"[" + b"[]," * 300_000 + b"[]]", "more than 250,000 values"),
    ],
    ids=["in_strings", "escaped_quote", "at_limit", "past_limit", "unclosed", "many", "lists"],
)
def test_shape_is_checked_on_the_raw_bytes(line, problem):
    found = shape_problem(line)
    assert found is None if problem is None else found is not None and problem in found


@pytest.mark.parametrize(
    ("line", "match"),
    [
        (b"[" * 100_000, "unbalanced"),
        (b'{"op": "result", "id": 1, "x": ' + b"[" * 900 + b"]" * 900 + b"}", "nested deeper"),
        (b"\xff\xfe", "invalid JSON"),
        (b'{"op": "exec", "id": 1}', "known op"),
        (b'{"op": "pong"}', "valid id"),
        (b'{"op": "call", "id": 1.5}', "valid id"),
    ],
)
def test_decode_message_turns_every_bad_line_into_a_protocol_error(line, match):
    with pytest.raises(KernelProtocolError, match=match):
        decode_message(line)
