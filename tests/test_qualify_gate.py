"""A profile can require a passing qualification for its models: a gateway key's change in
admin that maps to a model without one is refused or warned, as the operator chose, and
audited either way; a qualified model passes."""

from __future__ import annotations

import pytest
from qualify_endpoints import scorecard

from dashboard.gateway.models import GatewayKey
from dashboard.qualify import service
from dashboard.qualify.models import GateDecision, QualificationRequirement
from dashboard.runs.models import TuningProfile

pytestmark = pytest.mark.django_db(transaction=True)

ADD = "/admin/gateway/gatewaykey/add/"


def _form(agent: str, profile: TuningProfile, model: str, api: str = "openai") -> dict:
    return {
        "agent_id": agent, "active": "on", "profile": str(profile.pk), "upstream_format": api,
        "upstream_base_url": "http://127.0.0.1:9/v1", "model_map": f'{{"*": "{model}"}}',
        "upstream_timeout_s": "60", "max_recall_steps": "4", "rate_limit_per_minute": "0",
        "token_budget": "0",
    }  # fmt: skip


def _profile(name: str, mode: str | None) -> TuningProfile:
    profile = TuningProfile.objects.create(name=name)
    if mode is not None:
        QualificationRequirement.objects.create(profile=profile, mode=mode)
    return profile


def test_a_refusing_profile_refuses_an_unqualified_model_and_audits_it(admin_client):
    strict = _profile("strict", QualificationRequirement.REFUSE)
    answer = admin_client.post(ADD, _form("bot", strict, "never-qualified"))
    assert answer.status_code == 200  # the form again, with the gate's error
    assert "requires qualified models" in answer.content.decode()
    assert not GatewayKey.objects.filter(agent_id="bot").exists()
    decision = GateDecision.objects.get()
    assert decision.outcome == "refused" and decision.missing == ["never-qualified"]
    assert decision.user is not None and decision.subject == "gateway key bot"


def test_a_warning_profile_saves_with_a_warning_and_audits_it(admin_client):
    lenient = _profile("lenient", QualificationRequirement.WARN)
    answer = admin_client.post(ADD, _form("bot", lenient, "never-qualified"), follow=True)
    assert "Saved with a warning" in answer.content.decode()
    assert GatewayKey.objects.filter(agent_id="bot").exists()
    assert GateDecision.objects.get().outcome == "warned"


def test_a_qualified_model_passes_in_its_own_format_only(admin_client):
    strict = _profile("strict", QualificationRequirement.REFUSE)
    card = scorecard("competent")
    service.create(model=card.model, upstream=card.upstream).record(card)
    admin_client.post(ADD, _form("bot", strict, "scripted-competent"), follow=True)
    assert GatewayKey.objects.filter(agent_id="bot").exists()
    assert GateDecision.objects.get().outcome == "allowed"
    # Qualified through Chat Completions is not qualified through Anthropic Messages.
    admin_client.post(ADD, _form("claude-bot", strict, "scripted-competent", api="anthropic"))
    assert not GatewayKey.objects.filter(agent_id="claude-bot").exists()


def test_a_failed_scorecard_does_not_qualify(admin_client):
    strict = _profile("strict", QualificationRequirement.REFUSE)
    card = scorecard("archive_answerer")
    service.create(model=card.model, upstream=card.upstream).record(card)
    admin_client.post(ADD, _form("bot", strict, card.model))
    assert not GatewayKey.objects.filter(agent_id="bot").exists()


def test_no_requirement_no_gate_and_an_unrelated_edit_is_not_gated(admin_client):
    free = _profile("free", None)
    admin_client.post(ADD, _form("bot", free, "anything"), follow=True)
    key = GatewayKey.objects.get(agent_id="bot")
    assert not GateDecision.objects.exists()
    # The profile turns strict later: renaming the key does not touch its models, so it saves.
    QualificationRequirement.objects.create(profile=free, mode=QualificationRequirement.REFUSE)
    form = {**_form("bot", free, "anything"), "name": "renamed"}
    admin_client.post(f"/admin/gateway/gatewaykey/{key.pk}/change/", form, follow=True)
    key.refresh_from_db()
    assert key.name == "renamed" and not GateDecision.objects.exists()


def _start_from_console(admin_client, profile: TuningProfile):
    return admin_client.post("/runs/", {"task": "say hi", "profile": str(profile.pk)}, follow=True)


def test_the_runs_form_refuses_a_run_whose_model_the_profile_has_not_qualified(
    admin_client, monkeypatch
):
    from dashboard.runs.models import RunRecord

    monkeypatch.setenv("SCROLL_SANDBOX_FALLBACK", "process")
    strict = _profile("strict", QualificationRequirement.REFUSE)
    answer = _start_from_console(admin_client, strict)
    assert answer.status_code == 400
    assert "Not started" in answer.content.decode()
    assert "requires qualified models" in answer.content.decode()
    assert not RunRecord.objects.exists()
    decision = GateDecision.objects.get()
    assert decision.outcome == "refused" and decision.subject == "console run"


def test_the_runs_form_starts_a_warned_run_and_audits_it(admin_client, monkeypatch):
    from dashboard.runs.models import RunRecord

    monkeypatch.setenv("SCROLL_SANDBOX_FALLBACK", "process")
    lenient = _profile("lenient", QualificationRequirement.WARN)
    answer = _start_from_console(admin_client, lenient)
    assert "Started with a warning" in answer.content.decode()
    run = RunRecord.objects.get()
    decision = GateDecision.objects.get()
    assert decision.outcome == "warned" and decision.subject == f"run {run.session_id}"
    # A profile that requires nothing starts runs without a decision to audit.
    _start_from_console(admin_client, _profile("free", None))
    assert RunRecord.objects.count() == 2 and GateDecision.objects.count() == 1
