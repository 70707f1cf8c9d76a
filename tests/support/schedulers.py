"""Two scheduler passes racing in threads: each thread runs `run_once` for every tick, the two released together
at each tick by a barrier, so a fire claimed twice would show."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime

from django.db import connection

from registry.triggers.scheduler import run_once


def race_schedulers(ticks: list[datetime], *, fired: Callable[[list], None] | None = None) -> None:
    """Run two schedulers over `ticks` at once; `fired` gets what each pass returned (the trigger fires)."""
    barrier = threading.Barrier(2)
    failures: list[BaseException] = []

    def scheduler() -> None:
        try:
            for tick in ticks:
                barrier.wait(timeout=30)
                made = run_once(now=tick)
                if fired is not None:
                    fired(made)
        except BaseException as error:  # reported by the test thread
            failures.append(error)
            barrier.abort()
        finally:
            connection.close()

    threads = [threading.Thread(target=scheduler) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
