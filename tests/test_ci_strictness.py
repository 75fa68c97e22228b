"""Under CI=true a test that skips for want of a tool CI must install fails instead."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SKIPPING = """
import pytest


def test_needs_bwrap():
    pytest.skip("bwrap is not installed (Debian package bubblewrap)")


@pytest.mark.skipif(True, reason="Debian's chromium is not installed at /usr/bin/chromium")
def test_needs_chromium():
    pass


def test_needs_compose():
    pytest.skip("neither `docker compose` nor `docker-compose` is installed")


def test_needs_other_data():
    pytest.skip("LoCoMo data not found at /nowhere")
"""


def _run(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_skipping.py").write_text(SKIPPING, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfs", "-p", "no:cacheprovider", "-p", "no:django",
         "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, timeout=120, env=env,
    )  # fmt: skip


def test_a_missing_ci_tool_fails_the_test_under_ci(tmp_path):
    done = _run(tmp_path, "true")

    assert done.returncode == 1, done.stdout
    # a skipif mark skips in setup, so that one turns into a setup error: a failure all the same
    assert "2 failed, 1 skipped, 1 error" in done.stdout
    assert "FAILED" in done.stdout and "CI=true" in done.stdout
    assert "LoCoMo data not found" in done.stdout  # other skips stay skips


@pytest.mark.parametrize("ci", [None, "false"])
def test_outside_ci_the_same_tests_skip(tmp_path, ci):
    done = _run(tmp_path, ci)

    assert done.returncode == 0, done.stdout
    assert "4 skipped" in done.stdout


MODULE_SKIPPING = """
import pytest

pytest.importorskip("playwright_not_installed_here", reason="the playwright package is missing")


def test_never_reached():
    pass
"""


def test_a_module_that_skips_for_a_ci_tool_fails_the_run_under_ci(tmp_path):
    (tmp_path / "test_module_skip.py").write_text(MODULE_SKIPPING, encoding="utf-8")
    done = _run(tmp_path, "true")

    assert done.returncode == 2, done.stdout  # a collection error: pytest stops, exit 2
    assert "ERROR collecting test_module_skip.py" in done.stdout
    assert "CI=true and a tool CI must have is missing" in done.stdout
    assert "playwright package is missing" in done.stdout


def test_outside_ci_a_module_that_skips_for_a_ci_tool_skips(tmp_path):
    (tmp_path / "test_module_skip.py").write_text(MODULE_SKIPPING, encoding="utf-8")
    done = _run(tmp_path, None)

    assert done.returncode == 0, done.stdout
    assert "5 skipped" in done.stdout


@pytest.mark.parametrize("value", ["true", "TRUE", "True", "1", "yes", " true "])
def test_every_spelling_of_ci_that_ci_run_accepts_is_ci_for_the_servers_too(monkeypatch, value):
    from tests import servers

    monkeypatch.setenv("CI", value)
    assert servers.in_ci()
    with pytest.raises(pytest.fail.Exception, match="PostgreSQL is not available"):
        servers.unavailable("PostgreSQL", "initdb failed")


@pytest.mark.parametrize("value", ["", "false", "0", "no"])
def test_outside_ci_a_missing_server_skips(monkeypatch, value):
    from tests import servers

    monkeypatch.setenv("CI", value)
    assert not servers.in_ci()
    with pytest.raises(pytest.skip.Exception, match="Redis is not available"):
        servers.unavailable("Redis", "redis-server not found")
