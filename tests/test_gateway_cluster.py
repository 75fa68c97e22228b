"""The gateway behind two web processes (real daphne processes over one PostgreSQL database
and one Redis, ``tests/cluster.py``): a key's rate limit and token budget hold across both,
a gateway session has one owner at a time (a request at the other process takes it over,
rebuilds from the log with a new kernel, and the first process shuts its kernel down), two
requests of one session reaching both processes at once are served one after the other (or
the second is refused with a Retry-After), a session a run worker holds is refused without
using the key's rate, an open Kernels page is told when a gateway kernel starts or stops,
and a stored Responses API reply made at one process is continued at the other."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from gateway_upstream import ScriptedUpstream, completion, text, tool_call

from scroll_core.prompts import RECALL_TOOL
from tests.cluster import Cluster, Http, fresh_database, prepared

pytestmark = pytest.mark.slow

USAGE = 120 + 12  # tokens the scripted upstream reports per call (completion's defaults)
WAIT_S = 60.0


@pytest.fixture
def cluster(tmp_path, postgres_server, redis_server, upstream):
    # Depends on the upstream so it stops first: its web processes hold connections to it.
    cluster = Cluster(
        tmp_path / "data",
        fresh_database(postgres_server.url),
        redis_server.url,
        processes=2,
        lease_s=3,
    )
    with prepared(cluster):
        yield cluster


@pytest.fixture
def webs(cluster):
    a, b = cluster.start_web("web-a"), cluster.start_web("web-b")
    with (
        httpx.Client(base_url=a.base, timeout=60) as ha,
        httpx.Client(base_url=b.base, timeout=60) as hb,
    ):
        yield ha, hb


def _issue(cluster: Cluster, upstream: ScriptedUpstream, **fields: Any) -> str:
    spec = {
        "agent_id": "alice",
        "upstream_base_url": upstream.url,
        "model_map": {"gpt-test": "upstream-model"},
        **fields,
    }
    return str(
        cluster.query(
            "from dashboard.gateway.models import GatewayKey\n"
            f"result = GatewayKey.issue(**{spec!r})[1]"
        )
    )


def _chat(http: httpx.Client, key: str, messages: list[dict], session: str) -> httpx.Response:
    return http.post(
        "/v1/chat/completions",
        json={"model": "gpt-test", "messages": messages},
        headers={"authorization": f"Bearer {key}", "x-scroll-session": session},
    )


def test_a_rate_limit_lets_exactly_n_requests_through_across_two_web_processes(
    cluster, webs, upstream
):
    limit = 5
    key = _issue(cluster, upstream, rate_limit_per_minute=limit)
    answers = [
        _chat(webs[i % 2], key, [{"role": "user", "content": f"hello {i}"}], f"rate-{i}")
        for i in range(limit + 3)
    ]
    assert [r.status_code for r in answers] == [200] * limit + [429] * 3
    error = answers[limit].json()["error"]
    assert error["type"] == "rate_limit_error" and error["code"] == "rate_limit_exceeded"
    assert f"{limit} requests per minute" in error["message"]
    anthropic_shape = webs[0].post(
        "/v1/messages",
        json={"model": "gpt-test", "max_tokens": 9, "messages": [{"role": "user", "content": "x"}]},
        headers={"x-api-key": key},
    )
    assert anthropic_shape.status_code == 429
    assert anthropic_shape.json()["error"]["type"] == "rate_limit_error"
    assert len(upstream.requests) == limit  # nothing refused reached the upstream


def test_a_token_budget_holds_across_two_web_processes(cluster, webs, upstream):
    # Room for three requests: the third starts under the budget and ends over it.
    key = _issue(cluster, upstream, token_budget=USAGE * 2 + USAGE // 2)
    codes = [
        _chat(
            webs[i % 2], key, [{"role": "user", "content": f"spend {i}"}], f"budget-{i}"
        ).status_code
        for i in range(5)
    ]
    assert codes == [200, 200, 200, 429, 429]
    assert len(upstream.requests) == 3
    refused = _chat(webs[1], key, [{"role": "user", "content": "more"}], "budget-x").json()
    assert "token budget" in refused["error"]["message"]


def _recall(code: str, call_id: str) -> Any:
    return completion("", [tool_call(RECALL_TOOL, {"code": code}, call_id)])


def _tool_output(request: dict) -> str:
    return str(request["messages"][-1]["content"])


def _kernel_row(cluster: Cluster, session: str) -> dict[str, Any] | None:
    return cluster.query(
        "from dashboard.runs.models import KernelState\n"
        f"row = KernelState.objects.filter(session_id={session!r}).values().first()\n"
        "result = row"
    )


def _until(what: str, check: Any) -> Any:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"not within {WAIT_S:g} s: {what}")


def test_a_session_has_one_owner_and_a_handover_loses_nothing_from_the_log(cluster, webs, upstream):
    key = _issue(cluster, upstream)
    session = "handover-1"
    full = "gw:alice:" + session
    history: list[dict] = [{"role": "user", "content": "remember 41"}]
    upstream.then(_recall("x = 41\nprint('set', x)", "call_a"), text("noted"))
    first = _chat(webs[0], key, history, session)
    assert first.status_code == 200, first.text
    assert "set 41" in _tool_output(upstream.requests[1])
    row_a = _until("web-a's kernel on the Kernels page", lambda: _kernel_row(cluster, full))
    assert row_a["worker"].startswith("gateway:") and row_a["alive"]

    # The next request of the session reaches the other process: it takes the lease over
    # and starts the kernel afresh (the variable is gone, the log is not).
    history += [first.json()["choices"][0]["message"], {"role": "user", "content": "and x?"}]
    upstream.then(_recall("print(globals().get('x', 'no x here'))", "call_b"), text("gone"))
    second = _chat(webs[1], key, history, session)
    assert second.status_code == 200, second.text
    assert "no x here" in _tool_output(upstream.requests[3])
    row_b = _until(
        "web-b's kernel replacing web-a's",
        # The take-over first marks the row "handed over" (not alive, no pid); web-b's
        # heartbeat then writes its own live kernel, which is what is waited for here.
        lambda: (
            (r := _kernel_row(cluster, full))
            and r["worker"] != row_a["worker"]
            and r["alive"]
            and r
        ),
    )
    assert row_b["worker"].startswith("gateway:")
    assert row_b["pid"] != row_a["pid"]
    # web-a shut its kernel down at its heartbeat (the kernel's process is gone).
    _until("web-a's kernel process to exit", lambda: not _alive(row_a["pid"]))

    # Back at web-a: taken over again, aligned with everything the log holds.
    history += [second.json()["choices"][0]["message"], {"role": "user", "content": "thanks"}]
    third = _chat(webs[0], key, history, session)
    assert third.status_code == 200, third.text
    contents = cluster.query(
        "from dashboard.eventlog import get_event_log\n"
        f"result = [e.content for e in get_event_log().session_events({full!r}, limit=None)"
        " if e.role == 'user']"
    )
    for said in ("remember 41", "and x?", "thanks"):
        assert sum(said == c for c in contents) == 1, (said, contents)
    handovers = cluster.query(
        "from dashboard.telemetry.models import SpanRecord\n"
        "result = SpanRecord.objects.filter(name='scroll.gateway.handover').count()"
    )
    assert handovers == 2


def test_a_stored_response_is_continued_at_the_other_web_process(cluster, webs, upstream):
    """The Responses API's stored form across processes: each request names the response
    the other process made; the record is in the shared database and the conversation in
    the log, so each continues with only its new message and nothing is rewritten."""
    key = _issue(cluster, upstream)
    auth = {"authorization": f"Bearer {key}"}
    upstream.then(text("Hi Ada."), text("Ada."), text("Twice."))
    last: dict[str, Any] = {}
    for i, (said, web) in enumerate(
        [("I am Ada.", webs[0]), ("My name?", webs[1]), ("How often?", webs[0])]
    ):
        body = {"model": "gpt-test", "input": said}
        if last:
            body["previous_response_id"] = last["id"]
        answer = web.post("/v1/responses", json=body, headers=auth)
        assert answer.status_code == 200, answer.text
        last = answer.json()
        if i:
            assert last["scroll"]["appended"] == 1 and not last["scroll"]["rewritten"]
    sent = [(m["role"], m["content"]) for m in upstream.requests[2]["messages"][1:]]
    assert sent == [
        ("user", "I am Ada."),
        ("assistant", "Hi Ada."),
        ("user", "My name?"),
        ("assistant", "Ada."),
        ("user", "How often?"),
    ]
    kept = webs[1].get(f"/v1/responses/{last['id']}", headers=auth)
    assert kept.status_code == 200 and kept.json()["output"][0]["content"][0]["text"] == "Twice."


def test_a_conversation_is_kept_across_web_processes(cluster, webs, upstream):
    """The Conversations API across processes: items added, deleted and answered at either
    web process; each takes the session over from the other, so each sees the chain as the
    other left it."""
    key = _issue(cluster, upstream)
    auth = {"authorization": f"Bearer {key}"}
    upstream.then(text("R1."), text("R2."))
    made = webs[0].post(
        "/v1/conversations", json={"items": [{"role": "user", "content": "A"}]}, headers=auth
    )
    assert made.status_code == 200, made.text
    conv = made.json()["id"]
    first = webs[1].post(
        "/v1/responses",
        json={"model": "gpt-test", "conversation": conv, "input": "B"},
        headers=auth,
    )
    assert first.status_code == 200, first.text
    added = webs[0].post(
        f"/v1/conversations/{conv}/items",
        json={"items": [{"role": "user", "content": "C"}]},
        headers=auth,
    )
    assert added.status_code == 200, added.text
    listed = webs[1].get(f"/v1/conversations/{conv}/items?order=asc", headers=auth).json()
    assert [i["content"][0]["text"] for i in listed["data"]] == ["A", "B", "R1.", "C"]
    gone = webs[1].delete(f"/v1/conversations/{conv}/items/{listed['data'][0]['id']}", headers=auth)
    assert gone.status_code == 200, gone.text
    second = webs[0].post(
        "/v1/responses",
        json={"model": "gpt-test", "conversation": conv, "input": "D"},
        headers=auth,
    )
    assert second.status_code == 200 and second.json()["scroll"]["appended"] == 1
    sent = [(m["role"], m["content"]) for m in upstream.requests[1]["messages"][1:]]
    assert [s for s in sent if not s[1].startswith("[system] [scroll]")] == [
        ("user", "B"), ("assistant", "R1."), ("user", "C"), ("user", "D"),
    ]  # fmt: skip


def _alive(pid: int | None) -> bool:
    import os

    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return stat.read().split(") ")[-1][:1] != "Z"


def test_a_session_a_run_worker_holds_is_refused_in_the_providers_shape_and_costs_no_rate(
    cluster, webs, upstream
):
    key = _issue(cluster, upstream, rate_limit_per_minute=2)
    cluster.query(
        "from datetime import timedelta\n"
        "from django.utils import timezone\n"
        "from dashboard.runs.models import RunRecord\n"
        "RunRecord.objects.create(session_id='gw:alice:held-by-worker', task='t',\n"
        "    status='running', worker='worker-x',\n"
        "    lease_until=timezone.now() + timedelta(minutes=10))\n"
        "result = 1"
    )
    # More refusals than the key's rate: none of them counts against it.
    for i in range(4):
        refused = _chat(webs[i % 2], key, [{"role": "user", "content": "hi"}], "held-by-worker")
        assert refused.status_code == 409
        error = refused.json()["error"]
        assert "worker-x" in error["message"] and error["code"] == "session_held_by_worker"
    assert upstream.requests == []
    # Its lease expired (the worker died): the gateway may serve the session.
    cluster.query(
        "from django.utils import timezone\n"
        "from dashboard.runs.models import RunRecord\n"
        "RunRecord.objects.filter(session_id='gw:alice:held-by-worker').update("
        "lease_until=timezone.now())\n"
        "result = 1"
    )
    served = _chat(webs[1], key, [{"role": "user", "content": "hi"}], "held-by-worker")
    assert served.status_code == 200, served.text
    assert json.loads(served.text)["choices"][0]["message"]["content"] == "ok 1"
    # The key's full rate was left: a second request in the minute is served, a third not.
    assert _chat(webs[0], key, [{"role": "user", "content": "b"}], "other").status_code == 200
    assert _chat(webs[1], key, [{"role": "user", "content": "c"}], "third").status_code == 429


def _paused(arrived: threading.Event, go: threading.Event, answer: str) -> Any:
    """A scripted reply that says it arrived, then waits for ``go`` before answering."""

    def reply(body: dict) -> Any:
        arrived.set()
        go.wait(WAIT_S)
        return text(answer)

    return reply


def _logged(cluster: Cluster, session: str) -> list[tuple[str, str]]:
    rows = cluster.query(
        "from dashboard.eventlog import get_event_log\n"
        f"result = [(e.role, e.content) for e in get_event_log().session_events({session!r},"
        " limit=None) if e.role in ('user', 'assistant')]"
    )
    return [(role, content) for role, content in rows]


def test_two_requests_of_one_session_at_two_processes_at_once_are_served_one_after_the_other(
    cluster, upstream
):
    a, b = cluster.start_web("web-a"), cluster.start_web("web-b")
    key = _issue(cluster, upstream)
    arrived, go = threading.Event(), threading.Event()
    upstream.then(_paused(arrived, go, "one"))
    history = [{"role": "user", "content": "only once"}]
    with (
        httpx.Client(base_url=a.base, timeout=90) as ha,
        httpx.Client(base_url=b.base, timeout=90) as hb,
        ThreadPoolExecutor(2) as pool,
    ):
        first = pool.submit(_chat, ha, key, history, "together")
        assert arrived.wait(WAIT_S), "the first request did not reach the upstream"
        # The client gave up and sent the same request again; it reached the other process.
        second = pool.submit(_chat, hb, key, history, "together")
        _until("web-b to wait for the session", lambda: "waits up to" in b.output())
        assert not second.done()
        go.set()
        answers = [first.result(WAIT_S), second.result(WAIT_S)]
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"] == "one"
    # The second was served after the first: a retry of an answered request, replayed.
    assert len(upstream.requests) == 1
    assert _logged(cluster, "gw:alice:together") == [("user", "only once"), ("assistant", "one")]


def test_a_request_that_cannot_get_its_session_in_time_is_refused_with_retry_after(
    cluster, upstream
):
    a = cluster.start_web("web-a")
    cluster.env["SCROLL_GATEWAY_SESSION_WAIT_S"] = "0"
    impatient = cluster.start_web("web-c")
    key = _issue(cluster, upstream)
    arrived, go = threading.Event(), threading.Event()
    upstream.then(_paused(arrived, go, "one"))
    history = [{"role": "user", "content": "first"}]
    with (
        httpx.Client(base_url=a.base, timeout=90) as ha,
        httpx.Client(base_url=impatient.base, timeout=90) as hc,
        ThreadPoolExecutor(1) as pool,
    ):
        first = pool.submit(_chat, ha, key, history, "busy")
        assert arrived.wait(WAIT_S)
        later = [*history, {"role": "user", "content": "second, too early"}]
        refused = [
            _chat(hc, key, later, "busy"),
            hc.post(
                "/v1/messages",
                json={"model": "gpt-test", "max_tokens": 9, "messages": later},
                headers={"x-api-key": key, "x-scroll-session": "busy"},
            ),
        ]
        go.set()
        assert first.result(WAIT_S).status_code == 200
    for answer in refused:
        assert answer.status_code == 409, answer.text
        assert int(answer.headers["retry-after"]) >= 1
        assert "serving another request" in answer.json()["error"]["message"]
    assert refused[0].json()["error"]["code"] == "session_busy"
    assert refused[1].json()["type"] == "error"
    # Nothing of the refused requests was logged, and the upstream saw only the first.
    assert len(upstream.requests) == 1
    assert _logged(cluster, "gw:alice:busy") == [("user", "first"), ("assistant", "one")]


def _watch_kernels(url: str, headers: dict[str, str], ready: threading.Event, frames: list) -> None:
    """Collect every Kernels table frame the page's WebSocket receives (a thread of its own)."""
    from websockets.asyncio.client import connect

    async def watch() -> None:
        async with connect(url, additional_headers=headers, open_timeout=30) as ws:
            frames.append(await asyncio.wait_for(ws.recv(), timeout=30))  # on connect
            ready.set()
            while True:
                frames.append(await asyncio.wait_for(ws.recv(), timeout=WAIT_S))

    try:
        asyncio.run(watch())
    except Exception as exc:  # the timeout ends the watch once the test stopped sending
        frames.append(f"ended: {exc!r}")
    finally:
        ready.set()


def test_the_kernels_page_is_told_when_a_gateway_kernel_starts_and_stops(cluster, upstream):
    a = cluster.start_web("web-a")
    # web-b forgets a session idle for a second: its kernel then stops with no request (and
    # so no session change) to re-render the page; only web-b's own word can.
    cluster.env["SCROLL_GATEWAY_SESSION_IDLE_S"] = "1"
    b = cluster.start_web("web-b")
    http = Http(a.base)
    http.login(cluster.password)
    key = _issue(cluster, upstream)
    ready, frames = threading.Event(), []
    url = f"ws://127.0.0.1:{a.port}/ws/feed/?spans=0&kernels=1"
    watcher = threading.Thread(
        target=_watch_kernels, args=(url, http.ws_headers(), ready, frames), daemon=True
    )
    watcher.start()
    assert ready.wait(60), "the Kernels page's WebSocket did not open"
    assert "No live kernels." in frames[0]

    # A kernel starts at web-b: the page open at web-a is told (over the Redis layer).
    upstream.then(_recall("print('k')", "call_k"), text("done"))
    session = "gw:alice:pushed"
    with httpx.Client(base_url=b.base, timeout=60) as hb:
        answer = _chat(hb, key, [{"role": "user", "content": "start a kernel"}], "pushed")
        assert answer.status_code == 200, answer.text
    _until(
        "a frame listing web-b's gateway kernel",
        lambda: any(session in f and "gateway-driven" in f for f in list(frames)[1:]),
    )
    listed = next(i for i, f in enumerate(list(frames)) if session in f)
    # Idle past its time, web-b trims the session and shuts its kernel down: told again.
    _until(
        "a frame without the stopped kernel",
        lambda: any(session not in f and "kernels-table" in f for f in list(frames)[listed + 1 :]),
    )
    row = _kernel_row(cluster, session)
    assert row is not None and not row["alive"] and row["last_status"] == "shut down"
