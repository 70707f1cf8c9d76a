"""The delivery process's tunables (`REGISTRY_WEBHOOK_*`, read once at start) and the waits they define: a
delivery's retry schedule and an endpoint's backoff, both jittered so many senders and deliveries spread out.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from django.conf import settings

# Events one dispatch transaction fans out, and deliveries one recording transaction settles.
DISPATCH_BATCH = 500
RECORD_BATCH = 500
# Endpoints one claim pass serves (in random order, so none waits behind the others for long).
ENDPOINTS_PER_PASS = 200
# A sender claims up to this many times an endpoint's concurrency (sent as slots free up, without a new claim).
PREFETCH_FACTOR = 4
# A claim is sent only if its lease outlives the request by this much (else it is let go unsent).
LEASE_MARGIN_SECONDS = 2.0


@dataclass(frozen=True)
class DeliveryConfig:
    """What `runwebhooks` was started with; see settings/base.py for each value's meaning."""

    timeout_seconds: float
    retry_schedule: tuple[float, ...]
    endpoint_backoff_seconds: float
    endpoint_backoff_max_seconds: float
    disable_after_seconds: float
    lease_seconds: float
    poll_seconds: float
    endpoint_concurrency: int
    concurrency: int
    retention_days: int

    @classmethod
    def from_settings(cls) -> DeliveryConfig:
        config = cls(
            timeout_seconds=float(settings.REGISTRY_WEBHOOK_TIMEOUT_SECONDS),
            retry_schedule=parse_schedule(settings.REGISTRY_WEBHOOK_RETRY_SCHEDULE),
            endpoint_backoff_seconds=float(settings.REGISTRY_WEBHOOK_ENDPOINT_BACKOFF_SECONDS),
            endpoint_backoff_max_seconds=float(settings.REGISTRY_WEBHOOK_ENDPOINT_BACKOFF_MAX_SECONDS),
            disable_after_seconds=float(settings.REGISTRY_WEBHOOK_DISABLE_AFTER_SECONDS),
            lease_seconds=float(settings.REGISTRY_WEBHOOK_LEASE_SECONDS),
            poll_seconds=float(settings.REGISTRY_WEBHOOK_POLL_SECONDS),
            endpoint_concurrency=int(settings.REGISTRY_WEBHOOK_ENDPOINT_CONCURRENCY),
            concurrency=int(settings.REGISTRY_WEBHOOK_CONCURRENCY),
            retention_days=int(settings.REGISTRY_WEBHOOK_RETENTION_DAYS),
        )
        config.check()
        return config

    def check(self) -> None:
        """Refuse values that would break the lease rule (a claim outlives its request) or stall delivery."""
        if self.lease_seconds < self.timeout_seconds + 2 * LEASE_MARGIN_SECONDS:
            raise ValueError(
                f"REGISTRY_WEBHOOK_LEASE_SECONDS ({self.lease_seconds:g}) must exceed "
                f"REGISTRY_WEBHOOK_TIMEOUT_SECONDS ({self.timeout_seconds:g}) by {2 * LEASE_MARGIN_SECONDS:g} at least"
            )
        if self.endpoint_concurrency < 1 or self.concurrency < 1 or self.poll_seconds <= 0:
            raise ValueError("REGISTRY_WEBHOOK_*CONCURRENCY must be at least 1 and the poll positive")

    @property
    def attempts(self) -> int:
        """Attempts a delivery gets before it is `failed`: the first, then one per step of the schedule."""
        return len(self.retry_schedule) + 1

    def retry_delay(self, attempts_made: int) -> float | None:
        """Seconds until the next try after `attempts_made` failed attempts, or None when none is left.

        Each step is jittered to [half, all] of its value ("equal jitter"): deliveries that failed together
        spread out, yet the first retry stays under a minute and the horizon near the schedule's sum.
        """
        if attempts_made >= self.attempts:
            return None
        step = self.retry_schedule[attempts_made - 1]
        return random.uniform(step / 2, step)

    def endpoint_backoff(self, consecutive_failures: int) -> float:
        """Seconds nothing is sent to an endpoint after its `consecutive_failures`-th failure in a row."""
        exponent = min(consecutive_failures - 1, 32)
        step = min(self.endpoint_backoff_seconds * 2**exponent, self.endpoint_backoff_max_seconds)
        return random.uniform(step / 2, step)


def parse_schedule(text: str) -> tuple[float, ...]:
    """`30,120,600` → (30.0, 120.0, 600.0); an empty list means no retry at all."""
    try:
        steps = tuple(float(item) for item in text.split(",") if item.strip())
    except ValueError as error:
        raise ValueError(f"REGISTRY_WEBHOOK_RETRY_SCHEDULE: {text!r} is not a comma list of seconds") from error
    if any(step < 0 for step in steps):
        raise ValueError(f"REGISTRY_WEBHOOK_RETRY_SCHEDULE: {text!r} has a negative wait")
    return steps
