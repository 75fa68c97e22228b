"""The gateway's shared limits and session leases (dashboard.gateway.shared), in memory and
in a real Redis: two ``RedisLimits`` stand for two web processes."""

from __future__ import annotations

import secrets

import pytest

from dashboard.gateway.shared import LimitRefused, LocalLimits, RedisLimits, SessionBusy


@pytest.fixture
def pair(redis_server):
    # A namespace of their own: the session-wide Redis serves every test.
    namespace = f"test-{secrets.token_hex(4)}"
    made = [
        RedisLimits(redis_server.url, owner, lease_s=30, namespace=namespace)
        for owner in ("gateway:a", "gateway:b")
    ]
    yield made
    for limits in made:
        limits.close()


def test_two_processes_share_one_sliding_window_and_a_refusal_takes_no_lease(pair):
    a, b = pair
    admitted = [(a if i % 2 else b).admit(1, 4, 0, 0, f"s{i}") for i in range(4)]
    assert len(admitted) == 4
    with pytest.raises(LimitRefused, match="4 requests per minute"):
        a.admit(1, 4, 0, 0, "refused-session")
    # The refused request did not take its session: the next owner finds it free.
    assert b.renew(["refused-session"]) == ["refused-session"]
    # Another key has its own window.
    assert a.admit(2, 4, 0, 0, "other-key").previous == ""


def test_a_budget_is_seeded_from_the_console_and_grows_with_every_process_spend(pair):
    a, b = pair
    a.admit(7, 0, 1000, 600, "s")  # the console says 600 spent
    b.spend(7, 300)
    b.admit(7, 0, 1000, 0, "s")  # a stale console count does not lower the shared one
    a.spend(7, 150)
    with pytest.raises(LimitRefused, match="token budget"):
        b.admit(7, 0, 1000, 0, "s")
    a.forget_key(7)  # saved in admin: seeded from the console again
    assert a.admit(7, 0, 1000, 100, "s").previous in ("gateway:a", "gateway:b")


def test_a_spend_before_any_admission_counts_nothing(pair):
    a, _ = pair
    a.spend(9, 10_000)  # not seeded: ignored, so the console's count seeds it later
    a.admit(9, 0, 5_000, 0, "s")


def test_the_lease_says_who_held_the_session_and_renew_finds_it_taken(pair):
    a, b = pair
    assert a.admit(1, 0, 0, 0, "sess").previous == ""
    assert a.admit(1, 0, 0, 0, "sess").previous == "gateway:a"
    assert b.admit(1, 0, 0, 0, "sess").previous == "gateway:a"  # taken over
    assert a.renew(["sess", "never"]) == ["sess", "never"]
    assert b.renew(["sess"]) == []
    a.release("sess")  # not a's to release
    assert a.admit(1, 0, 0, 0, "sess").previous == "gateway:b"
    a.release("sess")
    assert b.admit(1, 0, 0, 0, "sess").previous == ""


def test_in_one_process_the_same_rules_hold_in_memory():
    limits = LocalLimits("gateway:only")
    for _ in range(3):
        limits.admit(1, 3, 0, 0, "s")
    with pytest.raises(LimitRefused, match="3 requests per minute"):
        limits.admit(1, 3, 0, 0, "s")
    limits.admit(2, 0, 100, 60, "t")
    limits.spend(2, 50)
    with pytest.raises(LimitRefused, match="token budget"):
        limits.admit(2, 0, 100, 60, "t")
    assert limits.admit(3, 0, 0, 0, "u").previous == ""
    assert limits.admit(3, 0, 0, 0, "u").previous == "gateway:only"
    limits.release("u")
    assert limits.admit(3, 0, 0, 0, "u").previous == ""


def test_two_consoles_sharing_one_redis_do_not_share_counts_or_leases(redis_server):
    one = RedisLimits(redis_server.url, "gateway:a", 30, namespace=secrets.token_hex(4))
    two = RedisLimits(redis_server.url, "gateway:b", 30, namespace=secrets.token_hex(4))
    try:
        one.admit(1, 1, 0, 0, "s")
        assert two.admit(1, 1, 0, 0, "s").previous == ""  # its own key 1, its own session
        with pytest.raises(LimitRefused):
            one.admit(1, 1, 0, 0, "s")
    finally:
        one.close()
        two.close()


@pytest.mark.parametrize("where", ["memory", "redis"])
def test_a_refunded_request_gives_its_slot_of_the_window_and_its_lease_back(where, pair):
    limits = LocalLimits("gateway:a") if where == "memory" else pair[0]
    kept = limits.admit(5, 2, 0, 0, "kept")
    for _ in range(6):  # refused after admission (a run worker holds the session), refunded
        limits.refund(5, limits.admit(5, 2, 0, 0, "refused"), "refused")
    second = limits.admit(5, 2, 0, 0, "kept")
    assert second.previous == "gateway:a" and second.slot != kept.slot
    with pytest.raises(LimitRefused, match="2 requests per minute"):
        limits.admit(5, 2, 0, 0, "third")
    # The refunded session's lease is free again; the served one's is not.
    assert limits.admit(6, 0, 0, 0, "refused").previous == ""
    assert limits.admit(6, 0, 0, 0, "kept").previous == "gateway:a"


def test_a_session_is_held_by_one_request_at_a_time_across_processes(pair):
    a, b = pair
    held = a.hold("s", 0.0)
    with pytest.raises(SessionBusy, match="serving another request"):
        b.hold("s", 0.0)
    with pytest.raises(SessionBusy):
        b.hold("s", 0.05)  # a bounded wait, then refused
    assert b.hold("other", 0.0) is not None  # another session is free
    a.keep([held])  # the heartbeat keeps a long request's hold
    a.unhold(held)
    again = b.hold("s", 0.0)
    a.unhold(held)  # a second release by the old holder does not free the new one's hold
    with pytest.raises(SessionBusy):
        a.hold("s", 0.0)
    b.unhold(again)


def test_a_hold_whose_process_died_expires_with_the_lease(redis_server):
    namespace = f"test-{secrets.token_hex(4)}"
    dead = RedisLimits(redis_server.url, "gateway:dead", lease_s=0.2, namespace=namespace)
    alive = RedisLimits(redis_server.url, "gateway:alive", lease_s=30, namespace=namespace)
    try:
        dead.hold("s", 0.0)  # never released, never kept
        # Waits for Redis to expire it (a bounded wait), rather than being refused.
        alive.unhold(alive.hold("s", 10.0))
    finally:
        dead.close()
        alive.close()


def test_in_one_process_holding_needs_no_lock_here():
    limits = LocalLimits("gateway:only")
    assert limits.hold("s", 0.0) is None and limits.hold("s", 0.0) is None
