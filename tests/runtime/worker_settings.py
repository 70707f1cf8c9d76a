"""Settings of the registry and worker subprocesses in the runtime tests: test settings, short waits."""

from settings.test import *  # noqa: F403

REGISTRY_RUNTIME_MODEL_ATTEMPTS = 3
REGISTRY_RUNTIME_BACKOFF_SECONDS = 0.1
REGISTRY_RUNTIME_CHECK_SECONDS = 0.05
REGISTRY_RUNTIME_MCP_TIMEOUT_SECONDS = 10.0
REGISTRY_RUNTIME_CONCURRENCY = 16
REGISTRY_STREAM_POLL_SECONDS = 0.2
