"""The call record's storage format: any body comes back byte for byte, consecutive calls
share their messages, and a record missing a piece says which instead of guessing."""

from __future__ import annotations

import json

import pytest

from scroll_core import wire


def _body(messages, **extra) -> bytes:
    return json.dumps({"model": "m", "messages": messages, **extra}, ensure_ascii=False,
                      separators=(",", ":")).encode()  # fmt: skip


def _roundtrip(body: bytes, previous=None, blobs=None) -> tuple[wire.Encoded, bytes]:
    enc = wire.encode(body, previous)
    store = {**(blobs or {}), **enc.blobs}
    digests = enc.message_digests if enc.encoding != "raw" else None
    return enc, wire.decode(enc.encoding, enc.fields, store, digests)


@pytest.mark.parametrize(
    "body",
    [
        _body([{"role": "user", "content": "héllo ☃"}]),
        json.dumps({"messages": [{"role": "user", "content": "x"}], "t": 0.1}).encode(),
        json.dumps({"messages": [], "a": "é"}, separators=(",", ":")).encode(),
        b'{"messages": [{"role": "user", "content": "\\ud800 lone"}]}',
        b'{"a": 1, "a": 2, "messages": []}',  # a duplicate key: parsed once, kept whole
        b'{"a":1,  "messages":[]}',  # spacing no encoder writes
        b"not json at all",
        b"[1, 2, 3]",
        b"",
    ],
)
def test_every_body_comes_back_byte_for_byte(body):
    enc, back = _roundtrip(body)
    assert back == body
    if body in (b'{"a": 1, "a": 2, "messages": []}', b"not json at all", b""):
        assert enc.encoding == "raw"


def test_a_call_that_appends_stores_a_run_and_the_new_messages_only():
    first = [{"role": "system", "content": "s" * 3000}, {"role": "user", "content": "q1"}]
    second = [*first, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"}]
    one = wire.encode(_body(first, tools=[{"name": "t" * 200}]))
    two = wire.encode(_body(second, tools=[{"name": "t" * 200}]), one.message_digests)
    pieces = next(f[2] for f in two.fields if f[0] == "messages")
    assert pieces[0] == [0, 2] and len(pieces) == 3
    known = set(one.blobs)
    # The tool list is the same blob as before: only the two new messages are new.
    assert wire.stored_size(two, known) < len(_body(second)) // 8
    digests = wire.expand_messages(pieces, one.message_digests)
    back = wire.decode(two.encoding, two.fields, {**one.blobs, **two.blobs}, digests)
    assert back == _body(second, tools=[{"name": "t" * 200}])


def test_an_eviction_that_rewrites_the_front_still_copies_the_kept_tail():
    tail = [{"role": "user", "content": f"m{i}"} for i in range(6)]
    before = [{"role": "system", "content": "s"}, *tail]
    after = [{"role": "system", "content": "s"}, {"role": "user", "content": "index"}, *tail[3:]]
    one = wire.encode(_body(before))
    two = wire.encode(_body(after), one.message_digests)
    pieces = next(f[2] for f in two.fields if f[0] == "messages")
    assert pieces == [[0, 1], two.message_digests[1], [4, 3]]


def test_a_missing_piece_is_named_not_guessed():
    enc = wire.encode(_body([{"role": "user", "content": "q"}]))
    with pytest.raises(wire.RecordDecodeError, match="missing from the record"):
        wire.decode(enc.encoding, enc.fields, {}, enc.message_digests)
    with pytest.raises(wire.RecordDecodeError, match="previous call does not have"):
        wire.expand_messages([[0, 3]], ["only-one"])
    with pytest.raises(wire.RecordDecodeError, match="unknown encoding"):
        wire.decode("zstd", enc.fields, enc.blobs, enc.message_digests)


def test_nothing_is_captured_outside_collecting_and_a_failed_call_is_kept():
    with wire.calling("m", session="s", source="run") as call:
        assert call is None
    log = wire.WireLog()
    calling = wire.calling("m", session="s", source="run", request=lambda: {"x": 1})
    with pytest.raises(RuntimeError), wire.collecting(log), calling:
        wire.note_sent("http://up/v1/chat/completions", b'{"try":1}')
        wire.note_sent("http://up/v1/chat/completions", b'{"try":2}')
        raise RuntimeError("upstream gone")
    (call,) = log.drain()
    assert call.status == "error" and "upstream gone" in call.error
    assert call.body == b'{"try":2}' and call.sends == 2  # the last attempt's bytes
