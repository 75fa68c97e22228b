"""The suite hashes passwords cheaply (tests/settings.py); the console as deployed must not."""

from __future__ import annotations

import importlib

from django.conf import global_settings, settings
from django.contrib.auth.hashers import identify_hasher, make_password


def test_the_deployed_console_keeps_djangos_default_hashers():
    deployed = importlib.import_module("dashboard.settings")
    assert getattr(deployed, "PASSWORD_HASHERS", global_settings.PASSWORD_HASHERS) == (
        global_settings.PASSWORD_HASHERS
    )
    assert global_settings.PASSWORD_HASHERS[0].endswith(".PBKDF2PasswordHasher")


def test_the_suite_hashes_with_md5_and_still_checks_a_password(django_user_model, db):
    assert settings.PASSWORD_HASHERS == ["django.contrib.auth.hashers.MD5PasswordHasher"]
    assert identify_hasher(make_password("pw")).algorithm == "md5"
    user = django_user_model.objects.create_user("someone", password="right")
    assert user.check_password("right")
    assert not user.check_password("wrong")
