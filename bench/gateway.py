"""Gateway benchmark: what the gateway adds in front of an upstream, and what it saves.

    python bench/gateway.py --json [--quick] [--history 200 --requests 30 --clients 1,32]
                                   [--rounds 4] [--peers litellm [--peer-only]]

One run, one loopback upstream (an OpenAI-compatible server in this process that answers at
once, or replays a transcript's replies), and daphne serving the console's ASGI app over a
temporary data folder in a subprocess:

* latency: each client (its own session) first sends a ``--history``-message conversation,
  then ``--requests`` more, the history growing by the reply and one new message each time.
  Every step goes to the upstream directly and through the gateway, alternating, so both
  see the same machine at the same moment; ``added`` is the gateway's percentile minus the
  direct one. Two profiles: C = 131,072 (nothing evicts) and C = 8,192 (the history is over
  the window, so every request works on an evicting view). At 1 and at 32 clients at once.
* the long conversation: LoCoMo's first conversation through ``/v1/chat/completions`` as
  successive requests, the upstream replaying the second speaker, C = 8,192; then
  questions whose evidence was evicted long before, the upstream recalling with a cell
  (``ms.search`` on the question's terms) and answering with what it printed.
  ``upstream_tokens_ratio`` is the tokens sent upstream over the tokens the client sent;
  ``recall_evidence_hit_rate`` the share of questions whose evidence turn the cell printed.
  A Claude Code transcript goes through ``/v1/messages`` the same way.
* the Anthropic arm (``anthropic_noevict_c1_*``): one Anthropic Messages client, nothing
  evicting, to the same upstream answering Messages, directly and through a key whose
  upstream is in Anthropic format, alternating as above; ``--rounds`` sessions pooled, as
  the Chat Completions arm at 1 client (120 samples by default), and timed right after it,
  before the concurrent arms.
* the Responses arm (``responses_noevict_c1_*``): the same for one OpenAI Responses client
  through a Chat Completions upstream, against the same conversation sent to that upstream
  directly, so its gap includes the translation between the two APIs. The stored Responses
  arm (``responses_stored_noevict_c1_*``): the same client in the API's stored form, each
  request sending only its new message and the last response's id (each response stored
  before its answer leaves, the conversation read back from the log).

* the peer arm (``--peers litellm``, ``peer_*``): throughput and latency of the upstream
  called directly, Scroll (C = 131,072, nothing evicting) and LiteLLM's proxy (its own
  virtualenv, ``make litellm``; one process, no database, so it logs nothing, where Scroll
  commits every call to its Event Log and records it in the console), on the same upstream,
  in interleaved rounds: new and continuing conversations, streaming or not, at
  ``--peer-clients`` (1, 16, 64); see ``_peer_cells``. ``--peer-only`` times only these.

With ``--json`` the envelope (``figures``: flat numbers) is printed and written to
``bench/results/gateway.json`` (``--out`` to change). Timings taken on a loaded machine are
indicative only.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
from _common import REPO, SHARED_DATA, cpu_seconds, emit, envelope, percentile
from _gateway_data import (
    claude_code_messages,
    completion_for,
    locomo_exchanges,
    locomo_qa,
)
from _litellm import MASTER_KEY, LiteLLMProxy, litellm_venv
from _peer_cells import Arm, cells
from _server import SERVERS, DaphneServer, free_port

# A well-behaved model writes a new headline every turn; the same one again and again is what
# the console's headline-quality alert is for (it would then fire on every reply).
HEADLINE = "⟦bench reply {n} | status: answered; next: wait | anchors: bench⟧"
RECALL_TOOL = "recall_history_python"
WORDS = re.compile(r"[A-Za-z][A-Za-z'-]{3,}")
STOP = frozenset(
    "what when where which who whom whose does did have has been were with that this from "
    "they them their about would could should after before".split()
)


class _Server(ThreadingHTTPServer):
    # 32 clients and the gateway's pool connect at once: the default backlog of 5 drops some.
    request_queue_size = 256


class Upstream:
    """A loopback OpenAI-compatible upstream: answers from a queue, else at once with a short
    reply and a headline. Counts requests."""

    def __init__(self) -> None:
        self.queue: list[dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]] = []
        self.lock = threading.Lock()
        self.requests = 0
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                with upstream.lock:
                    upstream.requests += 1
                    n = upstream.requests
                    item = upstream.queue.pop(0) if upstream.queue else None
                reply = item(body) if callable(item) else item
                if self.path.endswith("/messages"):  # the Anthropic arm's upstream
                    reply = reply or _anthropic_message(f"ok\n{HEADLINE.format(n=n)}")
                default = completion_for(f"ok\n{HEADLINE.format(n=n)}")
                data = json.dumps(reply or default).encode()
                kind = "application/json"
                if body.get("stream") and not self.path.endswith("/messages"):
                    data, kind = _sse(reply or default), "text/event-stream"
                self.send_response(200)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _sse(completion: dict[str, Any]) -> bytes:
    """A ``chat.completion`` as the Server-Sent Events a streaming upstream sends: a role
    chunk, the text, the finish, the usage, ``[DONE]`` (all at once: the upstream has no
    latency of its own to show)."""
    base = {key: completion[key] for key in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]
    deltas = [
        ({"role": "assistant", "content": ""}, None),
        ({"content": choice["message"].get("content") or ""}, None),
        ({}, choice["finish_reason"]),
    ]
    chunks = [
        {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        for delta, finish in deltas
    ]
    chunks.append({**base, "choices": [], "usage": completion["usage"]})
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + (
        b"data: [DONE]\n\n"
    )


class Server(DaphneServer):
    """daphne serving dashboard.asgi over a temporary data folder, with gateway keys."""

    def prepare(self, upstream_url: str) -> dict[str, str]:
        self.migrate()
        script = (
            "import json\n"
            "from dashboard.gateway.models import GatewayKey\n"
            "from dashboard.runs.models import TuningProfile\n"
            "keys = {}\n"
            "for name, size in (('wide', 131072), ('evict', 8192)):\n"
            "    p = TuningProfile.objects.create(name='bench-' + name, context_size=size)\n"
            f"    keys[name] = GatewayKey.issue(agent_id='bench-' + name, profile=p, "
            f"upstream_base_url={upstream_url!r}, max_recall_steps=4)[1]\n"
            # The Anthropic arm: the same loopback upstream, answering Messages.
            "keys['anthropic'] = GatewayKey.issue(agent_id='bench-anthropic', "
            "profile=TuningProfile.objects.get(name='bench-wide'), "
            f"upstream_base_url={upstream_url!r}, upstream_format='anthropic', "
            "max_recall_steps=4)[1]\n"
            "print(json.dumps(keys))\n"
        )
        out = self.manage("shell", "-c", script, timeout=120)
        return dict(json.loads(out.strip().splitlines()[-1]))


# -- latency -------------------------------------------------------------------------------


def _anthropic_message(text: str) -> dict[str, Any]:
    return {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": "scripted-upstream",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": max(1, len(text) // 4)},
    }


@dataclass(frozen=True)
class ClientApi:
    """A client API's arm, one client, nothing evicting: the same conversation straight to the
    upstream (``direct_path``, ``direct_body``) and through the gateway (``path``, ``body``),
    alternating step by step as ``_steps`` does for Chat Completions."""

    name: str
    path: str
    direct_path: str
    headers: Callable[[str, str], dict[str, str]]
    body: Callable[[list[dict[str, str]]], dict[str, Any]]
    direct_body: Callable[[list[dict[str, str]]], dict[str, Any]]
    reply_text: Callable[[dict[str, Any]], str]
    # The Responses API's stored form: after the first request the gateway is sent only the
    # new message, naming the last response (``previous_response_id``); the upstream still
    # gets the whole conversation directly.
    continues: bool = False


SYSTEM = "You are a benchmark."


def _messages_body(messages: list[dict[str, str]]) -> dict[str, Any]:
    return {"model": "bench", "max_tokens": 256, "system": SYSTEM, "messages": messages}


def _chat_body(messages: list[dict[str, str]]) -> dict[str, Any]:
    return {"model": "bench", "messages": [{"role": "system", "content": SYSTEM}, *messages]}


# The Anthropic arm: an Anthropic Messages client, the key's upstream in Anthropic format.
ANTHROPIC = ClientApi(
    name="anthropic",
    path="/v1/messages",
    direct_path="/messages",
    headers=lambda key, session: {
        "x-api-key": key,
        "anthropic-version": "2023-06-01",
        "x-scroll-session": session,
    },
    body=_messages_body,
    direct_body=_messages_body,
    reply_text=lambda reply: str(reply["content"][0]["text"]),
)
# The Responses arm: an OpenAI Responses client through a Chat Completions upstream, against
# the same conversation sent to that upstream directly (what the client would call without
# Scroll, had it spoken Chat Completions): the gap includes the translation between the two.
RESPONSES = ClientApi(
    name="responses",
    path="/v1/responses",
    direct_path="/chat/completions",
    headers=lambda key, session: {"authorization": f"Bearer {key}", "x-scroll-session": session},
    body=lambda messages: {
        "model": "bench",
        "instructions": SYSTEM,
        "input": messages,
        "store": False,
    },
    direct_body=_chat_body,
    reply_text=lambda reply: str(reply["output"][0]["content"][0]["text"]),
)
# The same client in the stored form: each response stored (a row written before the answer
# leaves), each request sending only its new message and the last response's id.
RESPONSES_STORED = ClientApi(
    name="responses_stored",
    path="/v1/responses",
    direct_path="/chat/completions",
    headers=lambda key, session: {"authorization": f"Bearer {key}"},
    body=lambda messages: {"model": "bench", "instructions": SYSTEM, "input": messages},
    direct_body=_chat_body,
    reply_text=lambda reply: str(reply["output"][0]["content"][0]["text"]),
    continues=True,
)


def api_latency(
    api: ClientApi,
    gateway: str,
    key: str,
    upstream: str,
    history: int,
    requests: int,
    rounds: int = 1,
) -> dict[str, Any]:
    """One client API's arm (see ``ClientApi``): ``rounds`` sessions one after another,
    samples pooled (as the Chat Completions arm's at 1 client)."""
    through: list[float] = []
    direct: list[float] = []
    served: list[dict[str, float]] = []
    for round_ in range(rounds):
        session = f"{api.name}-{round_}"
        _api_session(
            api, gateway, key, upstream, history, requests, session, through, direct, served
        )
    return _figures(through, direct, served)


def _api_session(
    api: ClientApi,
    gateway: str,
    key: str,
    upstream: str,
    history: int,
    requests: int,
    session: str,
    through: list[float],
    direct: list[float],
    served: list[dict[str, float]],
) -> None:
    """One session of ``api_latency`` (its lists filled in place)."""
    messages = [_message(i) for i in range(history if history % 2 else history - 1)]
    headers = api.headers(key, session)
    last_id = ""
    if api.continues:  # a session of its own: the first request names none
        messages[0] = {**messages[0], "content": f"{session}: {messages[0]['content']}"}
    with httpx.Client(timeout=120) as http:
        for step in range(requests + 1):
            began = time.perf_counter()
            http.post(
                f"{upstream}{api.direct_path}", json=api.direct_body(messages)
            ).raise_for_status()
            direct_s = time.perf_counter() - began
            if last_id:
                body = {**api.body(messages[-1:]), "previous_response_id": last_id}
            else:
                body = api.body(messages)
            began = time.perf_counter()
            response = http.post(f"{gateway}{api.path}", json=body, headers=headers)
            through_s = time.perf_counter() - began
            response.raise_for_status()
            if step:  # the first request appends the whole history: a warm-up
                direct.append(direct_s * 1000)
                through.append(through_s * 1000)
                timing = server_timing(response.headers.get("server-timing", ""))
                timing["outside"] = through_s * 1000 - timing.get("scroll", float("nan"))
                served.append(timing)
            answer = response.json()
            last_id = str(answer["id"]) if api.continues else ""
            messages.append({"role": "assistant", "content": api.reply_text(answer)})
            messages.append({"role": "user", "content": f"next {step}: " + "more words " * 20})


def _message(i: int) -> dict[str, str]:
    role = "user" if i % 2 == 0 else "assistant"
    text = f"message {i}: " + " ".join(f"word{(i * 7 + k) % 97}" for k in range(40))
    return {"role": role, "content": text}


def server_timing(header: str) -> dict[str, float]:
    """``name;dur=ms, ...`` as a dict (a stage named twice adds up)."""
    out: dict[str, float] = {}
    for item in header.split(","):
        name, _, rest = item.strip().partition(";dur=")
        if name and rest:
            out[name] = out.get(name, 0.0) + float(rest)
    return out


def _client(
    gateways: list[tuple[str, str]],
    upstream: str,
    name: str,
    history: int,
    requests: int,
    warm: threading.Barrier,
) -> tuple[list[list[float]], list[float], list[list[dict[str, float]]]]:
    """One client's session: every step goes to the upstream directly, then through each of
    ``gateways`` (base URL, key) in turn, with the same body. After the first (untimed) step
    it waits at ``warm`` for the other clients."""
    messages = [{"role": "system", "content": "You are a benchmark."}]
    messages += [_message(i) for i in range(history - 1 if history % 2 == 0 else history)]
    if messages[-1]["role"] != "user":
        messages.append(_message(len(messages) + 1 - (len(messages) % 2)))
    through: list[list[float]] = [[] for _ in gateways]
    direct: list[float] = []
    served: list[list[dict[str, float]]] = [[] for _ in gateways]
    with httpx.Client(timeout=120) as http:
        try:
            _steps(
                http, gateways, upstream, name, messages, requests, warm, through, direct, served
            )
        except BaseException:
            warm.abort()  # the others (and the bench) stop waiting, and this error shows
            raise
    return through, direct, served


def _steps(
    http: httpx.Client,
    gateways: list[tuple[str, str]],
    upstream: str,
    name: str,
    messages: list[dict[str, str]],
    requests: int,
    warm: threading.Barrier,
    through: list[list[float]],
    direct: list[float],
    served: list[list[dict[str, float]]],
) -> None:
    """The steps of ``_client`` (its lists filled in place)."""
    for step in range(requests + 1):
        body = {"model": "bench", "messages": messages}
        began = time.perf_counter()
        http.post(f"{upstream}/chat/completions", json=body).raise_for_status()
        direct_s = time.perf_counter() - began
        if step:  # the first request appends the whole history: a warm-up
            direct.append(direct_s * 1000)
        replies = []
        for i, (gateway, key) in enumerate(gateways):
            headers = {"authorization": f"Bearer {key}", "x-scroll-session": name}
            began = time.perf_counter()
            response = http.post(f"{gateway}/v1/chat/completions", json=body, headers=headers)
            through_s = time.perf_counter() - began
            response.raise_for_status()
            replies.append(response.json()["choices"][0]["message"]["content"])
            if step:
                through[i].append(through_s * 1000)
                timing = server_timing(response.headers.get("server-timing", ""))
                # What the handler did not see: the server and the two sockets.
                timing["outside"] = through_s * 1000 - timing.get("scroll", float("nan"))
                served[i].append(timing)
        if len(set(replies)) != 1:
            raise RuntimeError(f"the servers answered differently: {replies!r}")
        messages.append({"role": "assistant", "content": replies[0]})
        messages.append({"role": "user", "content": f"next {step}: " + "more words " * 20})
        if not step:
            warm.wait()


def latency(
    gateways: list[tuple[str, str]],
    upstream: str,
    arm: str,
    clients: int,
    history: int,
    requests: int,
    pids: list[int],
    rounds: int = 1,
) -> list[dict[str, Any]]:
    """The figures of one arm, one dict per gateway (each against the same direct calls).
    ``rounds`` sessions of ``clients`` clients run one after another and their samples are
    pooled (every round on a fresh session, so every round times the same history sizes).
    ``cpu_ms_per_request``: the server process's CPU time (every thread, the console's span
    sink and recorder included) over the timed requests, per request; unlike wall-clock time
    it holds on a busy machine."""
    results: list[Any] = []
    spent = [0.0 for _ in pids]
    for round_ in range(rounds):
        warm = threading.Barrier(clients + 1)
        with ThreadPoolExecutor(max_workers=clients) as pool:
            futures = [
                pool.submit(
                    _client,
                    gateways,
                    upstream,
                    f"lat-{arm}-{clients}-{round_}-{i}",
                    history,
                    requests,
                    warm,
                )
                for i in range(clients)
            ]
            try:
                warm.wait(timeout=600)  # every client past its first (history-appending) request
            except threading.BrokenBarrierError:
                for f in futures:
                    f.result()  # the client's own failure
                raise
            before = [cpu_seconds(pid) for pid in pids]
            results += [f.result() for f in futures]
        spent = [s + cpu_seconds(pid) - b for s, pid, b in zip(spent, pids, before, strict=True)]
    direct = [x for r in results for x in r[1]]
    out = []
    for g in range(len(gateways)):
        figures = _figures(
            [x for r in results for x in r[0][g]], direct, [x for r in results for x in r[2][g]]
        )
        figures["cpu_ms_per_request"] = spent[g] * 1000 / (clients * requests * rounds)
        out.append(figures)
    return out


def _figures(
    through: list[float], direct: list[float], served: list[dict[str, float]]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for q in (50, 95):
        out[f"gateway_p{q}_ms"] = percentile(through, q)
        out[f"direct_p{q}_ms"] = percentile(direct, q)
        out[f"added_p{q}_ms"] = percentile(through, q) - percentile(direct, q)
        # Of the gateway's time, what its view took (upstream calls included), per
        # Server-Timing.
        out[f"served_p{q}_ms"] = percentile([t.get("scroll", float("nan")) for t in served], q)
    out["samples"] = float(len(through))
    # Where the time goes, stage by stage (a list, so it lands in the envelope's details).
    names = list(dict.fromkeys(name for t in served for name in t))
    out["stages"] = [
        {
            "stage": name,
            "p50_ms": round(percentile([t.get(name, 0.0) for t in served], 50), 3),
            "p95_ms": round(percentile([t.get(name, 0.0) for t in served], 95), 3),
        }
        for name in names
    ]
    for item in out["stages"]:
        out[f"stage_{item['stage']}_p50_ms"] = item["p50_ms"]
    return out


# The answer's stages, in order. The reply's commit (``log``) and the console's record
# (``bookkeeping``) come after the answer left, so they are not in Server-Timing; the request
# span carries the commit's time (``scroll.stage_log_ms``).
STAGES = (
    "read auth body parse hop gate session wait profile align prefix append compress messages "
    "trace upstream recall hop_back encode scroll outside"
).split()


# Each arm's latency columns, direct against through the gateway.
LATENCY = [f"{arm}_p{q}_ms" for q in (50, 95) for arm in ("direct", "gateway", "added")]


def readme_tables(arms: list[str]) -> list[dict[str, Any]]:
    """The README's pivot tables of this bench's figures (bench/readme_tables.py)."""
    return [
        {
            "title": "Latency, gateway against the upstream called directly (ms)",
            "rows": arms,
            "columns": [*LATENCY, "cpu_ms_per_request", "samples"],
            "key": "{row}_{column}",
        },
        {
            "title": "Anthropic Messages through an Anthropic-format upstream, and OpenAI "
            "Responses through a Chat Completions upstream, stateless and stored, one "
            "client (ms)",
            "rows": ["anthropic_noevict_c1", "responses_noevict_c1", "responses_stored_noevict_c1"],
            "columns": [*LATENCY, "samples"],
            "key": "{row}_{column}",
        },
        {
            "title": "Where a request's time goes, p50 per stage (ms; Server-Timing)",
            "rows": STAGES,
            "columns": arms,
            "key": "{column}_stage_{row}_p50_ms",
        },
        {
            "title": "Long conversations through the gateway",
            "rows": ["locomo", "claude_code"],
            "columns": [
                "exchanges",
                "requests",
                "client_tokens",
                "upstream_tokens",
                "upstream_tokens_ratio",
                "peak_view_tokens",
                "context_size",
                "evictions",
                "recalls",
                "questions",
                "recall_evidence_hit_rate",
            ],
            "key": "{row}_{column}",
        },
    ]


# -- the long conversation -------------------------------------------------------------------
def _terms(question: str) -> str:
    words = [w for w in WORDS.findall(question) if w.lower() not in STOP]
    return " ".join(words[:4]) or question


def long_conversation(gateway: str, upstream: Upstream, key: str, questions: int) -> dict[str, Any]:
    path = SHARED_DATA / "locomo" / "locomo10.json"
    exchanges = locomo_exchanges(path)
    headers = {"authorization": f"Bearer {key}", "x-scroll-session": "locomo-conv-0"}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are Melanie, talking with Caroline."}
    ]
    client = sent = peak = recalls = evictions = 0
    context = 0
    with httpx.Client(timeout=300) as http:

        def ask(text: str) -> dict[str, Any]:
            nonlocal client, sent, peak, recalls, evictions, context
            messages.append({"role": "user", "content": text})
            response = http.post(
                f"{gateway}/v1/chat/completions",
                json={"model": "bench", "messages": messages},
                headers=headers,
            )
            response.raise_for_status()
            data = response.json()
            stats = data["scroll"]
            client += stats["client_tokens"]
            sent += stats["upstream_tokens"]
            peak = max(peak, stats["peak_view_tokens"])
            recalls += stats["recalls"]
            evictions += stats["evictions"]
            context = stats["context_size"]
            content = data["choices"][0]["message"]["content"] or ""
            messages.append({"role": "assistant", "content": content})
            return data

        for said, answer in exchanges:
            upstream.queue.append(completion_for(answer))
            ask(said)
        hits = asked = 0
        early = [qa for qa in locomo_qa(path) if all(e.startswith("D1:") for e in qa["evidence"])]
        for qa in early[:questions]:
            code = (
                f"for h in ms.search({_terms(qa['question'])!r}, k=10):\n"
                "    print(h.seq, h.snippet[:200])"
            )
            call = {
                "id": f"call_q{asked}",
                "type": "function",
                "function": {"name": RECALL_TOOL, "arguments": json.dumps({"code": code})},
            }

            def answer_with_printout(body: dict[str, Any]) -> dict[str, Any]:
                printed = [m["content"] for m in body["messages"] if m["role"] == "tool"]
                return completion_for(printed[-1] if printed else "nothing found")

            upstream.queue += [completion_for("", [call]), answer_with_printout]
            reply = ask(qa["question"])["choices"][0]["message"]["content"] or ""
            asked += 1
            hits += all(f"({e})" in reply for e in qa["evidence"])
    return {
        "exchanges": float(len(exchanges)),
        "client_tokens": float(client),
        "upstream_tokens": float(sent),
        "upstream_tokens_ratio": sent / client if client else float("nan"),
        "peak_view_tokens": float(peak),
        "context_size": float(context),
        "peak_view_over_c": peak / context if context else float("nan"),
        "evictions": float(evictions),
        "recalls": float(recalls),
        "questions": float(asked),
        "recall_evidence_hit_rate": hits / asked if asked else float("nan"),
    }


def claude_code(gateway: str, upstream: Upstream, key: str) -> dict[str, float]:
    transcript = claude_code_messages(SHARED_DATA / "claude-code" / "todowrite_examples.jsonl")
    names = sorted({b["name"] for m in transcript for b in m["content"] if b["type"] == "tool_use"})
    tools = [{"name": n, "description": n, "input_schema": {"type": "object"}} for n in names]
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01", "x-scroll-session": "cc"}
    history: list[dict[str, Any]] = []
    client = sent = requests = 0
    with httpx.Client(timeout=120) as http:
        for message in transcript:
            if message["role"] == "assistant" and history:
                text = "\n".join(b["text"] for b in message["content"] if b["type"] == "text")
                calls = [
                    {
                        "id": b["id"],
                        "type": "function",
                        "function": {"name": b["name"], "arguments": json.dumps(b["input"])},
                    }
                    for b in message["content"]
                    if b["type"] == "tool_use"
                ]
                upstream.queue.append(completion_for(text, calls))
                body = {"model": "claude", "max_tokens": 1024, "messages": history, "tools": tools}
                response = http.post(f"{gateway}/v1/messages", json=body, headers=headers)
                response.raise_for_status()
                stats = response.json()["scroll"]
                client += stats["client_tokens"]
                sent += stats["upstream_tokens"]
                requests += 1
            history.append(message)
    return {
        "requests": float(requests),
        "client_tokens": float(client),
        "upstream_tokens": float(sent),
        "upstream_tokens_ratio": sent / client if client else float("nan"),
    }


class _Done(Exception):
    """--peer-only: the peer cells are timed, the other arms are not wanted."""


def peer_figures(
    scroll: Server,
    key: str,
    proxy: LiteLLMProxy,
    upstream_url: str,
    clients: list[int],
    requests: int,
    rounds: int,
) -> dict[str, Any]:
    """Throughput of the upstream called directly, Scroll (nothing evicting) and LiteLLM, in
    interleaved rounds (``_peer_cells``)."""
    arms = [
        Arm("direct", f"{upstream_url}/chat/completions", lambda session: {}),
        Arm(
            "scroll",
            f"{scroll.base}/v1/chat/completions",
            lambda session: {"authorization": f"Bearer {key}", "x-scroll-session": session},
            scroll.pid,
        ),
        Arm(
            "litellm",
            f"{proxy.base}/v1/chat/completions",
            lambda session: {"authorization": f"Bearer {MASTER_KEY}"},
            proxy.pid,
        ),
    ]
    out: dict[str, Any] = cells(
        arms, clients, requests, rounds, log=lambda line: print(line, file=sys.stderr)
    )
    out["peer_litellm_version"] = proxy.version()
    out["peer_requests_per_cell"] = requests
    out["peer_rounds"] = rounds
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON and write --out")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "gateway.json")
    parser.add_argument("--history", type=int, default=200)
    parser.add_argument("--requests", type=int, default=30, help="timed requests per client")
    parser.add_argument("--clients", default="1,32", help="comma-separated concurrencies")
    parser.add_argument(
        "--rounds",
        type=int,
        default=4,
        help="sessions timed one after another at 1 client, samples pooled, so its p50 rests "
        "on rounds x requests samples (direct and gateway alike; every round times the same "
        "history sizes); concurrent arms run once (they have clients x requests samples)",
    )
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("--startup-timeout", type=float, default=60.0)
    parser.add_argument("--quick", action="store_true", help="5 requests per client, 3 questions")
    parser.add_argument("--keep", action="store_true", help="keep the temporary data folder")
    parser.add_argument(
        "--servers",
        default=SERVERS[0],
        help="comma-separated ASGI servers, the shipped one (daphne) first: the headline "
        "figures are the first one's; the others' latency figures are prefixed by their name. "
        "Default: daphne alone. Each server runs its console's background threads (span sink, "
        "recorder, heartbeat) while the other is timed, which on a 2-core machine raised "
        f"daphne's added p50 by ~3 ms; compare servers with --servers {','.join(SERVERS)}",
    )
    parser.add_argument(
        "--peers",
        default="",
        help="peer gateways timed beside Scroll for throughput (only: litellm), in cells of "
        "--peer-clients x streaming or not x new or continuing conversations; the bench stops "
        "with an error if a peer asked for is not installed",
    )
    parser.add_argument(
        "--litellm-venv",
        default=None,
        help="LiteLLM's virtualenv (default: $SCROLL_LITELLM_VENV, else .litellm-venv; "
        "`make litellm` builds it)",
    )
    parser.add_argument("--peer-clients", default="1,16,64")
    parser.add_argument(
        "--peer-requests",
        type=int,
        default=192,
        help="timed requests of a peer cell, per arm per round, shared among its clients "
        "(at least 2 each)",
    )
    parser.add_argument("--peer-rounds", type=int, default=2)
    parser.add_argument(
        "--peer-only", action="store_true", help="time only the peer cells (needs --peers)"
    )
    args = parser.parse_args(argv)
    peers = [name.strip() for name in args.peers.split(",") if name.strip()]
    if any(name != "litellm" for name in peers):
        parser.error("--peers takes: litellm")
    if args.peer_only and not peers:
        parser.error("--peer-only needs --peers")
    peer_clients = [int(c) for c in args.peer_clients.split(",") if c.strip()]
    if peers and (not peer_clients or min(peer_clients) < 1 or args.peer_requests < 1
                  or args.peer_rounds < 1):  # fmt: skip
        parser.error("--peer-clients >= 1, --peer-requests >= 1 and --peer-rounds >= 1")
    # Asked for and missing: an error now, before anything starts, never a skipped arm.
    venv = litellm_venv(args.litellm_venv) if "litellm" in peers else None
    if args.quick:
        args.requests, args.questions, args.rounds = 5, 3, 1
    concurrencies = [int(c) for c in args.clients.split(",") if c.strip()]
    servers = [name.strip() for name in args.servers.split(",") if name.strip()]
    if not servers or any(name not in SERVERS for name in servers):
        parser.error(f"--servers takes names among {', '.join(SERVERS)}")
    if args.history < 2 or args.requests < 1 or not concurrencies or min(concurrencies) < 1:
        parser.error("history >= 2, requests >= 1 and clients >= 1 are needed")
    if args.rounds < 1:
        parser.error("rounds >= 1 is needed")

    data_dir = Path(tempfile.mkdtemp(prefix="scroll-bench-gateway-"))
    upstream = Upstream()
    # One data folder per server, so neither sees the other's sessions or its writes.
    running = [Server(data_dir / name, free_port(), server=name) for name in servers]
    result: dict[str, Any] = {
        "history_messages": args.history,
        "requests_per_client": args.requests,
        "rounds_at_1_client": args.rounds,
        "servers": ",".join(servers),
    }
    try:
        keys = []
        for server in running:
            keys.append(server.prepare(upstream.url))
            server.start(args.startup_timeout)
        pids = [server.pid for server in running]

        def peers_timed() -> None:
            if venv is None:
                return
            proxy = LiteLLMProxy(venv, data_dir / "litellm", free_port(), upstream.url)
            try:
                proxy.start(max(args.startup_timeout, 240.0))
                result.update(
                    peer_figures(running[0], keys[0]["wide"], proxy, upstream.url, peer_clients,
                                 args.peer_requests, args.peer_rounds)
                )  # fmt: skip
            finally:
                proxy.stop()

        if args.peer_only:
            peers_timed()
            raise _Done
        for arm in ("wide", "evict"):
            label = "noevict" if arm == "wide" else "evict"
            gateways = [(server.base, k[arm]) for server, k in zip(running, keys, strict=True)]
            for clients in concurrencies:
                rounds = args.rounds if clients == 1 else 1
                per_server = latency(
                    gateways, upstream.url, arm, clients, args.history, args.requests, pids, rounds
                )
                for i, figures in enumerate(per_server):
                    prefix = "" if i == 0 else f"{servers[i]}_"
                    for name, value in figures.items():
                        result[f"{prefix}{label}_c{clients}_{name}"] = value
                if arm == "wide" and clients == concurrencies[0]:
                    # Timed right after the Chat Completions arm it is set beside, before the
                    # concurrent arms: timed after them, every one of its stages took about
                    # twice as long as the same stage of the Chat Completions arm (the 32
                    # sessions leave the server work to do), which says nothing of the format.
                    for api in (ANTHROPIC, RESPONSES, RESPONSES_STORED):
                        key = keys[0]["anthropic" if api is ANTHROPIC else "wide"]
                        figures = api_latency(
                            api,
                            running[0].base,
                            key,
                            upstream.url,
                            args.history,
                            args.requests,
                            args.rounds,
                        )
                        result.update({f"{api.name}_noevict_c1_{k}": v for k, v in figures.items()})
        long = long_conversation(running[0].base, upstream, keys[0]["evict"], args.questions)
        result.update({f"locomo_{k}": v for k, v in long.items()})
        result["upstream_tokens_ratio"] = long["upstream_tokens_ratio"]
        cc = claude_code(running[0].base, upstream, keys[0]["wide"])
        result.update({f"claude_code_{k}": v for k, v in cc.items()})
        arms = [f"{a}_c{c}" for a in ("noevict", "evict") for c in concurrencies]
        arms += [f"{name}_{arm}" for name in servers[1:] for arm in arms]
        result["readme_tables"] = readme_tables(arms)
        # Last: the peer cells leave the server thousands of sessions, which the arms above
        # would be timed over (with the peers first, the added p50 at one client was 9.2 ms,
        # against 3.5-8.4 ms in runs without them).
        peers_timed()
    except _Done:
        pass
    finally:
        for server in running:
            server.stop()
        upstream.close()
        if args.keep:
            print(f"data kept in {data_dir}", file=sys.stderr)
        else:
            shutil.rmtree(data_dir, ignore_errors=True)
    emit(result, args.json, quick=args.quick)
    if args.json:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(envelope(result, quick=args.quick), indent=2, sort_keys=True) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
