"""Parsing limits at the console's doors (issue 31, finding 7): a form past the size or
field limits is a 400 on the console's page, and a JSON form field nested too deeply or
too long is a form error, never a 500 (``RecursionError``)."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.urls import reverse

from dashboard.gateway.models import GatewayKey
from dashboard.limits import JSON_FIELD_MAX_CHARS

pytestmark = pytest.mark.django_db


def _key_form(model_map: str) -> dict[str, str]:
    return {
        "agent_id": "limits-agent",
        "name": "limits",
        "active": "on",
        "upstream_format": "openai",
        "upstream_base_url": "http://127.0.0.1:9/v1",
        "upstream_key_env": "",
        "model_map": model_map,
        "upstream_timeout_s": "60",
        "max_recall_steps": "3",
        "rate_limit_per_minute": "0",
        "token_budget": "0",
    }


def test_a_form_over_the_size_limit_is_a_400_on_the_consoles_page(admin_client):
    big = "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)
    response = admin_client.post(reverse("runs"), {"task": big})
    assert response.status_code == 400
    page = response.content.decode()
    assert 'id="request-refused"' in page
    assert (
        f"larger than the console accepts ({settings.DATA_UPLOAD_MAX_MEMORY_SIZE:,} bytes)" in page
    )


def test_a_form_with_too_many_fields_is_a_400_on_the_consoles_page(admin_client):
    fields = {f"f{i}": "1" for i in range(settings.DATA_UPLOAD_MAX_NUMBER_FIELDS + 1)}
    response = admin_client.post(reverse("runs"), fields)
    assert response.status_code == 400
    assert "more fields than the console accepts (1,000)" in response.content.decode()


def test_an_admin_json_field_nested_200000_deep_is_a_form_error_not_a_500(admin_client):
    deep = "[" * 20_000 + "]" * 20_000  # within the field's cap, far past the parser's depth
    response = admin_client.post(reverse("admin:gateway_gatewaykey_add"), _key_form(deep))
    assert response.status_code == 200  # the form again, with the error
    assert "nested too deeply" in response.content.decode()
    assert not GatewayKey.objects.filter(agent_id="limits-agent").exists()


def test_an_admin_json_field_over_its_length_cap_is_a_form_error(admin_client):
    long = '{"a": "' + "x" * JSON_FIELD_MAX_CHARS + '"}'
    response = admin_client.post(reverse("admin:gateway_gatewaykey_add"), _key_form(long))
    assert response.status_code == 200
    assert f"At most {JSON_FIELD_MAX_CHARS:,} characters of JSON" in response.content.decode()
    assert not GatewayKey.objects.filter(agent_id="limits-agent").exists()


def test_an_admin_json_field_that_is_fine_is_saved(admin_client):
    response = admin_client.post(
        reverse("admin:gateway_gatewaykey_add"), _key_form('{"gpt-4o": "local-model"}')
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert GatewayKey.objects.get(agent_id="limits-agent").model_map == {"gpt-4o": "local-model"}
