"""The token counts an append stores are tiktoken's own, whichever way they were counted:
ASCII text piece by piece on the calling thread, the rest on the token thread or (with
``token_thread=False``) on the calling thread; and an invalid event still refuses the
whole batch."""

from __future__ import annotations

import threading

import pytest

from scroll_core import InvalidEvent
from scroll_core.tokens import default_counter


@pytest.fixture(params=[True, False], ids=["token_thread", "calling_thread"])
def store_options(request):
    return {"token_thread": request.param}


def _events(n: int) -> list[dict]:
    contents = [
        "plain ascii words, it's 2026 -- OK?\n\n  indented",
        "ünïcödé and 漢字 mixed with ascii",
        "",
        "x" * 40 + "\r\n" + "y " * 30,
        "emoji 🙂 at the end 🙂",
        "we'LL   see\t\x0b\x0c\x1c end   ",
    ]
    return [
        {"session_id": f"s{i % 3}", "kind": "context_msg", "content": contents[i % 6] + str(i)}
        for i in range(n)
    ]


@pytest.mark.parametrize("n", [7, 260])  # one chunk, and several chunks of a large batch
def test_stored_tokens_are_tiktokens_counts(store, n):
    enc = default_counter()._enc
    events = _events(n)
    seqs = store.append_many(events)
    stored = [store.get(seq).tokens for seq in seqs]
    assert stored == [len(enc.encode_ordinary(e["content"])) for e in events]
    summaries = {s.session_id: s.tokens for s in store.sessions()}
    for session in ("s0", "s1", "s2"):
        assert summaries[session] == sum(
            t for t, e in zip(stored, events, strict=True) if e["session_id"] == session
        )


def test_the_token_thread_counts_only_what_is_not_ascii(store, monkeypatch):
    if not store.token_thread:
        pytest.skip("no token thread")
    seen: list[int] = []
    count = store.tokens.count_many_gil_free

    def watched(texts):
        seen.append(threading.get_ident())
        assert all(not t.isascii() for t in texts)
        return count(texts)

    monkeypatch.setattr(store.tokens, "count_many_gil_free", watched)
    store.append_many(_events(200))
    assert seen and threading.get_ident() not in seen


def test_an_invalid_event_late_in_a_large_batch_refuses_all_of_it(store):
    events = _events(180)
    events[170]["created_at"] = "not a date"
    with pytest.raises(InvalidEvent, match="event 170: invalid created_at"):
        store.append_many(events)
    assert store.count() == 0
    assert store.append_many(_events(3)) == [1, 2, 3]  # the refused batch took no seq
