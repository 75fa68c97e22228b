"""Settings the test suite runs under (pyproject's ``DJANGO_SETTINGS_MODULE``, inherited by
the servers and workers a test starts): the console's own, with one change.

Django's default password hasher (PBKDF2, a million rounds) takes 0.3 s of CPU per password
on a 2-core CI machine, and about 260 tests reach the user model, most making a user with a
password: seven console modules of 140 such tests took 85 CPU-s with it and 38 without
(2026-12-05). The hasher is not what they test, so here it is MD5 (Django's own advice for
tests). The console as deployed keeps Django's defaults: ``dashboard.settings`` sets no
``PASSWORD_HASHERS`` (``tests/test_settings_hashers.py``), and the processes that play a
deployment (``tests/cluster.py``, ``tests/test_deploy.py``) name ``dashboard.settings``.
"""

from __future__ import annotations

from dashboard.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
