"""The deadline scheduler that shares inference workers between sessions."""

from __future__ import annotations

import asyncio
import threading

from kokoro_tts.scheduler import DeadlineScheduler


async def test_earliest_deadline_runs_first_and_cancelled_jobs_are_skipped() -> None:
    scheduler = DeadlineScheduler(workers=1)
    scheduler.start()
    gate = threading.Event()
    order: list[str] = []

    def job(name: str) -> str:
        order.append(name)
        return name

    blocker = asyncio.create_task(scheduler.run(lambda: gate.wait(5), deadline=0))
    await asyncio.sleep(0.05)  # the worker is now busy with the blocker
    late = asyncio.create_task(scheduler.run(lambda: job("late reply chunk"), deadline=30))
    dropped = asyncio.create_task(scheduler.run(lambda: job("dropped"), deadline=5))
    first = asyncio.create_task(scheduler.run(lambda: job("new first chunk"), deadline=10))
    await asyncio.sleep(0.05)
    dropped.cancel()
    gate.set()
    assert await first == "new first chunk" and await late == "late reply chunk"
    await blocker
    assert order == ["new first chunk", "late reply chunk"]
    assert scheduler.pending == 0
    await scheduler.stop()


async def test_a_failing_job_reaches_its_caller_and_the_worker_goes_on() -> None:
    scheduler = DeadlineScheduler(workers=1)
    scheduler.start()

    def boom() -> None:
        raise ValueError("bad chunk")

    failing = asyncio.create_task(scheduler.run(boom, deadline=0))
    ok = asyncio.create_task(scheduler.run(lambda: 42, deadline=1))
    try:
        await failing
    except ValueError as exc:
        assert str(exc) == "bad chunk"
    else:
        raise AssertionError("the job's exception was swallowed")
    assert await ok == 42
    await scheduler.stop()
