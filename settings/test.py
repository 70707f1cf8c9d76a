"""Test settings: the base settings on the PostgreSQL and Redis of this machine unless overridden."""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/registry")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")

from settings.base import *  # noqa: F403
from settings.base import DATABASES

# Each pytest-django test database is created fresh; persistent connections only slow teardown.
DATABASES["default"]["CONN_MAX_AGE"] = 0
DATABASES["default"]["CONN_HEALTH_CHECKS"] = False
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
