"""Host functions: called from a cell, served by the host, results bound as plain objects."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from scroll_core.kernel import HostFunctionRefused, Kernel, KernelConfig, bwrap_status
from scroll_core.kernel.hostfns import HostFunctions

BWRAP_OK, BWRAP_WHY = bwrap_status()
TIERS = [
    "process",
    pytest.param("bwrap", marks=pytest.mark.skipif(not BWRAP_OK, reason=BWRAP_WHY)),
]


@dataclass
class Row:
    seq: int
    text: str


@pytest.fixture(scope="module", params=TIERS)
def kernel(request):
    calls: list[tuple] = []

    def lookup(seq: int) -> Row:
        calls.append(("lookup", seq))
        return Row(seq=seq, text=f"event {seq}")

    def rows(n: int) -> list[dict]:
        return [{"i": i, "sq": i * i} for i in range(n)]

    def fail() -> None:
        raise LookupError("nothing there at /secret/host/path")

    functions = {"ms.lookup": lookup, "ms.rows": rows, "fail": fail, "echo": lambda *a, **k: [a, k]}
    with Kernel(KernelConfig(sandbox=request.param), host_functions=functions) as k:
        k.calls = calls
        yield k


def test_a_cell_calls_a_host_function_and_keeps_the_result(kernel):
    result = kernel.execute("r = ms.lookup(12)\nprint(r.seq, r.text, r['text'])")
    assert result.status == "ok", result.error
    assert result.stdout == "12 event 12 event 12\n"
    assert ("lookup", 12) in kernel.calls
    assert result.host_calls == 1
    again = kernel.execute("print(type(r).__name__, r.seq + 1)")
    assert again.stdout == "Row 13\n"


def test_results_are_plain_python_objects(kernel):
    result = kernel.execute(
        "data = ms.rows(5)\nprint(type(data).__name__, sum(d['sq'] for d in data), "
        "isinstance(data[0], dict))"
    )
    assert result.stdout == "list 30 True\n"
    by_name = {v["name"]: v for v in result.digest.variables}
    assert by_name["data"]["len"] == 5


def test_host_proxies_are_hidden_from_the_digest(kernel):
    names = {v["name"] for v in kernel.execute("pass").digest.variables}
    assert "ms" not in names and "echo" not in names and "fail" not in names


def test_arguments_travel_as_plain_data(kernel):
    result = kernel.execute(
        "import datetime\nprint(echo(1, 'a', [2], when=datetime.date(2024, 1, 2), t=(1, 2)))"
    )
    assert result.stdout == "[[1, 'a', [2]], {'when': '2024-01-02', 't': [1, 2]}]\n"


def test_unsendable_arguments_fail_in_the_kernel(kernel):
    result = kernel.execute("echo(object())")
    assert result.status == "error"
    assert result.error and "plain data" in result.error.message


def test_a_failing_host_function_raises_in_the_cell_without_a_host_traceback(kernel):
    result = kernel.execute("fail()")
    assert result.status == "error"
    assert result.error and result.error.type == "HostFunctionError"
    assert "LookupError" in result.error.message
    assert "hostfns.py" not in result.error.traceback


def test_functions_registered_later_appear_in_the_kernel(kernel):
    kernel.register({"later": lambda x: x * 3})
    assert kernel.execute("print(later(5))").stdout == "15\n"


def test_a_call_to_an_unregistered_name_is_refused():
    registry = HostFunctions({"ok": lambda: 1})
    reply = registry.serve({"op": "call", "id": 4, "name": "os.system", "args": [], "kwargs": {}})
    assert reply == {
        "op": "reply",
        "id": 4,
        "ok": False,
        "error": {"type": "HostFunctionRefused", "message": "no host function 'os.system'"},
    }


@pytest.mark.parametrize("name", ["", "1x", "a.b.c", "a b", "__import__('os')", "ms."])
def test_invalid_names_cannot_be_registered(name):
    with pytest.raises(HostFunctionRefused):
        HostFunctions({name: print})


def test_malformed_calls_are_refused():
    registry = HostFunctions({"ok": lambda *a: a})
    assert not registry.serve({"id": 1, "name": "ok", "args": "x", "kwargs": {}})["ok"]
    assert not registry.serve({"id": 1, "name": "ok", "args": [], "kwargs": {"a b": 1}})["ok"]
