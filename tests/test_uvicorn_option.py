"""The console under uvicorn (uvloop, httptools, websockets), the option docs/gateway.md offers
beside daphne: the login form and pages through Django, the gateway (plain and streamed)
through its router, and a live page's WebSocket through Channels fed by the span sink."""

from __future__ import annotations

import asyncio
import threading

import openai
import pytest

from tests.cluster import Cluster, Http, prepared, safe_id

pytest.importorskip("uvicorn")


@pytest.fixture
def cluster(tmp_path):
    cluster = Cluster(root=tmp_path / "data", database_url=None, redis_url=None, workers="embedded")
    with prepared(cluster):
        yield cluster


def _first_span_frame(url: str, headers: dict[str, str], session: str, ready, got) -> None:
    """Collect the first live span row naming ``session`` (on a thread of its own)."""
    from websockets.asyncio.client import connect

    async def watch() -> None:
        async with connect(url, additional_headers=headers, open_timeout=30) as ws:
            ready.set()
            while True:
                frame = await asyncio.wait_for(ws.recv(), timeout=60)
                if isinstance(frame, str) and 'id="span-' in frame and session in frame:
                    got.append(frame)
                    return

    try:
        asyncio.run(watch())
    except Exception as exc:
        got.append(f"error: {exc!r}")
    finally:
        ready.set()


def test_the_console_and_the_gateway_work_under_uvicorn(cluster, upstream):
    web = cluster.start_web("web", server="uvicorn")
    http = Http(web.base)
    http.login(cluster.password)  # a Django page, a form and its CSRF check
    key = cluster.query(
        "from dashboard.gateway.models import GatewayKey\n"
        f"result = GatewayKey.issue(agent_id='uv', upstream_base_url={upstream.url!r})[1]\n"
    )
    session = "gw:uv:live"
    ready, frames = threading.Event(), []
    url = f"ws://127.0.0.1:{web.port}/ws/sessions/{safe_id(session)}/?session={session}"
    watcher = threading.Thread(
        target=_first_span_frame,
        args=(url, http.ws_headers(), session, ready, frames),
        daemon=True,
    )
    watcher.start()
    assert ready.wait(60), "the session page's WebSocket did not open"

    client = openai.OpenAI(base_url=f"{web.base}/v1", api_key=key, max_retries=0)
    try:
        headers = {"X-Scroll-Session": "live"}
        history = [{"role": "user", "content": "hello over uvicorn"}]
        reply = client.chat.completions.create(model="m", messages=history, extra_headers=headers)
        assert reply.choices[0].message.content == "ok 1"
        history.append({"role": "assistant", "content": "ok 1"})
        history.append({"role": "user", "content": "and streamed"})
        stream = client.chat.completions.create(
            model="m", messages=history, stream=True, extra_headers=headers
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "ok 2"
    finally:
        client.close()

    watcher.join(timeout=90)
    assert frames, "no live span of the gateway session reached its page's WebSocket"
    assert not frames[0].startswith("error"), frames[0]
    logged = cluster.query(
        "from dashboard.eventlog import get_event_log\n"
        f"result = [e.content for e in get_event_log().session_events({session!r}, limit=None)"
        " if e.role in ('user', 'assistant')]\n"
    )
    assert logged == ["hello over uvicorn", "ok 1", "and streamed", "ok 2"]
