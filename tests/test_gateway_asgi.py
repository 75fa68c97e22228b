"""The gateway's routes answered in front of Django (dashboard.gateway.asgi): what they
skip, what they still refuse, the timing they report, and the caches on their path."""

from __future__ import annotations

import httpx
import openai
import pytest
from gateway_clients import ask, make_key, oa

from dashboard.gateway.models import GatewayKey
from dashboard.runs.models import TuningProfile

pytestmark = pytest.mark.django_db(transaction=True)


def test_gateway_routes_skip_the_consoles_middleware_and_other_paths_still_reach_django(
    gateway, upstream
):
    key = make_key(upstream)
    with httpx.Client(base_url=gateway) as http:
        models = http.get("/v1/models", headers={"authorization": f"Bearer {key}"})
        assert models.status_code == 200 and models.json()["object"] == "list"
        # No console middleware ran: no session cookie, no page security policy.
        assert "content-security-policy" not in models.headers
        assert "set-cookie" not in models.headers
        unknown = http.get("/v1/nothing-here", headers={"authorization": f"Bearer {key}"})
        assert unknown.status_code == 404  # Django's answer: not a gateway route
        login = http.get("/admin/login/")
        assert login.status_code == 200 and "content-security-policy" in login.headers


def test_a_body_over_the_limit_is_refused_in_the_providers_shape_without_reaching_upstream(
    gateway, upstream, settings
):
    settings.SCROLL_GATEWAY_MAX_BODY_MB = 1
    key = make_key(upstream)
    big = {"model": "gpt-test", "messages": [{"role": "user", "content": "x" * 1_200_000}]}
    with httpx.Client(base_url=gateway, headers={"authorization": f"Bearer {key}"}) as http:
        declared = http.post("/v1/chat/completions", json=big)
        assert declared.status_code == 413
        assert declared.json()["error"]["param"] == "body"
        anthropic_shape = http.post("/v1/messages", json=big)
        assert anthropic_shape.status_code == 413
        assert anthropic_shape.json()["type"] == "error"
        # A chunked body announces no length: it is refused once it passes the limit.
        chunks = (b"x" * 65536 for _ in range(20))
        streamed = http.post("/v1/chat/completions", content=chunks)
        assert streamed.status_code == 413
        small = http.post(
            "/v1/chat/completions",
            json={"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert small.status_code == 200
    assert len(upstream.requests) == 1  # only the small one


def test_a_body_nested_too_deep_is_a_400_in_the_providers_shape_not_a_500(gateway, upstream):
    # Issue 31: a body nested 200,000 deep raised RecursionError in the JSON parser (a 500).
    key = make_key(upstream)
    deep = b'{"model": "gpt-test", "messages": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    with httpx.Client(base_url=gateway, headers={"authorization": f"Bearer {key}"}) as http:
        for path in ("/v1/chat/completions", "/v1/responses", "/v1/messages"):
            answer = http.post(path, content=deep, headers={"content-type": "application/json"})
            assert answer.status_code == 400, (path, answer.text[:300])
            said = answer.json()
            error = said["error"]
            assert "nested deeper" in error["message"], path
            if path == "/v1/messages":
                assert said["type"] == "error" and error["type"] == "invalid_request_error"
        # The same depth inside a tool call's arguments string (the parser decodes those too).
        arguments = "[" * 200_000 + "]" * 200_000
        history = {
            "model": "gpt-test",
            "messages": [
                {"role": "user", "content": "go"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "f", "arguments": arguments},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "done"},
            ],
        }
        served = http.post("/v1/chat/completions", json=history)
        assert served.status_code in (200, 400), served.text[:300]
    assert len(upstream.requests) <= 1  # only the history, if it was served


def test_server_timing_reports_each_stage_of_a_served_request(gateway, upstream):
    raw = oa(gateway, make_key(upstream)).chat.completions.with_raw_response.create(
        model="gpt-test", messages=[{"role": "user", "content": "hello"}]
    )
    timing = dict(
        (name.strip(), float(dur))
        for name, _, dur in (
            item.partition(";dur=") for item in raw.headers["server-timing"].split(",")
        )
    )
    for stage in ("auth", "parse", "align", "append", "compress", "upstream", "hop_back", "scroll"):
        assert stage in timing, (stage, timing)
    # The reply is committed after the answer left: its time is on the request span only.
    assert "log" not in timing and "bookkeeping" not in timing
    assert timing["scroll"] >= timing["upstream"] >= 0
    assert raw.parse().choices[0].message.content == "ok 1"


def test_a_key_deactivated_in_admin_stops_working_at_the_next_request(gateway, upstream):
    secret = make_key(upstream)
    client = oa(gateway, secret)
    ask(client, [{"role": "user", "content": "one"}])
    key = GatewayKey.objects.get(agent_id="alice")
    key.active = False
    key.save()
    with pytest.raises(openai.AuthenticationError):
        ask(client, [{"role": "user", "content": "two"}])
    key.active = True
    key.save()
    ask(client, [{"role": "user", "content": "three"}])


def test_a_profile_edit_applies_at_the_next_request(gateway, upstream):
    profile = TuningProfile.objects.create(name="gw-edit", context_size=8192)
    client = oa(gateway, make_key(upstream, profile=profile))
    history = [{"role": "user", "content": "one"}]
    first = ask(client, history)
    assert first.to_dict()["scroll"]["context_size"] == 8192
    profile.context_size = 16384
    profile.save()
    history += [{"role": "assistant", "content": "ok 1"}, {"role": "user", "content": "two"}]
    assert ask(client, history).to_dict()["scroll"]["context_size"] == 16384


def test_a_spent_budget_holds_while_the_consoles_record_lags_and_an_admin_reset_refills_it(
    gateway, upstream
):
    from dashboard.gateway.service import get_service

    get_service().recorder.linger_s = 600  # nothing reaches the database until flush()
    secret = make_key(upstream, token_budget=100)
    client = oa(gateway, secret)
    ask(client, [{"role": "user", "content": "one"}])  # spends 132
    make_key(upstream, agent="bob")  # a key saved elsewhere drops every cached key
    assert GatewayKey.objects.get(agent_id="alice").tokens_used == 0  # the record lags
    with pytest.raises(openai.RateLimitError):
        ask(client, [{"role": "user", "content": "two"}])
    get_service().flush()
    key = GatewayKey.objects.get(agent_id="alice")
    assert key.tokens_used == 132
    key.tokens_used = 0  # the operator refills the budget in admin
    key.save()
    ask(client, [{"role": "user", "content": "three"}])


def test_an_unknown_v1_route_is_a_404_in_the_clients_api_shape_not_the_consoles_page(
    gateway, upstream
):
    key = make_key(upstream)
    with httpx.Client(base_url=gateway) as http:
        openai_shape = http.get("/v1/embeddings", headers={"authorization": f"Bearer {key}"})
        assert openai_shape.status_code == 404
        assert openai_shape.headers["content-type"].startswith("application/json")
        error = openai_shape.json()["error"]
        assert error["code"] == "not_found" and "GET /v1/embeddings" in error["message"]
        anthropic_shape = http.post(
            "/v1/messages/batches", json={}, headers={"x-api-key": key, "anthropic-version": "1"}
        )
        assert anthropic_shape.status_code == 404
        said = anthropic_shape.json()
        assert said["type"] == "error" and said["error"]["type"] == "not_found_error"
        # Routes that exist still answer, and pages outside /v1/ are still the console's.
        assert http.get("/v1/models", headers={"authorization": f"Bearer {key}"}).status_code == 200
        assert "text/html" in http.get("/no-such-page/").headers["content-type"]
    assert not upstream.requests
