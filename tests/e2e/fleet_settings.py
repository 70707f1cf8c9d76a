"""Settings of the fleet's processes (registries, workers, schedulers, gateways): the test settings with
the runtime's short waits, so a takeover or a stream's database read is quick."""

from settings.test import *  # noqa: F403

REGISTRY_RUNTIME_MODEL_ATTEMPTS = 3
REGISTRY_RUNTIME_BACKOFF_SECONDS = 0.1
REGISTRY_RUNTIME_CHECK_SECONDS = 0.05
REGISTRY_RUNTIME_CONCURRENCY = 16
REGISTRY_STREAM_POLL_SECONDS = 0.2
