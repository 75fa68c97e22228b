"""What a long coding-agent session costs with the providers' prompt caches counted: resending
everything, the agent's own summary-and-discard at 80 %, and Scroll.

    python bench/gateway_cost.py --json [--quick] [--split test|dev] [--windows 32768,131072]
                                        [--requests 320] [--sessions 1]

One seeded, tool-heavy Claude-Code-like session (``bench/_agent_session.py``: a long system
prompt, eight tools, ``Read``/``Grep``/``Bash``/``Edit`` results of real files of this
repository) is played in three arms on the same content, the model's replies scripted:

* ``resend``: the client sends its whole history every call (Claude Code's breakpoints: the
  system prompt and the last block). Calls over the window are counted (``overflow``): the API
  would refuse them.
* ``compact``: the same client, but when a call would go over 80 % of the window it first asks
  for a summary of the conversation (that call is priced too, the summary as output tokens) and
  goes on from the summary alone, as Claude Code's auto-compact does.
* ``scroll``: the same client through the real gateway (daphne, a key whose upstream is a
  loopback Anthropic Messages server that records every request it gets and answers with the
  scripted reply plus the headline a model following Scroll's instruction writes, counted as
  output).

Every recorded request is priced under Anthropic's rule and under OpenAI's (``_prompt_cache``),
at list prices (Claude Sonnet: $3 input, $3.75 cache write, $0.30 read, $15 output; GPT-5:
$1.25 input, $0.125 cached, $10 output), relative to resending everything with no cache (1.00).
``cost_parts`` splits each arm's cost into uncached input, cache reads, cache writes and
output; ``<window>.<arm>.fronts`` (details) lists the view's size before and after every
eviction or compaction. Between consecutive requests of an arm, the first changed block says
what broke the cached prefix: ``append`` (nothing did), ``fold`` (a tool result became a
pointer), ``eviction`` or ``compaction`` (the front was dropped), ``prefix`` (system or tools
changed).

Cost and recall on the same session: at the end, ``<window>.<arm>.recall`` counts, of
``PROBES`` facts each of which only one tool result held (``bench/_recall_probes.py``), how
many the arm's last request still holds and, for Scroll, how many more ``ms.search`` over its
Event Log finds (as the recall tool would); ``answered`` is their sum.

Sessions are seeded: ``--split dev`` (seeds 1, 2, ...) is for choosing knobs, ``--split test``
(seeds 101, ...) for the figures reported. With ``--json`` the envelope is written to
``bench/results/gateway_cost.json`` (``--out`` to change).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
from collections import Counter
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
from _agent_session import Session, session
from _common import REPO, emit, envelope
from _prompt_cache import AnthropicCache, Block, OpenAICache, blocks
from _recall_probes import held, probes, recalled
from _server import DaphneServer, free_port

from scroll_core.models.base import Usage
from scroll_core.pricing import Rates
from scroll_core.tokens import default_counter
from scroll_core.view import FOLD_MARK

RULES = {
    "anthropic": Rates(Decimal(3), Decimal("0.30"), Decimal(15), Decimal("3.75"), source="list"),
    "openai": Rates(Decimal("1.25"), Decimal("0.125"), Decimal(10), None, source="list"),
}
COMPACT_AT = 0.8
SUMMARY_PROMPT = (
    "Your task is to create a detailed summary of the conversation so far, paying close "
    "attention to the user's explicit requests and your previous actions. Include the files "
    "and code sections touched, errors met and how they were fixed, and the pending tasks."
)
EPHEMERAL = {"type": "ephemeral"}
SEEDS = {"dev": 1, "test": 101}
PROBES = 40  # facts asked for at the end of each session (``_recall_probes``)
counter = default_counter()


# -- the client -----------------------------------------------------------------------------


def client_body(
    system: str, tools: list[dict[str, Any]], history: list[dict[str, Any]]
) -> dict[str, Any]:
    """What Claude Code sends: breakpoints on its system prompt and its last block."""
    messages = [dict(m) for m in history]
    last = dict(messages[-1])
    content = [dict(b) for b in last["content"]]
    content[-1] = {**content[-1], "cache_control": dict(EPHEMERAL)}
    messages[-1] = {**last, "content": content}
    return {
        "model": "claude-sonnet",
        "max_tokens": 4096,
        "system": [{"type": "text", "text": system, "cache_control": dict(EPHEMERAL)}],
        "tools": tools,
        "messages": messages,
    }


def _tokens(message: dict[str, Any]) -> int:
    return sum(b.end for b in blocks({"messages": [message]}, counter)[-1:])


def _with_headline(reply: dict[str, Any], headline: str) -> dict[str, Any]:
    content = [dict(b) for b in reply["content"]]
    content[0] = {"type": "text", "text": f"{content[0]['text']}\n{headline}"}
    return {**reply, "content": content}


# -- the arms -------------------------------------------------------------------------------


def resend_arm(s: Session) -> list[tuple[dict[str, Any], int]]:
    history: list[dict[str, Any]] = []
    out = []
    for step in s.steps:
        history += step.new
        out.append((client_body(s.system, s.tools, history), _tokens(step.reply)))
        history.append(step.reply)
    return out


def _as_text(message: dict[str, Any]) -> dict[str, Any]:
    """Tool results whose calls went with the summary, as text (the API's pairing rule)."""
    content = [
        {"type": "text", "text": f"[tool result] {b.get('content', '')}"}
        if b["type"] == "tool_result"
        else b
        for b in message["content"]
    ]
    return {"role": message["role"], "content": content}


def _summary(history: list[dict[str, Any]], budget: int) -> str:
    parts = []
    for message in history:
        for block in message["content"]:
            if block["type"] == "text":
                parts.append(f"{message['role']}: {block['text']}")
            elif block["type"] == "tool_use":
                parts.append(f"called {block['name']} {json.dumps(block['input'])[:200]}")
    text = "Summary of the conversation so far:\n" + "\n".join(parts)
    while counter.count(text) > budget:
        text = text[: int(len(text) * 0.9)]
    return text


def compact_arm(s: Session, window: int, summary_tokens: int) -> list[tuple[dict[str, Any], int]]:
    history: list[dict[str, Any]] = []
    out = []
    for step in s.steps:
        body = client_body(s.system, s.tools, history + step.new)
        size = blocks(body, counter)[-1].end
        if history and size > COMPACT_AT * window:
            ask = [
                *history,
                {"role": "user", "content": [{"type": "text", "text": SUMMARY_PROMPT}]},
            ]
            summary = _summary(history, summary_tokens)
            out.append((client_body(s.system, s.tools, ask), counter.count(summary)))
            carried = [_as_text(m) for m in step.new]
            content = [{"type": "text", "text": summary}] + [
                b for m in carried for b in m["content"]
            ]
            history = [{"role": "user", "content": content}]
        else:
            history = history + step.new
        out.append((client_body(s.system, s.tools, history), _tokens(step.reply)))
        history = [*history, step.reply]
    return out


class Recorder:
    """A loopback Anthropic Messages upstream that records every request and answers each with
    the next scripted reply."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.replies: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                with recorder.lock:
                    recorder.requests.append(body)
                    reply = recorder.replies.pop(0) if recorder.replies else None
                if reply is None:
                    self.send_error(500, "no scripted reply left")
                    return
                answer = {
                    "id": f"msg_{len(recorder.requests)}",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-sonnet",
                    "content": reply["content"],
                    "stop_reason": "tool_use" if len(reply["content"]) > 1 else "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": 1, "output_tokens": 1},
                }
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Gateway(DaphneServer):
    @property
    def log_path(self) -> Path:
        """The gateway's Event Log (the embedded default's file in the data folder)."""
        return Path(self.env["SCROLL_DATA_DIR"]) / "eventlog.sqlite3"

    def prepare(self, upstream_url: str, windows: list[int]) -> dict[str, str]:
        """A gateway key per window and Scroll arm: ``scroll-<C>`` under the seeded
        ``long-window-cache`` knobs, ``reference-<C>`` under the reference's defaults."""
        self.migrate()
        script = (
            "import json\n"
            "from dashboard.gateway.models import GatewayKey\n"
            "from dashboard.runs.models import TuningProfile\n"
            "from scroll_core.profile import CACHED_LONG_WINDOW\n"
            "keys = {}\n"
            f"for size in {windows!r}:\n"
            "    for arm, knobs in (('scroll', CACHED_LONG_WINDOW), ('reference', {})):\n"
            "        p = TuningProfile.objects.create(\n"
            "            name=f'cost-{arm}-{size}', context_size=size, **knobs)\n"
            "        keys[f'{arm}-{size}'] = GatewayKey.issue(agent_id=f'cost-{arm}-{size}', "
            f"profile=p, upstream_base_url={upstream_url!r}, upstream_format='anthropic', "
            "max_recall_steps=4)[1]\n"
            "print(json.dumps(keys))\n"
        )
        out = self.manage("shell", "-c", script, timeout=120)
        return dict(json.loads(out.strip().splitlines()[-1]))


def scroll_arm(
    s: Session, gateway: str, key: str, upstream: Recorder, name: str
) -> list[tuple[dict[str, Any], int]]:
    history: list[dict[str, Any]] = []
    out = []
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01", "x-scroll-session": name}
    with httpx.Client(timeout=120) as http:
        for step in s.steps:
            history += step.new
            reply = _with_headline(step.reply, step.headline)
            upstream.replies.append(reply)
            before = len(upstream.requests)
            response = http.post(
                f"{gateway}/v1/messages",
                json=client_body(s.system, s.tools, history),
                headers=headers,
            )
            response.raise_for_status()
            sent = upstream.requests[before:]
            if len(sent) != 1:
                raise RuntimeError(f"{len(sent)} upstream requests for one client call")
            got = [b.get("id") for b in response.json()["content"] if b["type"] == "tool_use"]
            want = [b["id"] for b in step.reply["content"] if b["type"] == "tool_use"]
            if got != want:
                raise RuntimeError(f"the gateway answered calls {got}, the script has {want}")
            out.append((sent[0], _tokens(reply)))
            history.append(step.reply)
    return out


# -- pricing --------------------------------------------------------------------------------


def _tool_ids(body: dict[str, Any]) -> set[str]:
    return {
        b["id"]
        for m in body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_use"
    }


def cause(
    prev: tuple[dict[str, Any], list[Block]], cur: tuple[dict[str, Any], list[Block]], front: str
) -> str:
    """What broke the cached prefix between two consecutive requests (``append``: nothing)."""
    (pbody, pb), (cbody, cb) = prev, cur
    same = 0
    while same < min(len(pb), len(cb)) and pb[same].key == cb[same].key:
        same += 1
    if same == len(pb):
        return "append"
    if _tool_ids(pbody) - _tool_ids(cbody):
        return front  # the front was dropped (Scroll's first eviction also brings its tool)
    fixed = len(pbody.get("tools") or ()) + len(pbody.get("system") or ())
    if same < fixed:
        return "prefix"
    folds = sum(FOLD_MARK in b.text for b in cb) - sum(FOLD_MARK in b.text for b in pb)
    return "fold" if folds > 0 else "other"


def price(requests: list[tuple[dict[str, Any], int]], window: int, front: str) -> dict[str, Any]:
    caches = {"anthropic": AnthropicCache(), "openai": OpenAICache()}
    cost = {rule: Decimal(0) for rule in RULES}
    uncached = {rule: Decimal(0) for rule in RULES}
    reads = Counter[str]()
    writes = Counter[str]()
    breaks = Counter[str]()
    writes_by = Counter[str]()
    parts: dict[str, Counter[Any]] = {rule: Counter() for rule in RULES}
    fronts: list[dict[str, int]] = []
    tokens_in = tokens_out = overflow = 0
    prev: tuple[dict[str, Any], list[Block]] | None = None
    for n, (body, output) in enumerate(requests):
        request = blocks(body, counter)
        size = request[-1].end
        tokens_in += size
        tokens_out += output
        overflow += size > window
        why = cause(prev, (body, request), front) if prev else "first"
        breaks[why] += 1
        if prev and why == front:
            fronts.append({"request": n, "before": prev[1][-1].end, "after": size})
        for rule, cache in caches.items():
            usage = cache.usage(request, output)
            cost[rule] += RULES[rule].cost(usage).amount
            _split(parts[rule], RULES[rule], usage)
            uncached[rule] += (
                RULES[rule].cost(Usage(input_tokens=size, output_tokens=output)).amount
            )
            reads[rule] += usage.cache_read_input_tokens or 0
            writes[rule] += usage.cache_creation_input_tokens or 0
            if rule == "anthropic":
                writes_by[why] += usage.cache_creation_input_tokens or 0
        prev = (body, request)
    return {
        "requests": len(requests),
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "overflow": overflow,
        "cost": {rule: float(v) for rule, v in cost.items()},
        "cost_uncached": {rule: float(v) for rule, v in uncached.items()},
        "cache_read_tokens": dict(reads),
        "cache_write_tokens": dict(writes),
        "breaks": dict(breaks),
        "anthropic_writes_by_cause": dict(writes_by),
        "cost_parts": {rule: {k: float(v) for k, v in c.items()} for rule, c in parts.items()},
        "fronts": fronts,
    }


def _split(into: Counter[Any], rates: Rates, usage: Usage) -> None:
    """``usage``'s cost by what it paid for: uncached input, cache reads and writes, output."""
    written = rates.cache_write_per_mtok or rates.input_per_mtok
    million = Decimal(1_000_000)
    into["input"] += Decimal(usage.uncached_input_tokens) * rates.input_per_mtok / million
    into["cache_read"] += (
        Decimal(usage.cache_read_input_tokens or 0) * rates.cache_read_per_mtok / million
    )
    into["cache_write"] += Decimal(usage.cache_creation_input_tokens or 0) * written / million
    into["output"] += Decimal(usage.output_tokens) * rates.output_per_mtok / million


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON and write --out")
    parser.add_argument(
        "--out", type=Path, default=REPO / "bench" / "results" / "gateway_cost.json"
    )
    parser.add_argument("--split", choices=sorted(SEEDS), default="test")
    parser.add_argument("--sessions", type=int, default=1)
    parser.add_argument("--requests", type=int, default=320)
    parser.add_argument("--windows", default="32768,131072")
    parser.add_argument("--quick", action="store_true", help="one 120-request session at 16k")
    parser.add_argument("--startup-timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.windows, args.sessions = 120, "16384", 1
    windows = [int(w) for w in args.windows.split(",") if w.strip()]
    if args.requests < 2 or args.sessions < 1 or not windows:
        parser.error("requests >= 2, sessions >= 1 and a window are needed")

    data_dir = Path(tempfile.mkdtemp(prefix="scroll-bench-gateway-cost-"))
    upstream = Recorder()
    server = Gateway(data_dir, free_port())
    result: dict[str, Any] = {"split": args.split, "requests_per_session": args.requests}
    totals: dict[str, dict[str, Any]] = {}
    fronts: dict[str, list[dict[str, int]]] = {}
    headline_tokens = 0
    try:
        keys = server.prepare(upstream.url, windows)
        server.start(args.startup_timeout)
        for n in range(args.sessions):
            seed = SEEDS[args.split] + n
            base = session(seed, args.requests)
            result[f"session_{seed}_tool_results"] = base.tool_results
            result["material"] = base.source
            # What the Scroll arm's replies carry more than the others' (its output counts it).
            headline_tokens += sum(counter.count("\n" + step.headline) for step in base.steps)
            asked = probes(base, PROBES)  # the same facts asked of every arm and window
            for window in windows:
                # Tool ids are unique in the gateway's Event Log: each window gets its own.
                s = renamed(base, f"w{window}")
                played = {
                    "resend": resend_arm(s),
                    "compact": compact_arm(s, window, min(4000, int(0.06 * window))),
                    "scroll": scroll_arm(
                        s, server.base, keys[f"scroll-{window}"], upstream, f"s{seed}-{window}"
                    ),
                    # The same under the reference's tail and trigger (DESIGN.md's defaults).
                    "scroll_reference": scroll_arm(
                        renamed(base, f"r{window}"),
                        server.base,
                        keys[f"reference-{window}"],
                        upstream,
                        f"r{seed}-{window}",
                    ),
                }
                arms = {
                    arm: price(requests, window, "compaction" if arm == "compact" else "eviction")
                    for arm, requests in played.items()
                }
                agents = {
                    "scroll": f"cost-scroll-{window}",
                    "scroll_reference": f"cost-reference-{window}",
                }
                for arm, requests in played.items():
                    last = requests[-1][0]
                    holds = [held(last, p) for p in asked]
                    if arm in agents:
                        missing = [p for p, h in zip(asked, holds, strict=True) if not h]
                        found = recalled(server.log_path, agents[arm], missing)
                    else:
                        found = []
                    arms[arm]["recall"] = {
                        "probes": len(asked),
                        "held": sum(holds),
                        "recalled": sum(found),
                        "answered": sum(holds) + sum(found),
                    }
                for arm, figures in arms.items():
                    name = f"w{window // 1024}k.{arm}"
                    # Each front break (eviction, compaction): the view before and after.
                    fronts.setdefault(f"{name}.fronts", []).extend(figures.pop("fronts"))
                    _add(totals.setdefault(name, {}), figures)
    finally:
        server.stop()
        upstream.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    for name, figures in totals.items():
        window = name.split(".")[0]
        base = totals[f"{window}.resend"]["cost_uncached"]
        figures["relative"] = {rule: figures["cost"][rule] / base[rule] for rule in RULES}
        evictions = figures["breaks"].get("eviction", 0)
        if name.endswith((".scroll", ".scroll_reference")):
            folds = figures["breaks"].get("fold", 0)
            figures["fold_breaks_per_eviction"] = folds / max(1, evictions)
            figures["headline_output_tokens"] = headline_tokens
        result[name] = figures
    result.update(fronts)
    result["readme_tables"] = readme_tables(windows)
    emit(result, args.json, quick=args.quick)
    if args.json:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(envelope(result, quick=args.quick), indent=2, sort_keys=True) + "\n"
        )
    return 0


def readme_tables(windows: list[int]) -> list[dict[str, Any]]:
    """The docs' tables: cost relative to resending everything uncached, per rule."""
    columns = [f"w{w // 1024}k" for w in windows]
    tables = [
        {
            "title": f"Cost relative to resend-all without a cache, {rule}'s rule",
            "rows": ["resend", "compact", "scroll", "scroll_reference"],
            "columns": columns,
            "key": f"{{column}}.{{row}}.relative.{rule}",
        }
        for rule in RULES
    ]
    tables.append(
        {
            "title": "Where the money goes, anthropic's rule (dollars per session)",
            "rows": ["cache_read", "cache_write", "input", "output"],
            "columns": [f"{c}.{arm}" for c in columns for arm in ("compact", "scroll")],
            "key": "{column}.cost_parts.anthropic.{row}",
        }
    )
    tables.append(
        {
            "title": f"What each arm can still answer at the end, of {PROBES} facts per session "
            "that one tool result held (held in its last request + recalled by ms.search)",
            "rows": ["held", "recalled", "answered"],
            "columns": [f"{c}.{arm}" for c in columns for arm in ("compact", "scroll")],
            "key": "{column}.recall.{row}",
        }
    )
    tables.append(
        {
            "title": "Scroll's prefix breaks by cause (of consecutive requests)",
            "rows": ["append", "fold", "eviction", "prefix", "other"],
            "columns": columns,
            "key": "{column}.scroll.breaks.{row}",
        }
    )
    return tables


def renamed(s: Session, tag: str) -> Session:
    """``s`` with every tool id made unique to ``tag`` (the same length in every arm)."""
    data = json.dumps([s.steps_as_data()]).replace('"toolu_', f'"toolu_{tag}_')
    return Session.from_data(s, json.loads(data)[0])


def _add(into: dict[str, Any], figures: dict[str, Any]) -> None:
    for key, value in figures.items():
        if isinstance(value, dict):
            _add(into.setdefault(key, {}), value)
        else:
            into[key] = into.get(key, 0) + value


if __name__ == "__main__":
    sys.exit(main())
