"""Test settings: the base settings on the PostgreSQL and Redis of this machine unless overridden."""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/registry")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")

from settings.base import *  # noqa: F403
from settings.base import DATABASES

# The pytest process itself uses plain connections (a pool would hold the test database open at
# teardown); live servers started by tests run `settings.base`, pooled.
DATABASES["default"]["CONN_MAX_AGE"] = 0
DATABASES["default"]["CONN_HEALTH_CHECKS"] = False
DATABASES["default"].get("OPTIONS", {}).pop("pool", None)
# One test database per pytest process, so concurrent runs on one machine never collide.
# Live servers started by tests read the real name from `connection.settings_dict["NAME"]`.
DATABASES["default"]["TEST"] = {"NAME": os.environ.get("REGISTRY_TEST_DB_NAME") or f"test_registry_{os.getpid()}"}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
