"""A hostile-cell soak against a running console with the gateway (issue 31).

One real daphne process serves the console and the gateway (SQLite console database, the
embedded defaults); a loopback upstream has the model run every host-harm attempt of the
red team's findings as a ``recall_history_python`` cell of one gateway session, each
followed by an ordinary cell of the same session:

- huge ``ms`` arguments in a loop of failing calls (finding 1: spans of MB each),
- a 3,000-deep directory chain, then the kernel killing itself (finding 2),
- an ``O_TMPFILE`` flood and a directory flood in scratch (findings 5 and 6),
- a forged result frame written to the protocol descriptor (finding 7),
- a 3.5 MB ``ms.search`` query (finding 7).

It asserts every request is answered, every next cell of the session succeeds, and the
web process's RSS and the console database stay under the caps below. Bounded: each cell
has the kernel's own time limit and the whole soak takes well under a minute.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_upstream import completion, text, tool_call

from scroll_core.prompts import RECALL_TOOL
from tests.cluster import Cluster, prepared

pytestmark = pytest.mark.slow

# What the attacks may add to the web process and the console database, at most. Before the
# fixes, finding 1 alone grew daphne by 6 GB and console.sqlite3 by 2.7 GB in three requests.
RSS_GROWTH_CAP_MB = 300
CONSOLE_DB_CAP_MB = 64
SOAK_BUDGET_S = 60.0

ATTACKS = {
    "huge_ms_arguments": (
        "big = 'x' * 3_900_000\nfailed = 0\nfor _ in range(25):\n"
        "    try:\n        ms.days_between(big, '2020-01-01')\n"
        "    except Exception as exc:\n        failed += 1\n        why = str(exc)[:120]\n"
        "print('refused', failed, why)"
    ),
    "deep_directory_chain": (
        "import os\nfd = os.open('.', os.O_RDONLY)\nfor _ in range(3000):\n"
        "    os.mkdir('d', dir_fd=fd)\n"
        "    inner = os.open('d', os.O_RDONLY, dir_fd=fd)\n"
        "    os.close(fd)\n"
        "    fd = inner\n"
        "os._exit(9)"
    ),
    "o_tmpfile_flood": (
        "import os\nheld = []\nchunk = b'x' * (4 << 20)\nfor _ in range(240):\n"
        "    fd = os.open('.', os.O_TMPFILE | os.O_RDWR)\n    held.append(fd)\n"
        "    os.write(fd, chunk)"
    ),
    "directory_flood": "import os\nfor i in range(200_000):\n    os.mkdir(f'flood{i}')",
    "forged_result_frame": (
        "import os, json\nforged = json.dumps({'op': 'result', 'id': 1, 'status': 'ok', "
        "'stdout': 'FORGED'}).encode() + b'\\n'\nfor fd in range(3, 32):\n"
        "    try:\n        os.write(fd, forged)\n    except OSError:\n        pass\n"
        "print('wrote forgeries')"
    ),
    "huge_search_query": (
        "try:\n    ms.search('kerberos ansible ' * 200_000)\n"
        "except Exception as exc:\n    print('refused', str(exc)[:120])"
    ),
}
# What the cell's tool output must show: the attack met its cap, not the host.
SHOWN = {
    "huge_ms_arguments": "refused 25",
    "deep_directory_chain": "restarted",
    "o_tmpfile_flood": "scratch quota",
    "directory_flood": "scratch quota",
    "forged_result_frame": "wrote forgeries",
    "huge_search_query": "refused",
}


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def _console_db_mb(root: Path) -> float:
    return sum(p.stat().st_size for p in root.glob("console.sqlite3*")) / (1 << 20)


@pytest.fixture
def console(tmp_path, upstream):
    cluster = Cluster(tmp_path / "data", None, None, processes=1, workers="embedded")
    with prepared(cluster):
        web = cluster.start_web("web")
        with httpx.Client(base_url=web.base, timeout=60) as http:
            yield cluster, web, http


def _turn(http: httpx.Client, key: str, history: list[dict], session: str) -> dict:
    answer = http.post(
        "/v1/chat/completions",
        json={"model": "gpt-test", "messages": history},
        headers={"authorization": f"Bearer {key}", "x-scroll-session": session},
    )
    assert answer.status_code == 200, answer.text[:2000]
    return answer.json()["choices"][0]["message"]


def test_a_hostile_session_leaves_the_web_process_and_console_database_within_caps(
    console, upstream
):
    cluster, web, http = console
    spec: dict[str, Any] = {
        "agent_id": "mallory",
        "upstream_base_url": upstream.url,
        "model_map": {"gpt-test": "upstream-model"},
    }
    key = str(
        cluster.query(
            "from dashboard.gateway.models import GatewayKey\n"
            f"result = GatewayKey.issue(**{spec!r})[1]"
        )
    )
    session = "soak-1"
    history: list[dict] = [{"role": "user", "content": "warm up"}]
    upstream.then(completion("", [tool_call(RECALL_TOOL, {"code": "x = 1"}, "warm")]), text("ok"))
    history += [_turn(http, key, history, session)]
    baseline = _rss_mb(web.proc.pid)
    began = time.monotonic()

    for name, code in ATTACKS.items():
        asked = len(upstream.requests)
        upstream.then(
            completion("", [tool_call(RECALL_TOOL, {"code": code}, f"{name}-a")]),
            text(f"{name} done"),
            completion("", [tool_call(RECALL_TOOL, {"code": "print(6 * 7)"}, f"{name}-b")]),
            text("still here"),
        )
        history += [{"role": "user", "content": f"try {name}"}]
        history += [_turn(http, key, history, session)]
        output = str(upstream.requests[asked + 1]["messages"][-1]["content"])
        assert SHOWN[name] in output, (name, output[:2000])
        assert "FORGED" not in output
        history += [{"role": "user", "content": "and now?"}]
        history += [_turn(http, key, history, session)]
        after = str(upstream.requests[asked + 3]["messages"][-1]["content"])
        assert "42" in after, (name, after[:2000])

    elapsed = time.monotonic() - began
    growth = _rss_mb(web.proc.pid) - baseline
    database = _console_db_mb(cluster.root)
    print(
        f"soak: {elapsed:.1f} s, web RSS {baseline:.0f} MB + {growth:.0f} MB, "
        f"console database {database:.1f} MB"
    )
    assert elapsed < SOAK_BUDGET_S
    assert growth < RSS_GROWTH_CAP_MB
    assert database < CONSOLE_DB_CAP_MB
