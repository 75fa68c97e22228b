"""``manage.py scroll_qualify`` against scripted endpoints over loopback HTTP: the scorecard
printed and stored, the exit status the verdict, the key read from the named variable and
sent (never stored), bad input refused before anything is stored."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from gateway_upstream import ScriptedUpstream
from qualify_endpoints import make

from dashboard.qualify.models import Qualification
from scroll_core.prompts import RECALL_TOOL, REPL_TOOL

pytestmark = pytest.mark.django_db(transaction=True)


def _qualify(*args: str) -> str:
    out = StringIO()
    call_command("scroll_qualify", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_a_passing_model_is_stored_and_its_key_sent_not_kept(monkeypatch):
    monkeypatch.setenv("SCROLL_QUALIFY_TEST_KEY", "sk-qualify-secret")
    upstream = ScriptedUpstream(default=make("competent"))
    try:
        out = _qualify(
            "--upstream", upstream.url, "--model", "scripted-competent",
            "--key-env", "SCROLL_QUALIFY_TEST_KEY",
        )  # fmt: skip
    finally:
        upstream.close()
    assert "scripted-competent (suite 1): PASS 100%" in out
    assert "pass  recall.knowledge_update" in out
    assert {h.get("authorization") for h in upstream.headers} == {"Bearer sk-qualify-secret"}
    q = Qualification.objects.get()
    assert q.passed is True and q.total == 100.0 and q.key_env == "SCROLL_QUALIFY_TEST_KEY"
    stored = json.dumps([q.scorecard, q.upstream, q.error, q.key_env])
    assert "sk-qualify-secret" not in stored


def test_an_anthropic_model_is_reached_in_its_own_format():
    upstream = ScriptedUpstream(default=make("competent"))
    try:
        out = _qualify(
            "--upstream", upstream.root, "--model", "scripted-claude", "--api", "anthropic"
        )
    finally:
        upstream.close()
    assert "scripted-claude (suite 1): PASS 100%" in out
    assert set(upstream.paths) == {"/v1/messages"}
    tools = upstream.requests[0]["tools"]  # Anthropic custom tools, the rubric's two
    assert {t["name"] for t in tools} == {REPL_TOOL, RECALL_TOOL}
    assert all("input_schema" in t for t in tools)
    q = Qualification.objects.get()
    assert q.api == "anthropic" and q.passed is True


def test_a_failing_model_exits_1_with_its_scorecard_stored():
    upstream = ScriptedUpstream(default=make("one_search"))
    try:
        with pytest.raises(SystemExit) as exited:
            _qualify("--upstream", upstream.url, "--model", "scripted-one-search", "--json")
    finally:
        upstream.close()
    assert exited.value.code == 1
    q = Qualification.objects.get()
    assert q.status == Qualification.DONE and q.passed is False
    assert q.scorecard["categories"]["acting"]["passed"] == 0


def test_an_unreachable_upstream_exits_2_and_says_why():
    with pytest.raises(SystemExit) as exited:
        _qualify("--upstream", "http://127.0.0.1:9/v1", "--model", "nobody-home")
    assert exited.value.code == 2
    q = Qualification.objects.get()
    assert q.status == Qualification.FAILED and q.error


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--model", "gpt-x"], "needs an upstream"),
        (["--model", "gpt-x", "--upstream", "http://h/v1", "--key-env", "SCROLL_NOPE"], "not set"),
        (["--model", "gpt-x", "--upstream", "http://h/v1", "--profile", "nope"], "no tuning"),
    ],
)
def test_bad_input_is_refused_before_anything_is_stored(args, says):
    with pytest.raises(CommandError, match=says):
        _qualify(*args)
    assert not Qualification.objects.exists()


def test_queued_qualifications_run_from_the_command(operator, settings):
    from django.urls import reverse

    from scroll_core.models.policy import POLICY_NAME

    settings.SCROLL_WORKERS = "external"  # the console only queues it
    operator.post(reverse("qualify_start"), {"model": POLICY_NAME, "api": "openai"})
    q = Qualification.objects.get()
    assert q.status == Qualification.QUEUED
    out = _qualify("--queued")
    q.refresh_from_db()
    assert q.status == Qualification.DONE and q.passed is False
    assert out.startswith(f"#{q.pk} {POLICY_NAME}: FAIL")
    assert _qualify("--queued") == ""  # claimed once: nothing left to run


def test_a_sandbox_the_operator_did_not_allow_is_refused_not_weakened(monkeypatch):
    monkeypatch.setenv("SCROLL_SANDBOX", "bwrap")
    monkeypatch.setenv("PATH", "/nonexistent")  # no bubblewrap to be found
    with pytest.raises(SystemExit) as exited:
        _qualify("--model", "scroll-policy-baseline")
    assert exited.value.code == 2
    q = Qualification.objects.get()
    assert q.status == Qualification.FAILED and "bwrap is not installed" in q.error
