"""An outage of a shared store (Redis) as the plugins that use one see it: whether to try it now (one
probe per interval while it is down), and one log line when it goes down and one when it is back."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

logger = logging.getLogger("gatewayproxy.plugins")


class Outage:
    """Whether the shared store is down; while it is, one probe per interval tries it again."""

    def __init__(
        self,
        label: str,
        retry_interval: float,
        *,
        while_down: str,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.label = label
        self.retry_interval = retry_interval
        self.while_down = while_down
        self.on_change = on_change
        self.down_since: float | None = None
        self.next_probe = 0.0

    def should_try(self) -> bool:
        """True when the store is up, or when it is time for the next probe."""
        if self.down_since is None:
            return True
        now = time.monotonic()
        if now < self.next_probe:
            return False
        self.next_probe = now + self.retry_interval
        return True

    def failed(self, error: BaseException) -> None:
        """The store did not answer; logs once per outage."""
        now = time.monotonic()
        self.next_probe = now + self.retry_interval
        if self.down_since is None:
            self.down_since = now
            if self.on_change is not None:
                self.on_change(True)
            logger.warning(
                "%s: redis is unreachable or slow (%s); %s", self.label, type(error).__name__, self.while_down
            )

    def recovered(self) -> None:
        """The store answered again."""
        if self.down_since is not None:
            logger.warning("%s: redis answers again after %.1f s", self.label, time.monotonic() - self.down_since)
            self.down_since = None
            if self.on_change is not None:
                self.on_change(False)
