"""Write-side flow control: a protocol's writer waits while the transport's buffer is above its high-water mark."""

from __future__ import annotations

import asyncio


class FlowControl:
    """Tracks `pause_writing`/`resume_writing` so a producer can `await drain()` instead of buffering forever."""

    def __init__(self) -> None:
        self._resumed: asyncio.Event | None = None
        self.closed = False

    def pause(self) -> None:
        """The transport's write buffer is full."""
        self._resumed = asyncio.Event()

    def resume(self) -> None:
        """The transport's write buffer drained."""
        if self._resumed is not None:
            self._resumed.set()
            self._resumed = None

    def close(self) -> None:
        """The connection is gone; waiters wake and find it closed."""
        self.closed = True
        self.resume()

    async def drain(self) -> None:
        """Return once writing may continue; raises ConnectionError when the peer went away."""
        if self._resumed is not None:
            await self._resumed.wait()
        if self.closed:
            raise ConnectionError("peer closed the connection")
