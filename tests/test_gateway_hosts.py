"""The gateway's routes skip Django but not its host check (dashboard.gateway.hosts)."""

from __future__ import annotations

import httpx
import pytest
from gateway_clients import make_key

from dashboard.gateway.hosts import HostCheck

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}


def test_a_host_outside_allowed_hosts_gets_400_in_each_providers_shape_and_reaches_nothing(
    gateway, upstream
):
    key = make_key(upstream)
    auth = {"authorization": f"Bearer {key}"}
    with httpx.Client(base_url=gateway, headers=auth) as http:
        good = http.post("/v1/chat/completions", json=CHAT)
        assert good.status_code == 200
        bad = http.post("/v1/chat/completions", json=CHAT, headers={"host": "evil.example"})
        assert bad.status_code == 400
        error = bad.json()["error"]
        assert error["type"] == "invalid_request_error" and error["code"] == "disallowed_host"
        assert "evil.example" in error["message"]
        anthropic_shape = http.post(
            "/v1/messages",
            json={**CHAT, "max_tokens": 10},
            headers={"host": "evil.example:443", "x-api-key": key},
        )
        assert anthropic_shape.status_code == 400
        assert anthropic_shape.json()["type"] == "error"
        assert anthropic_shape.json()["error"]["type"] == "invalid_request_error"
        listed = http.get("/v1/models", headers={"host": "evil.example"})
        assert listed.status_code == 400
    assert len(upstream.requests) == 1  # only the good request went upstream


def test_the_host_check_follows_djangos_rule():
    check = HostCheck(["api.example.com", ".corp.example", "127.0.0.1"])
    assert check.allows("api.example.com")
    assert check.allows("API.example.com:8443")  # case and port do not matter
    assert check.allows("a.b.corp.example") and check.allows("corp.example")
    assert check.allows("127.0.0.1:9000")
    assert not check.allows("example.com")
    assert not check.allows("api.example.com.evil.test")
    assert not check.allows("")
    assert not check.allows("bad host!")
    assert HostCheck([], debug=True).allows("localhost:8000")
    assert not HostCheck([], debug=False).allows("localhost")
    assert HostCheck(["*"]).allows("anything.example")
