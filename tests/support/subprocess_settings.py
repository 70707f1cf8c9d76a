"""Settings of the registry, worker, scheduler and gateway subprocesses the tests start
(`DJANGO_SETTINGS_MODULE=tests.support.subprocess_settings`): the test settings with short waits, so a retry, a
takeover or a stream's database read is quick."""

from settings.test import *  # noqa: F403

REGISTRY_RUNTIME_MODEL_ATTEMPTS = 3
REGISTRY_RUNTIME_BACKOFF_SECONDS = 0.1
REGISTRY_RUNTIME_CHECK_SECONDS = 0.05
REGISTRY_RUNTIME_MCP_TIMEOUT_SECONDS = 10.0
REGISTRY_RUNTIME_CONCURRENCY = 16
REGISTRY_STREAM_POLL_SECONDS = 0.2
