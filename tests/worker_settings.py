"""Settings for processes a test starts (workers, claimants): the console's settings, with the
database the test itself uses (its test database, SQLite file or PostgreSQL)."""

from __future__ import annotations

import os

from dashboard.settings import *  # noqa: F403
from dashboard.settings import DATABASES

DATABASES["default"]["NAME"] = os.environ["SCROLL_TEST_DB_NAME"]
DATABASES["default"].pop("TEST", None)
