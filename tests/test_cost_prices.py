"""The console's cost with default prices: a model genai-prices knows is priced without a
``ModelPrice`` row and says so, a row wins ("admin"), a model known to neither has no cost, and
the provider's cache counts are priced as reported while a call without them keeps the
estimate from the view (and says it is one)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from agent_fakes import ScriptedModel
from gateway_clients import make_key, oa
from gateway_upstream import HEADLINE, completion
from genai_prices import data_snapshot
from genai_prices.data import providers

from dashboard.gateway.service import get_service
from dashboard.telemetry.cost import call_costs, session_cost
from dashboard.telemetry.models import ModelPrice
from scroll_core.agent import Session
from scroll_core.models import ModelReply, Usage
from scroll_core.pricing import DEFAULT_SOURCE

pytestmark = pytest.mark.django_db
MILLION = Decimal(1_000_000)
GPT = "gpt-4o-2024-08-06"
# Three calls: the first reports no cache counts (estimated from the view), the others do.
USAGES = [
    Usage(1500, 40),
    Usage(1800, 50, cache_read_input_tokens=1024, cache_creation_input_tokens=0),
    Usage(2100, 60, cache_read_input_tokens=1536, cache_creation_input_tokens=128),
]


def _published(model: str):
    bundled = data_snapshot.DataSnapshot(providers=providers, from_auto_update=False)
    return bundled.find_provider_model(model, None, None, None)[1].get_prices(datetime.now(UTC))


def _run(console_log, session_id: str, model: str) -> str:
    replies = [
        ModelReply(f"Answer {i}.\n{HEADLINE}", usage=used, model=model)
        for i, used in enumerate(USAGES)
    ]
    with Session(console_log, ScriptedModel(*replies, name=model), session_id=session_id,
                 agent_id="agent-p") as agent:  # fmt: skip
        for i in range(len(USAGES)):
            assert agent.ask(f"Question {i}?").ok
    return session_id


@pytest.fixture
def gpt_run(console_log):
    return _run(console_log, "cost-gpt", GPT)


@pytest.fixture
def op(client, django_user_model):
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user("op", password="pw-for-tests-only")
    user.groups.add(Group.objects.get(name="Operators"))
    client.force_login(user)
    return client


def test_a_model_genai_prices_knows_gets_a_cost_and_its_source_without_a_row(gpt_run):
    published = _published("gpt-4o")
    cost = session_cost(gpt_run)
    assert [c.model for c in cost.calls] == [GPT] * 3 and not cost.unpriced
    reported = cost.calls[1]
    assert (reported.input_tokens, reported.cached_tokens, reported.uncached_tokens) == (
        1800, 1024, 776,
    )  # fmt: skip
    want = (776 * published.input_mtok + 1024 * published.cache_read_mtok
            + 50 * published.output_mtok) / MILLION  # fmt: skip
    assert reported.cost == want and reported.currency == "USD"
    assert {c.price_source for c in cost.calls} == {DEFAULT_SOURCE}
    assert cost.total == sum(c.cost for c in cost.calls)


def test_reported_cache_counts_are_priced_and_a_call_without_them_keeps_the_estimate(gpt_run):
    first, second, third = session_cost(gpt_run).calls
    assert first.cached_estimated and not first.cache_write_tokens
    assert first.cached_tokens < first.input_tokens  # the view's unchanged prefix, or 0
    assert not second.cached_estimated and not third.cached_estimated
    assert (third.cached_tokens, third.cache_write_tokens, third.uncached_tokens) == (
        1536, 128, 436,
    )  # fmt: skip


def test_an_admin_row_wins_over_the_default_price(gpt_run):
    ModelPrice.objects.create(model=GPT, input_per_mtok=Decimal("4"),
                              cached_input_per_mtok=Decimal("1"),
                              cache_write_per_mtok=Decimal("5"),
                              output_per_mtok=Decimal("20"), currency="EUR")  # fmt: skip
    third = session_cost(gpt_run).calls[2]
    assert third.price_source == "admin" and third.currency == "EUR"
    assert third.cost == (436 * 4 + 1536 * 1 + 128 * 5 + 60 * 20) / MILLION


def test_an_admin_row_without_a_cache_write_price_charges_writes_at_input(gpt_run):
    ModelPrice.objects.create(model=GPT, input_per_mtok=Decimal("4"),
                              cached_input_per_mtok=Decimal("1"),
                              output_per_mtok=Decimal("20"))  # fmt: skip
    third = session_cost(gpt_run).calls[2]
    assert third.cost == ((436 + 128) * 4 + 1536 * 1 + 60 * 20) / MILLION


def test_a_model_known_to_neither_shows_no_cost(console_log, op):
    session = _run(console_log, "cost-local", "my-local-model")
    cost = session_cost(session)
    assert cost.calls and all(c.cost is None and c.price_source == "" for c in cost.calls)
    assert cost.unpriced == ["my-local-model"] and cost.total is None
    page = op.get(f"/sessions/{session}/").content.decode()
    assert "No price for my-local-model" in page


def test_the_inspector_and_the_cost_table_say_what_priced_each_call(gpt_run, op):
    costs = call_costs(gpt_run)
    first = op.get(f"/sessions/{gpt_run}/calls/0/").content.decode()
    assert f"{costs[0].cost:.6f} USD" in first
    assert f"({DEFAULT_SOURCE} default)" in first and "cached (estimated)" in first
    third = op.get(f"/sessions/{gpt_run}/calls/2/").content.decode()
    assert "1536 cached in" not in third and "1536 cached + 128 written to the cache in" in third
    ModelPrice.objects.create(model=GPT, input_per_mtok=Decimal("4"),
                              output_per_mtok=Decimal("20"))  # fmt: skip
    page = op.get(f"/sessions/{gpt_run}/").content.decode()
    assert page.count('<td class="price-source">admin</td>') == 3


@pytest.mark.django_db(transaction=True)
def test_a_gateway_session_is_priced_from_the_upstreams_cache_counts(gateway, upstream):
    answer = completion(f"cached\n{HEADLINE}", prompt=2006, out=9, cached=1920)
    answer.body["model"] = GPT
    upstream.then(answer)
    raw = oa(gateway, make_key(upstream)).chat.completions.with_raw_response.create(
        model="gpt-test", messages=[{"role": "user", "content": "hello"}]
    )
    session = raw.headers["x-scroll-session"]
    get_service().flush()
    (call,) = session_cost(session).calls
    assert (call.model, call.input_tokens, call.cached_tokens) == (GPT, 2006, 1920)
    assert not call.cached_estimated and call.price_source == DEFAULT_SOURCE
    published = _published("gpt-4o")
    want = (86 * published.input_mtok + 1920 * published.cache_read_mtok
            + 9 * published.output_mtok) / MILLION  # fmt: skip
    assert call.cost == want
