"""`LazyTimer`: one loop timer serving a deadline that moves often; `Deadlines`: request deadlines that cancel
like `asyncio.timeout` (bounds allow 5 ms for clock rounding)."""

from __future__ import annotations

import asyncio

import uvloop

from gatewayproxy.server.timers import Deadlines, LazyTimer


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


async def _request(deadlines: Deadlines, seconds: float, work: float) -> tuple[str, float]:
    """A request under a deadline as the data plane runs one: ('done' | 'timeout', when it ended)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    deadline = deadlines.enter(seconds)
    try:
        try:
            await asyncio.sleep(work)
        finally:
            timed_out = deadlines.leave(deadline)
    except asyncio.CancelledError:
        if not timed_out:
            raise
        return "timeout", loop.time() - start
    return "done", loop.time() - start


def test_deadlines_cancel_only_the_requests_that_pass_theirs() -> None:
    async def run() -> list[tuple[str, float]]:
        deadlines = Deadlines()
        requests = [
            _request(deadlines, 0.1, 0.02),  # done well before its deadline
            _request(deadlines, 0.1, 1.0),  # times out at 0.1
            _request(deadlines, 0.3, 0.2),  # another timeout (a config change): done
            _request(deadlines, 0.05, 1.0),  # a shorter timeout entered after longer ones still fires first
        ]
        return await asyncio.gather(*requests)

    (first, second, third, fourth) = uvloop.run(run())
    assert first[0] == "done" and first[1] < 0.1
    assert second[0] == "timeout" and 0.095 <= second[1] < 0.2
    assert third[0] == "done" and third[1] >= 0.195
    assert fourth[0] == "timeout" and 0.045 <= fourth[1] < 0.1


def test_a_cancellation_that_is_not_the_deadline_propagates() -> None:
    async def run() -> tuple[bool, int]:
        deadlines = Deadlines()
        task = asyncio.ensure_future(_request(deadlines, 10.0, 1.0))
        await asyncio.sleep(0.02)
        task.cancel()  # the client went away
        try:
            await task
        except asyncio.CancelledError:
            return True, task.cancelling()
        return False, task.cancelling()

    propagated, cancelling = uvloop.run(run())
    assert propagated and cancelling == 1


def test_an_answered_deadline_leaves_no_cancellation_behind() -> None:
    async def run() -> tuple[tuple[str, float], int]:
        deadlines = Deadlines()
        outcome = await _request(deadlines, 0.02, 1.0)
        await asyncio.sleep(0.01)  # the task goes on
        task = asyncio.current_task()
        assert task is not None
        return outcome, task.cancelling()

    outcome, cancelling = uvloop.run(run())
    assert outcome[0] == "timeout" and cancelling == 0  # consumed, as `asyncio.timeout` consumes its own
