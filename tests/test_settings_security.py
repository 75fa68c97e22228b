"""Deploying behind TLS is switched on from the environment, and every page carries a CSP.

Settings are read once per process, so the environment switches are checked in a fresh
``manage.py`` process each.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.urls import reverse

REPO = Path(__file__).resolve().parents[1]
TLS_ENV = {
    "SCROLL_SECURE_COOKIES": "1",
    "SCROLL_HSTS_SECONDS": "31536000",
    "SCROLL_HSTS_INCLUDE_SUBDOMAINS": "1",
    "SCROLL_HSTS_PRELOAD": "1",
    "SCROLL_SSL_REDIRECT": "1",
    "SCROLL_PROXY_SSL_HEADER": "1",
}
# What `check --deploy` says about cookies, HSTS and the redirect when they are off.
TLS_WARNINGS = ("W004", "W005", "W008", "W012", "W016", "W021")


def _manage(tmp_path, *args, **env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SCROLL_")}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env={**clean, "SCROLL_DATA_DIR": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_has_no_tls_warnings_when_the_switches_are_set(tmp_path):
    done = _manage(tmp_path, "check", "--deploy", **TLS_ENV)

    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert not [w for w in TLS_WARNINGS if f"security.{w}" in output], output


def test_without_the_switches_check_deploy_still_warns(tmp_path):
    done = _manage(tmp_path, "check", "--deploy")

    output = done.stdout + done.stderr
    for warning in ("W004", "W008", "W012", "W016"):
        assert f"security.{warning}" in output


def test_the_switches_reach_django_settings(tmp_path):
    code = (
        "from django.conf import settings as s; print(s.SESSION_COOKIE_SECURE, "
        "s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS, s.SECURE_HSTS_INCLUDE_SUBDOMAINS, "
        "s.SECURE_HSTS_PRELOAD, s.SECURE_SSL_REDIRECT, s.SECURE_PROXY_SSL_HEADER)"
    )
    on = _manage(tmp_path, "shell", "-v", "0", "-c", code, **TLS_ENV)
    off = _manage(tmp_path, "shell", "-v", "0", "-c", code)

    assert on.stdout.split("\n")[0] == (
        "True True 31536000 True True True ('HTTP_X_FORWARDED_PROTO', 'https')"
    ), on.stderr
    assert off.stdout.split("\n")[0] == "False False 0 False False False None", off.stderr


def test_a_bad_hsts_value_stops_start_up_with_a_clear_error(tmp_path):
    done = _manage(tmp_path, "check", SCROLL_HSTS_SECONDS="a year")

    assert done.returncode != 0
    assert "SCROLL_HSTS_SECONDS must be a whole number, got 'a year'" in done.stderr


@pytest.mark.django_db
def test_every_page_carries_a_strict_content_security_policy(admin_client, console_log):
    response = admin_client.get(reverse("home"))

    policy = dict(
        part.strip().split(" ", 1) for part in response["Content-Security-Policy"].split(";")
    )
    assert policy["default-src"] == "'self'"
    assert policy["script-src"] == "'self'"  # no 'unsafe-inline', no 'unsafe-eval'
    assert policy["style-src"] == "'self'"
    assert policy["connect-src"] == "'self'"
    assert policy["object-src"] == "'none'" and policy["frame-ancestors"] == "'none'"
    assert "unsafe" not in response["Content-Security-Policy"]
