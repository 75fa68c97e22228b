"""The host takes only lines the worker sealed (issue 31, finding 7).

A cell runs in the worker's process and can write to the protocol descriptor. Before the
seal, a result line it wrote there was taken as the cell's result, and the worker's real
one then arrived during the next cell and broke it. Now the host drops any line without
the worker's seal, records the true result, says what it dropped, and the next cell runs
with its variables.
"""

from __future__ import annotations

import pytest

from scroll_core.kernel import Kernel, KernelConfig, bwrap_status
from scroll_core.kernel.child import wire
from scroll_core.kernel.protocol import Seal

BWRAP_OK, BWRAP_WHY = bwrap_status()
TIERS = ["process", pytest.param("bwrap", marks=pytest.mark.skipif(not BWRAP_OK, reason=BWRAP_WHY))]

# Writes a result for the running cell to every descriptor, then bytes with no newline.
FORGE = (
    "import os, json\n"
    "line = json.dumps({{'op': 'result', 'id': {id}, 'status': 'ok', 'stdout': 'FORGED'}})\n"
    "for fd in range(3, 32):\n"
    "    try:\n"
    "        os.write(fd, line.encode() + b'\\n')\n"
    "    except OSError:\n"
    "        pass\n"
    "for fd in range(3, 32):\n"
    "    try:\n"
    '        os.write(fd, b\'{{"op": "result", "id": {id}\')\n'
    "    except OSError:\n"
    "        pass\n"
    "print('real', x + 1)\n"
)


@pytest.fixture(params=TIERS)
def kernel(request):
    with Kernel(KernelConfig(sandbox=request.param, timeout_s=10, grace_s=0.5)) as kernel:
        yield kernel


def test_a_forged_result_frame_is_dropped_and_the_true_result_recorded(kernel):
    assert kernel.execute("x = 41").status == "ok"
    result = kernel.execute(FORGE.format(id=kernel._next_id + 1))
    assert result.status == "ok", result
    assert result.stdout == "real 42\n"
    assert any("did not seal" in d for d in result.denials), result.denials
    after = kernel.execute("print(x)")
    assert after.status == "ok" and after.stdout == "41\n"
    assert not after.variables_lost and after.denials == []


def test_a_cell_flooding_unsealed_lines_cannot_hold_the_host_past_its_deadline(kernel):
    flood = (
        "import os\nwhile True:\n"
        "    for fd in range(3, 32):\n"
        "        try:\n"
        "            os.write(fd, b'{}\\n' * 512)\n"
        "        except OSError:\n"
        "            pass\n"
    )
    result = kernel.execute(flood, timeout=2)
    assert result.status in ("timeout", "killed"), result
    assert kernel.execute("print('next')").stdout == "next\n"


def test_the_seal_takes_each_worker_line_once_and_in_order_on_its_channel():
    host = Seal()
    seal = wire.sealer(host.keys[b"r"], b"r")
    calls = wire.sealer(host.keys[b"c"], b"c")
    first, second = seal({"op": "pong", "id": 1}), seal({"op": "pong", "id": 2})
    assert first.startswith(b"\n") and first.endswith(b"\n")
    assert host.open(second.strip()) is None  # out of order
    assert host.open(first.strip()) == (b"r", b'{"op":"pong","id":1}')
    assert host.open(first.strip()) is None  # replayed
    assert host.open(calls({"op": "call", "id": 1}).strip()) == (b"c", b'{"op":"call","id":1}')
    assert host.open(second.strip()) == (b"r", b'{"op":"pong","id":2}')
    # The call channel's sealer cannot seal a line of the result channel.
    crossed = calls({"op": "result", "id": 3}).strip().replace(b" c1 ", b" r2 ")
    assert host.open(crossed) is None
    other = wire.sealer(b"k" * 32, b"r")({"op": "pong", "id": 3})
    assert host.open(other.strip()) is None  # another key
    tampered = bytearray(seal({"op": "pong", "id": 3}).strip())
    tampered[-2] = ord("4")
    assert host.open(bytes(tampered)) is None
    assert host.open(b'{"op": "pong", "id": 3}') is None


def test_a_result_sealed_by_a_cell_that_walked_the_frames_cannot_break_the_next_cell(kernel):
    """The stated limit: a cell that reaches the worker's main loop can seal a result, and
    the host takes it. The worker's own result for that cell then arrives late; the host
    drops it, so the next cell still gets its true result."""
    assert kernel.execute("x = 41").status == "ok"
    cell_id = kernel._next_id + 1
    walk = (
        "import os, sys, json\nF = sys._getframe()\nwhile 'send' not in F.f_locals:\n"
        "    F = F.f_back\n"
        f"F.f_locals['send']({{'op': 'result', 'id': {cell_id}, 'status': 'ok', "
        "'stdout': 'SEALED BY THE CELL'})\n"
        "print('real')\n"
    )
    taken = kernel.execute(walk)
    assert taken.stdout == "SEALED BY THE CELL"  # the cell's word, as documented
    after = kernel.execute("print(x)")
    assert after.status == "ok" and after.stdout == "41\n" and not after.variables_lost
    assert any("result(s) of an earlier cell that came late" in d for d in after.denials)
