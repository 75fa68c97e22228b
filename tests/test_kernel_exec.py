"""A kernel keeps its namespace, caps what a cell prints, and survives what a cell does."""

from __future__ import annotations

import pytest

from scroll_core.kernel import Kernel, KernelConfig, bwrap_status
from scroll_core.kernel.results import ExecResult

BWRAP_OK, BWRAP_WHY = bwrap_status()
TIERS = [
    "process",
    pytest.param("bwrap", marks=pytest.mark.skipif(not BWRAP_OK, reason=BWRAP_WHY)),
]


@pytest.fixture(scope="module", params=TIERS)
def kernel(request):
    with Kernel(KernelConfig(sandbox=request.param, timeout_s=10)) as k:
        yield k


@pytest.fixture(params=TIERS)
def fresh(request):
    """A kernel of its own, for tests that kill or restart it."""
    config = KernelConfig(sandbox=request.param, timeout_s=10, grace_s=0.5, memory_mb=256)
    with Kernel(config) as k:
        yield k


def test_it_keeps_variables_across_cells(kernel):
    assert kernel.execute("total = sum(range(10))").ok
    result = kernel.execute("print(total * 2)")
    assert result.status == "ok"
    assert result.stdout == "90\n"


def test_it_reports_its_tier_in_status_and_results(kernel):
    status = kernel.status()
    assert status.tier == kernel.tier
    assert status.alive and status.pid
    assert status.strength == ("strong" if kernel.tier == "bwrap" else "weaker")
    assert kernel.execute("pass").tier == kernel.tier


def test_a_print_over_the_cap_keeps_the_head_and_says_variables_persist(kernel):
    result = kernel.execute("rows = 'x' * 50_000\nprint(rows)")
    assert result.truncated
    assert result.hidden_chars == 50_001 - 32_000
    assert result.stdout.startswith("x" * 32_000)
    assert "variables persist" in result.stdout
    assert "instead of re-running the query" in result.stdout
    assert kernel.execute("print(len(rows))").stdout == "50000\n"


def test_the_print_cap_is_a_setting():
    with Kernel(KernelConfig(sandbox="process", print_cap=100)) as k:
        result = k.execute("print('y' * 150)")
    assert result.truncated and result.hidden_chars == 51
    assert result.stdout.startswith("y" * 100 + "\n[output truncated")


def test_stdout_and_stderr_share_one_budget(kernel):
    result = kernel.execute("import sys\nprint('a' * 20000)\nprint('b' * 20000, file=sys.stderr)")
    assert result.stdout.startswith("a" * 20000 + "\n\n[output truncated")
    assert result.stderr == "b" * 11999
    assert result.hidden_chars == 20001 - 11999


def test_an_under_cap_print_is_untouched(kernel):
    result = kernel.execute("print('hello')")
    assert result.stdout == "hello\n"
    assert not result.truncated and result.hidden_chars == 0


def test_an_error_comes_back_with_a_cell_only_traceback(kernel):
    result = kernel.execute("def f():\n    raise ValueError('bad input')\nf()")
    assert result.status == "error"
    assert result.error is not None
    assert result.error.type == "ValueError"
    assert result.error.message == "bad input"
    assert "<cell-" in result.error.traceback and "line 2, in f" in result.error.traceback
    assert "worker.py" not in result.error.traceback


def test_a_syntax_error_is_an_error_and_the_namespace_survives(kernel):
    kernel.execute("keep = 7")
    result = kernel.execute("def (:")
    assert result.status == "error" and result.error and result.error.type == "SyntaxError"
    assert kernel.execute("print(keep)").stdout == "7\n"


def test_deep_recursion_gives_a_short_traceback(kernel):
    result = kernel.execute("def r(n):\n    return r(n + 1)\nr(0)")
    assert result.status == "error"
    assert result.error and result.error.type == "RecursionError"
    assert len(result.error.traceback) <= 4000


def test_the_digest_lists_user_variables_only(kernel):
    kernel.execute(
        "import json\nimport collections\n_private = 1\nitems = [{'a': 1}] * 3\n"
        "name = 'ada'\nflag = True\nbig = 'z' * 500\ncounts = collections.Counter('aab')"
    )
    result = kernel.execute("pass")
    by_name = {v["name"]: v for v in result.digest.variables}
    assert "json" not in by_name and "collections" not in by_name
    assert "_private" not in by_name and "__builtins__" not in by_name
    assert by_name["items"]["len"] == 3 and by_name["items"]["item_type"] == "dict"
    assert by_name["name"]["value"] == "'ada'"
    assert by_name["flag"]["value"] == "True"
    assert "value" not in by_name["big"] and by_name["big"]["len"] == 500
    assert by_name["counts"]["type"] == "collections.Counter"
    assert "items: list[dict] len=3" in result.digest.render()


def test_the_digest_is_bounded(kernel):
    kernel.execute("for i in range(300):\n    globals()[f'v{i}'] = 'w' * 70")
    result = kernel.execute("pass")
    assert len(result.digest.variables) <= 40
    assert result.digest.omitted > 0
    assert len(result.digest.render()) < 6000


def test_a_timeout_interrupts_and_keeps_variables(kernel):
    kernel.execute("kept = 'still here'")
    result = kernel.execute("import time\nwhile True:\n    time.sleep(0.01)", timeout=0.3)
    assert result.status == "timeout"
    assert not result.variables_lost
    assert result.error and result.error.type == "KeyboardInterrupt"
    assert "variables are kept" in (result.notice or "")
    assert kernel.execute("print(kept)").stdout == "still here\n"


def test_a_cell_that_ignores_the_interrupt_is_killed_and_the_kernel_restarted(fresh):
    fresh.execute("lost = 1")
    pid = fresh.pid
    code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"
    result = fresh.execute(code, timeout=0.3)
    assert result.status == "timeout"
    assert result.variables_lost
    assert "variables were lost" in (result.notice or "")
    assert fresh.pid != pid and fresh.restarts == 1
    after = fresh.execute("print('lost' in globals())")
    assert after.stdout == "False\n"


def test_a_memory_bomb_ends_the_cell_with_the_memory_limit(fresh):
    result = fresh.execute("hog = bytearray(2 * 1024**3)")
    assert result.status == "error"
    assert result.limit == "memory"
    assert "memory limit" in (result.notice or "")
    assert fresh.execute("print('alive')").stdout == "alive\n"


def test_a_file_over_the_size_limit_fails_with_a_clear_status():
    config = KernelConfig(sandbox="process", file_size_mb=1)
    with Kernel(config) as k:
        result = k.execute("open('big', 'wb').write(b'x' * (2 * 1024 * 1024))")
        assert result.status == "error" and result.limit == "file_size"
        assert k.execute("print('alive')").stdout == "alive\n"


def test_the_cpu_limit_kills_a_cell_that_holds_the_cpu():
    config = KernelConfig(sandbox="process", cell_cpu_s=1, timeout_s=20)
    with Kernel(config) as k:
        # One C call that never returns to the bytecode loop: only the CPU limit stops it.
        result = k.execute("sum(range(10**12))")
        assert result.status == "killed"
        assert result.limit == "cpu" and result.variables_lost
        assert k.execute("print(1)").stdout == "1\n"


def test_a_kernel_that_exits_is_reported_killed_and_replaced(fresh):
    result = fresh.execute("import os\nos._exit(3)")
    assert result.status == "killed" and result.variables_lost
    assert "exited (code 3)" in (result.notice or "")
    assert fresh.execute("print('back')").stdout == "back\n"


def test_garbage_on_the_protocol_pipe_is_a_protocol_violation(fresh):
    # The worker's pipe to the host is a dup of fd 1 made at start-up; find it by probing.
    code = (
        "import os\n"
        "for fd in range(3, 20):\n"
        "    try:\n"
        "        os.write(fd, b'not json\\n')\n"
        "    except OSError:\n"
        "        pass\n"
        "import time; time.sleep(1)"
    )
    result = fresh.execute(code, timeout=5)
    assert isinstance(result, ExecResult)
    assert result.status in ("killed", "ok")
    assert fresh.execute("print(2)").stdout == "2\n"


def test_execute_refuses_non_text_code(kernel):
    with pytest.raises(TypeError):
        kernel.execute(b"print(1)")  # type: ignore[arg-type]
