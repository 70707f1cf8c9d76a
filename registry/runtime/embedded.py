"""The runtime inside the registry's own process: the embedded default of `make run`.

With SQLite and the in-memory channel layer, separate processes cannot reach each other's streams,
so `manage.py up` runs the worker as a thread of daphne (`REGISTRY_RUNTIME_EMBEDDED=1`): appends wake
it directly, and its `event_deltas` previews reach the streams through the in-memory layer.
"""

from __future__ import annotations

import atexit
import logging
import threading

from registry.runtime.config import RuntimeSettings
from registry.runtime.worker import Worker

logger = logging.getLogger(__name__)
_started: list[Worker] = []


def start_embedded_runtime() -> Worker:
    """Start one worker thread for this process (once); it stops when the process exits."""
    if _started:
        return _started[0]
    worker = Worker(RuntimeSettings.from_settings(), embedded=True)
    threading.Thread(target=worker.run, name="embedded-runtime", daemon=True).start()
    atexit.register(worker.stop)
    _started.append(worker)
    logger.info("session runtime embedded in this process")
    return worker
