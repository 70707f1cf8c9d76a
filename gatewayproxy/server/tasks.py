"""Stopping the background tasks of the gateway's long-lived parts (certificate watchers, pollers, refreshers)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task`, when there is one, and wait until it has stopped."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
