"""Outlier ejection per destination (after Envoy's): failures in a row eject a destination for a while, each
ejection in a row for longer; runtime state kept beside the in-flight counter, outside the config snapshot."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from gatewayproxy.config.models import OutlierDetection


@dataclass
class Health:
    """One destination's record: failures since the last success or ejection, ejections in a row (reset by a
    success), and the monotonic instants of the last ejection and of its end."""

    failures: int = 0
    ejections: int = 0
    ejected_at: float = 0.0
    ejected_until: float = 0.0


class Outliers:
    """The health of every destination by name; a destination nobody reported on is healthy."""

    def __init__(self) -> None:
        self._health: dict[str, Health] = {}

    def ejected(self, destination: str, now: float | None = None) -> bool:
        """Whether `destination` is ejected now."""
        health = self._health.get(destination)
        return health is not None and health.ejected_until > (time.monotonic() if now is None else now)

    def failed(self, destination: str, detection: OutlierDetection) -> bool:
        """Count a failure of `destination`; True when it ejects the destination."""
        health = self._health.get(destination)
        if health is None:
            health = self._health[destination] = Health()
        now = time.monotonic()
        if health.ejected_until > now:
            return False  # a panic-routed call to an ejected destination does not lengthen its ejection
        health.failures += 1
        if health.failures < detection.consecutive_failures:
            return False
        health.failures = 0
        health.ejections += 1
        health.ejected_at = now
        health.ejected_until = now + min(detection.ejection_ms * health.ejections, detection.max_ejection_ms) / 1000
        return True

    def succeeded(self, destination: str) -> None:
        """A success resets the failures and the ejections in a row, and ends an ejection."""
        if destination in self._health:
            del self._health[destination]

    def choose(self, destinations: Iterable[str]) -> list[str] | None:
        """The destinations to try, in the given order, without the ejected ones; when every one is ejected, the
        one ejected longest ago alone (panic routing). None when none is ejected (the common case)."""
        names = list(destinations)
        if not self._health:
            return None
        now = time.monotonic()
        healthy = [name for name in names if not self.ejected(name, now)]
        if len(healthy) == len(names):
            return None
        if healthy:
            return healthy
        return [min(names, key=lambda name: self._health[name].ejected_at)] if names else []

    def view(self, destination: str) -> dict[str, object]:
        """`outlier` of the admin destinations listing: whether ejected, until when (UTC epoch seconds), and the
        ejections in a row."""
        health = self._health.get(destination)
        now = time.monotonic()
        if health is None:
            return {"ejected": False, "ejected_until": None, "ejections": 0}
        ejected = health.ejected_until > now
        until = round(time.time() + (health.ejected_until - now), 3) if ejected else None
        return {"ejected": ejected, "ejected_until": until, "ejections": health.ejections}
