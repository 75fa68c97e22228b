"""Call-record size: what keeping every upstream request exactly costs on a long, evicting
gateway session, against the bytes of the windows themselves.

    python bench/record_size.py [--json] [--sample 2] [--turns 300] [--context 3000]

One LoCoMo conversation (``../shared/data/locomo``; sample 2 has 323 exchanges) goes through
``GatewayConversation`` as successive Chat Completions requests, the history growing each
time; a loopback HTTP upstream answers each with the conversation's next reply, so every
request crosses a real socket and is captured as ``HttpUpstream`` wrote it
(``scroll_core.wire``). The profile's window C is small (3,000 tokens by default), so the
session evicts all along.

Every captured body is then stored in call order the way the console stores it
(``wire.encode`` against the call before, a keyframe every ``KEYFRAME_EVERY`` calls,
``wire.stored_size``: the fields plus the blobs a call is the first to bring), and checked
to decode to the very bytes sent. Beside it, in the same run, two ways of keeping the same
windows without the format: each body compressed on its own (zlib, level 6), and all bodies
through one zlib stream flushed after each call (an append-only compressed log, which finds
repeats only within its 32 KiB window).

``record_ratio`` (record bytes over window bytes) is the figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit, envelope
from _gateway_data import completion_for, locomo_exchanges
from gateway import Upstream  # the gateway bench's loopback upstream

from scroll_core import wire
from scroll_core.gateway import GatewayConversation, parse_chat_request
from scroll_core.gateway.upstream import HttpUpstream
from scroll_core.profile import Profile
from scroll_core.store import EventLog
from scroll_core.tokens import CharRatioCounter

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo10.json"


def session_calls(sample: int, turns: int, context: int) -> tuple[list[wire.WireCall], int]:
    """The captured calls of one evicting gateway session, and its evictions."""
    exchanges = locomo_exchanges(DATA, sample=sample)[:turns]
    if len(exchanges) < turns:
        raise SystemExit(f"sample {sample} has only {len(exchanges)} exchanges")
    server = Upstream()
    upstream = HttpUpstream(server.url)
    captured = wire.WireLog()
    evictions = 0
    with (
        tempfile.TemporaryDirectory() as tmp,
        EventLog(Path(tmp) / "log.sqlite3", token_counter=CharRatioCounter()) as log,
    ):
        conv = GatewayConversation(
            log, session_id="bench:record", agent_id="bench", profile=Profile(context_size=context)
        )
        history: list[dict[str, Any]] = [{"role": "system", "content": "Reply as the friend."}]
        try:
            with wire.collecting(captured):
                for said, answer in exchanges:
                    history.append({"role": "user", "content": said})
                    server.queue.append(completion_for(answer))
                    request = parse_chat_request({"model": "m", "messages": history})
                    reply = conv.handle(request, upstream, model="upstream-model")
                    history.append({"role": "assistant", "content": reply.content})
                    evictions += reply.stats.evictions
        finally:
            conv.close()
            upstream.close()
            server.close()
    return captured.drain(), evictions


def measure(calls: list[wire.WireCall]) -> dict[str, Any]:
    known: set[str] = set()
    blobs: dict[str, str] = {}
    previous: list[str] | None = None
    record = separate = 0
    stream = zlib.compressobj(6)
    streamed = 0
    for i, call in enumerate(calls):
        enc = wire.encode(call.body, previous, keyframe=i % wire.KEYFRAME_EVERY == 0)
        blobs.update(enc.blobs)
        digests = enc.message_digests if enc.encoding != "raw" else None
        if wire.decode(enc.encoding, enc.fields, blobs, digests) != call.body:
            raise SystemExit(f"call {i} does not decode to the bytes sent")
        if enc.encoding != "raw":
            previous = enc.message_digests
        record += wire.stored_size(enc, known)
        separate += len(zlib.compress(call.body, 6))
        streamed += len(stream.compress(call.body)) + len(stream.flush(zlib.Z_SYNC_FLUSH))
    windows = sum(len(c.body) for c in calls)
    n = len(calls)
    return {
        "calls": n,
        "raw_bodies": sum(1 for c in calls if not c.body.startswith(b"{")),
        "window_bytes": windows,
        "window_bytes_per_call": round(windows / n),
        "record_bytes": record,
        "record_bytes_per_call": round(record / n),
        "record_ratio": round(record / windows, 4),
        "zlib_each_bytes_per_call": round(separate / n),
        "zlib_each_ratio": round(separate / windows, 4),
        "zlib_stream_bytes_per_call": round(streamed / n),
        "zlib_stream_ratio": round(streamed / windows, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sample", type=int, default=2)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--context", type=int, default=3000)
    args = parser.parse_args()
    calls, evictions = session_calls(args.sample, args.turns, args.context)
    result = {"turns": args.turns, "context": args.context, "evictions": evictions}
    result |= measure(calls)
    emit(result, args.json)
    if args.json:
        out = Path(__file__).resolve().parent / "results" / "record_size.json"
        out.write_text(json.dumps(envelope(result), indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
