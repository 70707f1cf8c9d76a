"""The one way tests, benchmarks and stand-ins wait: poll an observable condition until it holds, or fail naming
what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(
    condition: Callable[[], Any], *, timeout: float = 20, what: str = "condition", interval: float = 0.02
) -> Any:
    """Poll `condition` every `interval` seconds until it returns something truthy; that value is returned."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)
