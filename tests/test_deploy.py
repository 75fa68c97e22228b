"""deploy/: the compose file is accepted and the dashboard asks for metrics Scroll writes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from scroll_core import telemetry

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
COMPOSE = DEPLOY / "docker-compose.yml"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "scroll.json"


def compose_command() -> list[str] | None:
    """``docker compose`` (the plugin) or the standalone ``docker-compose``, if either runs."""
    candidates = []
    if shutil.which("docker"):
        candidates.append(["docker", "compose"])
    if shutil.which("docker-compose"):
        candidates.append(["docker-compose"])
    for command in candidates:
        probe = subprocess.run([*command, "version"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return command
    return None


def test_docker_compose_config_accepts_the_stack():
    command = compose_command()
    if command is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed")
    done = subprocess.run(
        [*command, "-f", str(COMPOSE), "config"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    for service in ("otel-collector", "tempo", "prometheus", "grafana"):
        assert re.search(rf"^  {service}:$", done.stdout, re.M), service


def test_the_collector_sends_traces_to_tempo_and_span_metrics_to_prometheus():
    config = (DEPLOY / "otel-collector.yaml").read_text()
    assert "endpoint: 0.0.0.0:4318" in config
    assert "exporters: [otlp/tempo, spanmetrics]" in config
    assert "receivers: [otlp, spanmetrics]" in config
    assert "endpoint: tempo:4317" in config
    assert "otel-collector:8889" in (DEPLOY / "prometheus.yml").read_text()
    for mounted in re.findall(r"- \./([\w./-]+):", COMPOSE.read_text()):
        assert (DEPLOY / mounted).exists(), mounted


def test_every_panel_uses_a_provisioned_datasource():
    provisioned = set(
        re.findall(
            r"uid: (\w+)",
            (DEPLOY / "grafana/provisioning/datasources/datasources.yaml").read_text(),
        )
    )
    assert provisioned == {"prometheus", "tempo"}
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in [panel, *panel["targets"]]:
            if "datasource" in target:
                assert target["datasource"]["uid"] in provisioned, panel["title"]


def test_the_dashboard_links_traceql_for_evictions_and_expands():
    text = DASHBOARD.read_text()
    dashboard = json.loads(text)
    urls = " ".join(link["url"] for link in dashboard["links"])
    assert "scroll.evict" in urls and "scroll.expand" in urls
    titles = {p["title"] for p in dashboard["panels"]}
    assert "Slowest expands" in titles
    assert "Evictions and folds over time" in titles
    assert any(t.startswith("View budget") for t in titles)
    assert any(t.startswith("Retrieval rate per evicted span") for t in titles)


def test_the_dashboard_queries_metrics_that_scroll_writes(monkeypatch):
    """Each scroll_* / gen_ai_* series in a query maps back to an instrument telemetry has."""
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    reader = InMemoryMetricReader()
    telemetry.configure(ring_size=None, metric_readers=[reader])
    try:
        with telemetry.span("scroll.expand", session="s", blocks=["t0:1-2"]):
            pass
        for name in ("scroll.evict", "scroll.fold", "scroll.kernel.restart"):
            with telemetry.span(name, session="s", tier=0, tokens=1):
                pass
        with telemetry.span("scroll.compress", session="s", tokens_after=1, trigger_tokens=2):
            pass
        with telemetry.chat_span("m", session="s") as chat:
            chat.set_attributes(telemetry.usage(1, 1))
        data = reader.get_metrics_data()
    finally:
        telemetry.reset()
    written = {
        metric.name.replace(".", "_")
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    exprs = [
        target["expr"]
        for panel in json.loads(DASHBOARD.read_text())["panels"]
        for target in panel["targets"]
        if "expr" in target
    ]
    # A series name is the one followed by a selector or a range; labels are followed by =.
    queried = {
        re.sub(r"_(total|sum|bucket|count)$", "", name)
        for expr in exprs
        for name in re.findall(r"\b((?:scroll|gen_ai)_\w+)[{\[]", expr)
    }
    assert queried, "the dashboard queries no Scroll metric"
    assert queried <= written, queried - written


SCALE = DEPLOY / "scale.yml"
WEB_SERVICES = ("web-a", "web-b")
WORKER_SERVICES = ("worker-1", "worker-2")


def _scaled_config() -> dict:
    command = compose_command()
    if command is None:
        pytest.skip("neither `docker compose` nor `docker-compose` is installed")
    done = subprocess.run(
        [*command, "-f", str(COMPOSE), "-f", str(SCALE), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "POSTGRES_PASSWORD": "s3cret"},
    )
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def _mounts(service: dict) -> set[tuple[str, str]]:
    """(source, target) of each volume; compose v1 prints "src:dst:rw", v2 a mapping."""
    found = set()
    for volume in service.get("volumes", []):
        if isinstance(volume, dict):
            found.add((volume["source"], volume["target"]))
        else:
            source, target, *_ = str(volume).split(":")
            found.add((source, target))
    return found


def test_docker_compose_config_accepts_the_scaled_deployment_with_observability():
    services = _scaled_config()["services"]
    expected = {"postgres", "redis", "migrate", "balancer", *WEB_SERVICES, *WORKER_SERVICES}
    expected |= {"otel-collector", "tempo", "prometheus", "grafana"}
    assert expected <= set(services), expected - set(services)
    for name in WEB_SERVICES:
        assert services[name]["command"][0] == "daphne"
    for name in WORKER_SERVICES:
        assert services[name]["command"] == ["python", "manage.py", "scroll_worker"]


def test_every_scroll_process_shares_postgres_redis_and_the_data_folder():
    services = _scaled_config()["services"]
    processes = [*WEB_SERVICES, *WORKER_SERVICES]
    for name in [*processes, "migrate"]:
        service = services[name]
        env = service["environment"]
        assert env["SCROLL_DATABASE_URL"] == "postgres://scroll:s3cret@postgres:5432/scroll"
        assert env["SCROLL_REDIS_URL"] == "redis://redis:6379/0"
        # The Event Log on PostgreSQL too, as the writer login (read and append only).
        assert env["SCROLL_EVENTLOG_URL"].startswith("postgres://scroll_app:"), name
        assert env["SCROLL_EVENTLOG_URL"].endswith("@postgres:5432/scroll"), name
        assert env["SCROLL_EVENTLOG_READER_URL"].startswith("postgres://scroll_model:"), name
        assert env["SCROLL_PROCESSES"] == str(len(processes)), name
        assert env["SCROLL_WORKERS"] == "external", name
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
        assert ("scroll-data", "/data") in _mounts(service), name
        assert service["build"]["dockerfile"] == "deploy/Dockerfile"
    for name in processes:
        assert services[name]["depends_on"]["migrate"]["condition"] == (
            "service_completed_successfully"
        )
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == "s3cret"
    # The owner migrates the Event Log and makes its logins before anything starts.
    setup = " ".join(services["migrate"]["command"])
    assert "manage.py scroll_eventlog migrate" in setup
    assert "scroll_eventlog roles --apply --writer scroll_app --reader scroll_model" in setup
    owner = services["migrate"]["environment"]["SCROLL_EVENTLOG_OWNER_URL"]
    assert owner == "postgres://scroll:s3cret@postgres:5432/scroll"
    proxied = " ".join(services["balancer"]["command"])
    for name in WEB_SERVICES:
        assert f"--to {name}:8000" in proxied


def test_the_scaled_environment_is_accepted_by_the_settings(tmp_path):
    """What compose hands a web process imports cleanly: both extras installed, URLs valid."""
    env = _scaled_config()["services"]["web-a"]["environment"]
    code = (
        "from django.conf import settings; "
        "print(settings.DATABASES['default']['ENGINE'], "
        "settings.CHANNEL_LAYERS['default']['BACKEND'])"
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("SCROLL_", "OTEL_"))}
    environ.update({k: str(v) for k, v in env.items() if v not in (None, "")})
    environ.update(SCROLL_DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="dashboard.settings")
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=DEPLOY.parent,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "django.db.backends.postgresql",
        "channels_redis.core.RedisChannelLayer",
    ]


def test_the_image_copies_only_what_exists_and_installs_both_extras():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    for line in re.findall(r"^COPY (.+)$", dockerfile, re.M):
        for source in line.split()[:-1]:
            assert (DEPLOY.parent / source).exists(), source
    assert "'.[postgres,redis]'" in dockerfile
