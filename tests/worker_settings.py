"""Settings for processes a test starts (workers, claimants): the suite's settings
(``tests/settings.py``), with the database the test itself uses (its test database, SQLite
file or PostgreSQL)."""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES

DATABASES["default"]["NAME"] = os.environ["SCROLL_TEST_DB_NAME"]
DATABASES["default"].pop("TEST", None)
