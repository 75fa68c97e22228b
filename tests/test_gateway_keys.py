"""Gateway keys: created in admin, shown once, stored hashed, validated."""

from __future__ import annotations

import re

import pytest
from django.core.exceptions import ValidationError

from dashboard.gateway.models import GatewayKey, hash_key

pytestmark = pytest.mark.django_db


def test_admin_creates_a_key_shows_it_once_and_keeps_only_its_hash(admin_client):
    response = admin_client.post(
        "/admin/gateway/gatewaykey/add/",
        {
            "agent_id": "support-bot",
            "name": "support",
            "active": "on",
            "upstream_format": "openai",
            "upstream_base_url": "http://127.0.0.1:9/v1",
            "upstream_key_env": "SUPPORT_UPSTREAM_KEY",
            "model_map": '{"gpt-4o": "qwen2.5"}',
            "upstream_timeout_s": "60",
            "max_recall_steps": "4",
            "rate_limit_per_minute": "0",
            "token_budget": "0",
        },
        follow=True,
    )
    assert response.status_code == 200
    shown = set(re.findall(r"sk-scroll-[A-Za-z0-9_-]+", response.content.decode()))
    secret = max(shown, key=len)  # the key once; the list shows its prefix
    assert len(secret) > 40 and all(secret.startswith(s) for s in shown)
    key = GatewayKey.objects.get(agent_id="support-bot")
    assert key.key_hash == hash_key(secret) and secret.startswith(key.prefix)
    assert secret not in str(GatewayKey.objects.values().get(pk=key.pk))
    assert GatewayKey.authenticate(secret) == key
    assert GatewayKey.authenticate(secret[:-1] + ("A" if secret[-1] != "A" else "B")) is None
    # The change page never shows it again.
    page = admin_client.get(f"/admin/gateway/gatewaykey/{key.pk}/change/").content.decode()
    assert secret not in page and key.prefix in page


def test_admin_sets_a_keys_upstream_format_and_refuses_an_unknown_one(admin_client):
    form = {
        "agent_id": "claude-coder",
        "active": "on",
        "upstream_format": "anthropic",
        "upstream_base_url": "https://api.anthropic.com",
        "upstream_key_env": "ANTHROPIC_KEY",
        "model_map": "{}",
        "upstream_timeout_s": "60",
        "max_recall_steps": "4",
        "rate_limit_per_minute": "0",
        "token_budget": "0",
    }
    response = admin_client.post("/admin/gateway/gatewaykey/add/", form, follow=True)
    assert response.status_code == 200
    assert GatewayKey.objects.get(agent_id="claude-coder").upstream_format == "anthropic"
    refused = admin_client.post(
        "/admin/gateway/gatewaykey/add/",
        {**form, "agent_id": "other", "upstream_format": "gemini"},
    )
    assert refused.status_code == 200 and "Select a valid choice" in refused.content.decode()
    assert not GatewayKey.objects.filter(agent_id="other").exists()
    # A key made without saying (as every key before the field existed) is OpenAI-format.
    assert GatewayKey(agent_id="x", upstream_base_url="http://h/v1").upstream_format == "openai"


def test_an_upstream_key_cannot_be_stored_in_place_of_its_variable_name():
    key = GatewayKey(
        agent_id="a", upstream_base_url="http://127.0.0.1:9/v1", upstream_key_env="sk-live-123"
    )
    key.set_new_key()
    with pytest.raises(ValidationError) as caught:
        key.full_clean()
    assert "upstream_key_env" in caught.value.message_dict


def test_a_deactivated_key_no_longer_authenticates():
    key, secret = GatewayKey.issue(agent_id="a", upstream_base_url="http://127.0.0.1:9/v1")
    assert GatewayKey.authenticate(secret) == key
    GatewayKey.objects.filter(pk=key.pk).update(active=False)
    assert GatewayKey.authenticate(secret) is None


def test_the_model_map_maps_and_falls_back():
    key = GatewayKey(model_map={"gpt-4o": "qwen", "*": "llama"})
    assert key.upstream_model("gpt-4o") == "qwen" and key.upstream_model("other") == "llama"
    assert key.client_models() == ["gpt-4o"]
    assert GatewayKey(model_map={}).upstream_model("as-is") == "as-is"


def test_a_new_key_starts_with_the_long_window_cache_profile_and_the_default_without_it(
    admin_client,
):
    from dashboard.runs.models import CACHED_PROFILE_NAME, TuningProfile
    from dashboard.runs.profiles import core_profile

    key, _ = GatewayKey.issue(agent_id="cached", upstream_base_url="http://127.0.0.1:9/v1")
    assert key.profile is not None and key.profile.name == CACHED_PROFILE_NAME
    # Its sessions evict at 98,304 tokens down to a 4,096-token tail at a 128k window,
    # where the default profile waits until 102,400 and keeps 12,800.
    cached, default = core_profile(key.profile_id), core_profile(None)
    assert cached.context_size == default.context_size == 128_000
    assert (cached.trigger_tokens, cached.tail_tokens) == (98_304, 4_096)
    assert (default.trigger_tokens, default.tail_tokens) == (102_400, 12_800)
    # The admin's add form offers it first too.
    page = admin_client.get("/admin/gateway/gatewaykey/add/").content.decode()
    field = re.search(r'<select name="profile".*?</select>', page, re.DOTALL)
    selected = field and re.search(r'<option value="(\d+)" selected>', field.group(0))
    assert selected and int(selected.group(1)) == key.profile_id

    # An operator who deletes it leaves the keys on the default profile, and new keys too.
    TuningProfile.objects.filter(name=CACHED_PROFILE_NAME).delete()
    key.refresh_from_db()
    assert key.profile is None
    later, _ = GatewayKey.issue(agent_id="later", upstream_base_url="http://127.0.0.1:9/v1")
    assert later.profile is None
