"""A TCP server on loopback run by its own asyncio loop in a daemon thread: the base of the fake providers and
upstreams that a test drives from its own (synchronous) thread. Bound to port 0; the port is read back."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
T = TypeVar("T")


class LoopServer:
    """`serve(handler)` binds 127.0.0.1:0 on the thread's loop; `stop()` closes the server, cancels the
    connections' tasks and ends the thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def serve(self, handler: Handler, *, backlog: int = 100, setup: Callable[[], None] | None = None) -> int:
        """Start the thread and listen; `setup` runs on the loop first (to create loop-bound objects)."""
        self._thread.start()

        async def bind() -> asyncio.Server:
            if setup is not None:
                setup()
            return await asyncio.start_server(handler, "127.0.0.1", 0, backlog=backlog)

        self._server = self.run(bind())
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on the server's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        self.run(close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class LoopService:
    """The base of a fake served by its own `LoopServer` (`_runner`): its `url`, and `stop()`."""

    def __init__(self) -> None:
        self._runner = LoopServer()

    @property
    def url(self) -> str:
        """The root URL."""
        return self._runner.url

    def stop(self) -> None:
        """Stop serving and end the thread."""
        self._runner.stop()
