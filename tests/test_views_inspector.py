"""The context window inspector, trace trees, cost and replay from the profile in force, on a
run of the policy model whose profile was tuned in the middle (the audit records it)."""

from __future__ import annotations

import itertools
import re
import time
from decimal import Decimal

import pytest
from django.utils import timezone

from dashboard.runs.models import CompressEvent, ProfileChange, RunRecord, TuningProfile
from dashboard.runs.profiles import core_profile, save_profile
from dashboard.telemetry.alerts import AlertEngine
from dashboard.telemetry.cost import SpanArithmetic, call_costs, session_cost
from dashboard.telemetry.models import AlertRule, ModelPrice, SpanRecord
from scroll_core.agent import Session
from scroll_core.kernel import Kernel, KernelConfig
from scroll_core.models import PolicyModel
from scroll_core.models.policy import POLICY_NAME
from scroll_core.store import KIND_CONTEXT_MSG, KIND_MODEL_TURN

S = "inspect-1"
pytestmark = pytest.mark.django_db
QUESTIONS = [
    "What is Ann's cat called?",
    "Where does Pepper nap?",
    "What did Ann do on day 40?",
    "Does Ann play the piano?",
]


@pytest.fixture
def run(console_log):
    """Four questions under profile ``midrun``; its trigger is lowered in admin (through the
    audited save) after the second, and the run reads it at its next compress."""
    row = TuningProfile.objects.create(
        name="midrun", context_size=4096, protected_recent_tool_results=1
    )
    record = RunRecord.objects.create(
        session_id=S, agent_id="agent-x", task="q", profile=row, model_name=POLICY_NAME,
        started_at=timezone.now(),
    )  # fmt: skip
    for turn in range(90):
        text = "My cat Pepper naps on the piano." if turn == 5 else f"Day {turn}: a quiet walk."
        console_log.append(session_id=S, agent_id="agent-x", kind=KIND_CONTEXT_MSG,
                           role="user", name="Ann", content=text)  # fmt: skip

    def save(step):
        for item in step.compressions:
            CompressEvent.from_step(record, S, step.turn, step.step, item, None).save()

    with (
        Kernel(KernelConfig(sandbox="process")) as kernel,
        Session(
            console_log,
            PolicyModel(context_size=4096),
            session_id=S,
            agent_id="agent-x",
            profile=row.to_core(),
            kernel=kernel,
            on_step=save,
            profile_source=lambda: core_profile(row.id),
        ) as agent,
    ):
        for i, question in enumerate(QUESTIONS):
            if i == 2:
                time.sleep(0.002)  # the audit's clock must pass the last event's
                row.trigger_ratio = 0.6
                save_profile(row)
            assert agent.ask(question).ok
    record.status, record.ended_at = RunRecord.DONE, timezone.now()
    record.save()
    return record


@pytest.fixture
def op(client, django_user_model):
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user("op", password="pw-for-tests-only")
    user.groups.add(Group.objects.get(name="Operators"))
    client.force_login(user)
    return client


def _calls(op):
    response = op.get(f"/sessions/{S}/calls/")
    assert response.status_code == 302
    return int(re.search(r"/calls/(\d+)/$", response["Location"])[1])


# ---------------------------------------------------------------------- the inspector
def test_each_call_page_shows_its_exact_window_matching_its_recorded_size(run, op):
    last = _calls(op)
    assert last > 0
    for call in (0, last):
        response = op.get(f"/sessions/{S}/calls/{call}/")
        assert response.status_code == 200
        window = response.context["window"]
        assert window.total == window.recorded_tokens
        page = response.content.decode()
        assert "(matches)" in page
        for section in ("prefix", "tail"):
            assert f'class="part section-{section}"' in page
        assert sum(r["tokens"] for r in response.context["sections"]) == window.total
    page = op.get(f"/sessions/{S}/calls/{last}/").content.decode()
    assert 'class="part section-index"' in page and "headline-link" in page
    assert "Since the previous call" in page and "diff-evicted" in page


def test_an_index_headline_leads_to_the_events_it_stands_for(run, op):
    response = op.get(f"/sessions/{S}/calls/{_calls(op)}/")
    block = response.context["blocks"][0]
    url, _, anchor = block["url"].partition("#")
    assert anchor == f"e{block['block'].lo_seq}"
    events = op.get(url)
    assert events.status_code == 200
    assert f'id="e{block["block"].lo_seq}"' in events.content.decode()


def test_the_budget_chart_and_the_timeline_lead_to_the_call_after_a_compress(run, op):
    page = op.get(f"/sessions/{S}/")
    rows = list(CompressEvent.objects.filter(session_id=S).order_by("id"))
    budget = page.context["budget"]
    assert budget["data"][0]["customdata"] == [r.id for r in rows]
    linked = re.findall(rf"/sessions/{S}/calls/\?compress=(\d+)", page.content.decode())
    assert linked and {int(i) for i in linked} <= {r.id for r in rows}  # the timeline's rows
    first = op.get(f"/sessions/{S}/calls/", {"compress": rows[0].id})
    assert first.status_code == 302 and first["Location"].endswith("/calls/0/")
    evicting = next(r for r in rows if r.evicted_lo is not None)
    target = op.get(f"/sessions/{S}/calls/", {"compress": evicting.id})
    call = op.get(target["Location"])
    assert call.context["point"].turn >= evicting.turn


def test_bad_call_addresses_are_not_found(run, op):
    assert op.get(f"/sessions/{S}/calls/999/").status_code == 404
    assert op.get(f"/sessions/{S}/calls/", {"compress": "abc"}).status_code == 404
    assert op.get(f"/sessions/{S}/calls/", {"compress": "99999999"}).status_code == 404
    assert op.get(f"/sessions/{S}/calls/", {"turn": "77"}).status_code == 404
    assert op.get("/sessions/no-such/calls/0/").status_code == 404
    from dashboard.runs.inforce import load_recorded

    first = load_recorded(S).trace.calls[0]
    found = op.get(f"/sessions/{S}/calls/", {"turn": first.turn, "step": first.step})
    assert found.status_code == 302 and found["Location"].endswith("/calls/0/")


# ---------------------------------------------------------------------- replay in force
def test_the_replay_lab_reproduces_a_run_tuned_midway_and_differs_under_another(run, op):
    assert ProfileChange.objects.filter(profile=run.profile, field="trigger_ratio").exists()
    recorded = op.get("/replay/", {"session": S})
    assert recorded.status_code == 200
    report = recorded.context["report"]
    assert report["reproduction"]["exact"], report["reproduction"]["mismatches"]
    assert recorded.context["knobs"]["trigger_ratio"] == 0.6
    assert "while it ran" in recorded.content.decode()
    other = op.get("/replay/", {"session": S, "trigger_ratio": "0.9"}).context["report"]
    assert other["replay"]["billed_prompt_tokens"] != other["recorded"]["billed_prompt_tokens"]
    assert other["recorded"] == report["recorded"]


# ---------------------------------------------------------------------- cost
def test_each_call_session_and_agent_shows_its_cost(run, op):
    page = op.get(f"/sessions/{S}/").content.decode()
    assert "No price for scroll-policy-baseline" in page
    ModelPrice.objects.create(model=POLICY_NAME, input_per_mtok=Decimal("3"),
                              cached_input_per_mtok=Decimal("0.3"),
                              output_per_mtok=Decimal("15"))  # fmt: skip
    costs = call_costs(S)
    assert costs and any(c.cached_tokens for c in costs.values())
    for c in costs.values():
        want = c.uncached_tokens * 3 + c.cached_tokens * Decimal("0.3") + c.output_tokens * 15
        assert c.cost == want / 1_000_000
    total = sum(c.cost for c in costs.values())
    response = op.get(f"/sessions/{S}/")
    assert response.context["cost"].total == total
    assert f"{total:.6f} USD" in response.content.decode()
    assert response.context["agent_cost"][0] == total
    call = op.get(f"/sessions/{S}/calls/0/")
    assert f"{costs[0].cost:.6f} USD" in call.content.decode()


def test_the_prefix_cache_arithmetic_is_the_seeds():
    # Seed 4b: a 1,200-token span, a 40-token index line, four re-reads: 4.03x keeping it.
    span = SpanArithmetic(1, 9, 0, tokens=1200, headline_tokens=40, retrievals=4,
                          reread_tokens=4 * 1200)  # fmt: skip
    assert span.loss and round(span.ratio, 2) == 4.03
    never = SpanArithmetic(1, 9, 0, tokens=1200, headline_tokens=40, retrievals=0,
                           reread_tokens=0)  # fmt: skip
    assert not never.loss and never.net == 40 - 1200


def test_the_session_page_shows_each_evicted_span_against_keeping_it(run, op):
    cost = session_cost(S)
    assert cost.spans and all(s.tokens > 0 and s.headline_tokens > 0 for s in cost.spans)
    page = op.get(f"/sessions/{S}/").content.decode()
    assert "Evicting against keeping, under a prefix cache" in page
    assert page.count('class="net-') == len(cost.spans)


def test_an_evicted_block_re_read_past_its_size_raises_the_net_loss_alert(console_log):
    seqs = [console_log.append(session_id="nl", kind=KIND_MODEL_TURN, role="assistant",
                               content="a fairly long answer about the garden " * 4)
            for _ in range(10)]  # fmt: skip
    key = f"t0:{seqs[0]}-{seqs[-1]}"
    ids = itertools.count(1)

    def expand():
        return {"span_id": f"{next(ids):016x}", "name": "scroll.expand", "session_id": "nl",
                "status": "ok", "attributes": {"scroll.blocks": [key],
                "scroll.seq_lo": seqs[0], "scroll.seq_hi": seqs[-1]}}  # fmt: skip

    engine = AlertEngine()
    assert AlertRule.objects.filter(kind=AlertRule.EVICTION_NET_LOSS).exists()
    assert not [a for a in engine.observe(expand()) if a.rule.kind == "eviction_net_loss"]
    fired = [a for a in engine.observe(expand()) if a.rule.kind == "eviction_net_loss"]
    assert fired and fired[0].key == key and "net loss" in fired[0].message


# ---------------------------------------------------------------------- trace trees
def _span(trace, span_id, parent, name, start, end, status="ok", **attributes):
    return SpanRecord.objects.create(
        trace_id=trace, span_id=span_id, parent_id=parent, name=name, session_id=S,
        start_ns=start, end_ns=end, duration_ms=(end - start) / 1e6, status=status,
        attributes=attributes,
    )  # fmt: skip


def test_a_trace_page_draws_its_spans_as_a_tree_with_a_waterfall(run, op, settings):
    t = "ab" * 16
    _span(t, "0000000000000001", None, "scroll.turn", 0, 1_000_000_000)
    chat = _span(t, "0000000000000002", "0000000000000001", "chat scroll-policy-baseline",
                 100_000_000, 600_000_000, **{"gen_ai.usage.input_tokens": 812,
                 "scroll.turn": 1, "scroll.step": 0})  # fmt: skip
    _span(t, "0000000000000003", "0000000000000001", "execute_tool repl_exec",
          600_000_000, 900_000_000, status="error")  # fmt: skip
    _span(t, "0000000000000004", "0000000000000003", "scroll.expand", 700_000_000, 800_000_000,
          status="unset")  # fmt: skip
    response = op.get(f"/traces/{t}/")
    assert response.status_code == 200
    rows = response.context["rows"]
    assert [(r["span"].name, r["depth"]) for r in rows] == [
        ("scroll.turn", 0), ("chat scroll-policy-baseline", 1),
        ("execute_tool repl_exec", 1), ("scroll.expand", 2),
    ]  # fmt: skip
    assert (rows[1]["offset"], rows[1]["width"]) == (10.0, 50.0)
    # The tree says what the Traces list says: a span with no error recorded is "ok".
    assert [r["status"] for r in rows] == ["ok", "ok", "error", "ok"]
    page = response.content.decode()
    assert ">unset<" not in page and 'class="status status-ok">ok<' in page
    assert "gen_ai.usage.input_tokens" in page and 'x="10.0"' in page
    assert response.context["errors"] == 1 and "Grafana" not in page
    settings.SCROLL_GRAFANA_URL = "https://grafana.example"
    assert "https://grafana.example/explore" in op.get(f"/traces/{t}/").content.decode()
    # The span page links its trace and, for a model call, the window it was sent.
    span_page = op.get(f"/traces/spans/{chat.span_id}/").content.decode()
    assert f'href="/traces/{t}/"' in span_page
    assert f"/sessions/{S}/calls/?turn=1&amp;step=0" in span_page
    assert "?turn=1&step=0&span=" in response.context["rows"][1]["call_url"]
    # Trace ids link to the tree from the Traces stream too.
    assert f'href="/traces/{t}/"' in op.get("/traces/").content.decode()


def test_an_unknown_or_malformed_trace_is_not_found(op):
    assert op.get("/traces/" + "0" * 32 + "/").status_code == 404
    assert op.get("/traces/not-hex!/").status_code == 404


# ---------------------------------------------------------------------- runs
def test_runs_say_the_rule_based_baseline_will_run_and_what_it_cannot_do(op, monkeypatch):
    monkeypatch.delenv("SCROLL_MODEL_NAME", raising=False)
    page = op.get("/runs/").content.decode()
    assert "No model endpoint is configured" in page and "not an LLM" in page
    assert "It cannot" in page and POLICY_NAME in page


def test_runs_name_the_configured_model_and_its_endpoint(op, monkeypatch):
    monkeypatch.setenv("SCROLL_MODEL_NAME", "qwen2.5-7b-instruct")
    monkeypatch.setenv("SCROLL_MODEL_BASE_URL", "http://127.0.0.1:9/v1")
    page = op.get("/runs/").content.decode()
    assert "<code>qwen2.5-7b-instruct</code> through the OpenAI-compatible endpoint" in page
    assert "http://127.0.0.1:9/v1" in page and "No model endpoint" not in page
