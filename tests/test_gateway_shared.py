"""The gateway's shared limits and session leases (dashboard.gateway.shared), in memory and
in a real Redis: two ``RedisLimits`` stand for two web processes."""

from __future__ import annotations

import secrets

import pytest

from dashboard.gateway.shared import LimitRefused, LocalLimits, RedisLimits


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
