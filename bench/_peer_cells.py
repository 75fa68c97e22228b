"""Throughput against a peer gateway (``bench/gateway.py --peers litellm``): closed-loop
clients, each sending its next request when the last answer is read to its end, through
every arm in turn on the same loopback upstream.

A cell is (conversation, mode, clients): ``new`` (every timed request opens a conversation of
its own: the system message and one user message) or ``continuing`` (each client first opens a
conversation of ``HISTORY`` messages, untimed, then every request adds the reply and one
message); ``plain`` or ``stream`` (``stream: true``, the SSE read to ``[DONE]``); 1, 16 or 64
clients. Each round times every arm once per cell, the arms' order rotating round by round,
so no arm always goes first or last on a machine whose load drifts; samples are pooled over
rounds. ``rps`` is requests over the wall time from the moment every client is ready to the
last answer; ``cpu_ms_per_request`` the arm's process tree CPU (user + system) over the same
requests, which holds better than wall time on a shared machine.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from _common import percentile

__all__ = ["CONVERSATIONS", "MODES", "Arm", "cells", "tree_cpu_seconds"]

CONVERSATIONS = ("new", "continuing")
MODES = ("plain", "stream")
HISTORY = 20
SYSTEM = "You are a benchmark."
_fresh = itertools.count()


@dataclass(frozen=True)
class Arm:
    """Where one arm's requests go: ``base`` + ``/v1/chat/completions`` (``base`` is the
    upstream's own ``.../v1`` for the direct arm), with ``headers(session)``; ``pid`` is the
    process whose CPU is counted (0: none, the direct arm's upstream is the bench itself)."""

    name: str
    url: str
    headers: Callable[[str], dict[str, str]]
    pid: int = 0


def tree_cpu_seconds(pid: int) -> float:
    """User plus system CPU time of ``pid`` and its live descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            children.setdefault(int(stat[1]), []).append(int(entry))
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        todo += children.get(current, [])
    return total


def _message(i: int, tag: str) -> dict[str, str]:
    role = "user" if i % 2 == 0 else "assistant"
    return {"role": role, "content": f"{tag} message {i}: " + "some words here " * 10}


def _send(http: httpx.Client, arm: Arm, session: str, messages: list[dict[str, str]],
          stream: bool) -> tuple[float, str]:  # fmt: skip
    """One request; its wall time (s) and the reply text (the stream's pieces joined)."""
    body: dict[str, Any] = {"model": "bench", "messages": messages}
    if stream:
        body["stream"] = True
    began = time.perf_counter()
    if not stream:
        response = http.post(arm.url, json=body, headers=arm.headers(session))
        response.raise_for_status()
        took = time.perf_counter() - began
        return took, str(response.json()["choices"][0]["message"]["content"] or "")
    pieces: list[str] = []
    done = False
    with http.stream("POST", arm.url, json=body, headers=arm.headers(session)) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                choices = json.loads(line[6:]).get("choices") or [{}]
                pieces.append(choices[0].get("delta", {}).get("content") or "")
    took = time.perf_counter() - began
    if not done:
        raise RuntimeError(f"{arm.name}: the stream ended without [DONE]")
    return took, "".join(pieces)


def _client(arm: Arm, conversation: str, stream: bool, requests: int, tag: str,
            ready: threading.Barrier) -> list[float]:  # fmt: skip
    """One client's timed requests (ms), after ``ready`` (every client past its set-up)."""
    times: list[float] = []
    with httpx.Client(timeout=120) as http:
        messages = [{"role": "system", "content": SYSTEM}]
        if conversation == "continuing":
            messages += [_message(i, tag) for i in range(HISTORY - 1)]
            _, reply = _send(http, arm, tag, messages, stream)
            messages.append({"role": "assistant", "content": reply})
        ready.wait(timeout=300)
        for step in range(requests):
            if conversation == "new":
                session = f"{tag}-{next(_fresh)}"
                took, reply = _send(http, arm, session, [*messages, _message(0, session)], stream)
            else:
                messages.append({"role": "user", "content": f"next {step}: " + "more words " * 20})
                took, reply = _send(http, arm, tag, messages, stream)
                messages.append({"role": "assistant", "content": reply})
            if not reply.startswith("ok"):
                raise RuntimeError(f"{arm.name}: unexpected reply {reply[:80]!r}")
            times.append(took * 1000)
    return times


def _cell(arm: Arm, conversation: str, stream: bool, clients: int, requests: int,
          label: str) -> tuple[list[float], float, float]:  # fmt: skip
    """One arm's run of one cell: (latencies ms, wall s, CPU s)."""
    ready = threading.Barrier(clients + 1)
    results: list[list[float]] = [[] for _ in range(clients)]
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = _client(arm, conversation, stream, requests, f"{label}-{i}", ready)
        except BaseException as exc:  # reported below, with the arm's name
            errors.append(exc)
            ready.abort()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(clients)]
    for thread in threads:
        thread.start()
    with contextlib.suppress(threading.BrokenBarrierError):  # a client failed: raised below
        ready.wait(timeout=300)
    cpu = tree_cpu_seconds(arm.pid) if arm.pid else 0.0
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    if errors:
        raise RuntimeError(f"{arm.name} failed in {label}: {errors[0]!r}") from errors[0]
    cpu = (tree_cpu_seconds(arm.pid) - cpu) if arm.pid else float("nan")
    return [t for r in results for t in r], wall, cpu


def cells(arms: list[Arm], concurrencies: list[int], requests: int, rounds: int,
          log: Callable[[str], None] = lambda _: None) -> dict[str, float]:  # fmt: skip
    """Every cell for every arm, ``rounds`` times, interleaved (see the module docstring),
    ``requests`` a cell and arm per round, shared among the clients (at least 2 each):
    ``peer_<arm>_<conversation>_<mode>_c<clients>_{rps,p50_ms,p95_ms,cpu_ms_per_request}``,
    and for each arm but the first two (the direct call and Scroll) Scroll's rps over its."""
    out: dict[str, float] = {}
    for conversation, mode, clients in itertools.product(CONVERSATIONS, MODES, concurrencies):
        cell = f"{conversation}_{mode}_c{clients}"
        times: dict[str, list[float]] = {a.name: [] for a in arms}
        wall = dict.fromkeys(times, 0.0)
        cpu = dict.fromkeys(times, 0.0)
        for round_ in range(rounds):
            shift = round_ % len(arms)
            for arm in arms[shift:] + arms[:shift]:
                label = f"{arm.name}-{cell}-r{round_}"
                each = max(2, requests // clients)
                t, w, c = _cell(arm, conversation, mode == "stream", clients, each, label)
                times[arm.name] += t
                wall[arm.name] += w
                cpu[arm.name] += c
        for arm in arms:
            n = len(times[arm.name])
            key = f"peer_{arm.name}_{cell}"
            out[f"{key}_rps"] = n / wall[arm.name]
            out[f"{key}_p50_ms"] = percentile(times[arm.name], 50)
            out[f"{key}_p95_ms"] = percentile(times[arm.name], 95)
            out[f"{key}_cpu_ms_per_request"] = cpu[arm.name] * 1000 / n
            out[f"{key}_samples"] = float(n)
        direct, scroll = arms[0].name, arms[1].name
        out[f"peer_{scroll}_{cell}_added_p50_ms"] = (
            out[f"peer_{scroll}_{cell}_p50_ms"] - out[f"peer_{direct}_{cell}_p50_ms"]
        )
        for arm in arms[2:]:
            out[f"peer_{arm.name}_{cell}_added_p50_ms"] = (
                out[f"peer_{arm.name}_{cell}_p50_ms"] - out[f"peer_{direct}_{cell}_p50_ms"]
            )
            out[f"peer_{cell}_{scroll}_over_{arm.name}_rps"] = (
                out[f"peer_{scroll}_{cell}_rps"] / out[f"peer_{arm.name}_{cell}_rps"]
            )
        log(f"{cell}: " + ", ".join(f"{a.name} {out[f'peer_{a.name}_{cell}_rps']:.0f} rps, "
                                    f"p50 {out[f'peer_{a.name}_{cell}_p50_ms']:.1f} ms"
                                    for a in arms))  # fmt: skip
    return out
