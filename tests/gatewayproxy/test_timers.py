"""`LazyTimer`: one loop timer serving a deadline that moves often (bounds allow 5 ms for clock rounding)."""

from __future__ import annotations

import asyncio

import uvloop

from gatewayproxy.server.timers import LazyTimer


def _fired_after(steps: list[tuple[float, str, float]], wait: float) -> list[float]:
    """Run `(at, action, seconds)` steps against one timer; the loop times (relative to start) it fired at."""

    async def run() -> list[float]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        fired: list[float] = []
        timer = LazyTimer(loop, lambda: fired.append(loop.time() - start))
        for at, action, seconds in steps:
            await asyncio.sleep(max(0.0, at - (loop.time() - start)))
            if action == "set":
                timer.set(seconds)
            elif action == "clear":
                timer.clear()
            else:
                timer.drop()
        await asyncio.sleep(max(0.0, wait - (loop.time() - start)))
        return fired

    return uvloop.run(run())


def test_a_later_deadline_is_kept_by_waiting_again() -> None:
    fired = _fired_after([(0, "set", 0.1), (0.05, "set", 0.2)], wait=0.4)
    assert len(fired) == 1 and fired[0] >= 0.245


def test_an_earlier_deadline_moves_the_timer() -> None:
    fired = _fired_after([(0, "set", 0.5), (0.02, "set", 0.05)], wait=0.3)
    assert len(fired) == 1 and 0.065 <= fired[0] < 0.3


def test_cleared_and_dropped_deadlines_do_not_fire() -> None:
    assert _fired_after([(0, "set", 0.05), (0.01, "clear", 0)], wait=0.15) == []
    assert _fired_after([(0, "set", 0.05), (0.01, "drop", 0)], wait=0.15) == []
    fired = _fired_after([(0, "set", 0.05), (0.01, "clear", 0), (0.03, "set", 0.05)], wait=0.2)
    assert len(fired) == 1 and fired[0] >= 0.075
