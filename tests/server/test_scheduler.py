"""The deadline scheduler that shares inference workers between sessions."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from kokoro_client.errors import ErrorCode, TTSError
from kokoro_tts.engine.scheduler import MEASURED, UNMEASURED_JOB_S, Batch, DeadlineScheduler, JobRecord


@asynccontextmanager
async def one_busy_worker() -> AsyncIterator[tuple[DeadlineScheduler, threading.Event]]:
    """A scheduler whose one worker runs a job until the gate is set: what is queued meanwhile waits its turn."""
    scheduler, gate = DeadlineScheduler(workers=1), threading.Event()
    scheduler.start()
    blocker = asyncio.create_task(scheduler.run(lambda _every_core: gate.wait(5), deadline=0))
    await asyncio.sleep(0.05)  # the worker is now busy with the blocker
    try:
        yield scheduler, gate
    finally:
        gate.set()
        await blocker
        await scheduler.stop()


async def test_earliest_deadline_runs_first_and_cancelled_jobs_are_skipped() -> None:
    order: list[str] = []

    def job(name: str) -> str:
        order.append(name)
        return name

    async with one_busy_worker() as (scheduler, gate):
        late = asyncio.create_task(scheduler.run(lambda _every_core: job("late reply chunk"), deadline=30))
        dropped = asyncio.create_task(scheduler.run(lambda _every_core: job("dropped"), deadline=5))
        first = asyncio.create_task(scheduler.run(lambda _every_core: job("new first chunk"), deadline=10))
        await asyncio.sleep(0.05)
        dropped.cancel()
        gate.set()
        assert await first == "new first chunk" and await late == "late reply chunk"
    assert order == ["new first chunk", "late reply chunk"]
    assert scheduler.pending == 0


async def test_a_failing_job_reaches_its_caller_and_the_worker_goes_on() -> None:
    scheduler = DeadlineScheduler(workers=1)
    scheduler.start()

    def boom(every_core: bool) -> None:
        raise ValueError("bad chunk")

    failing = asyncio.create_task(scheduler.run(boom, deadline=0))
    ok = asyncio.create_task(scheduler.run(lambda _every_core: 42, deadline=1))
    try:
        await failing
    except ValueError as exc:
        assert str(exc) == "bad chunk"
    else:
        raise AssertionError("the job's exception was swallowed")
    assert await ok == 42
    await scheduler.stop()


async def test_admission_estimates_the_wait_from_the_queue_and_the_measured_job_length() -> None:
    scheduler = DeadlineScheduler(workers=1)  # not started: the jobs stay queued
    now = asyncio.get_running_loop().time()
    for i in range(40):  # the latest MEASURED jobs took 1 s each, older ones 9 s
        length = 1.0 if i >= 40 - MEASURED else 9.0
        scheduler.history.append(JobRecord(f"u{i}", now, started=now - 100 + i, finished=now - 100 + i + length))
    assert scheduler.mean_job_s() == 1.0
    queued = [asyncio.create_task(scheduler.run(lambda _every_core: None, deadline=now)) for _ in range(3)]
    await asyncio.sleep(0)
    assert scheduler.expected_wait_s() == pytest.approx(3.0)
    scheduler.admit(3.5)
    with pytest.raises(TTSError) as refused:
        scheduler.admit(1.2)
    assert refused.value.code == ErrorCode.SERVER_BUSY and refused.value.retry_after_s == 2  # ceil(3.0 - 1.2)
    assert refused.value.http_status == 503
    scheduler.history.append(JobRecord("running", now, started=now - 0.25))  # 0.75 s of a mean job left
    assert scheduler.expected_wait_s() == pytest.approx(3.75, abs=0.05)
    for task in queued:
        task.cancel()
    await asyncio.gather(*queued, return_exceptions=True)
    assert scheduler.expected_wait_s() == pytest.approx(0.75, abs=0.05)  # cancelled jobs are not waited for
    scheduler.history.append(JobRecord("overrunning", now, started=now - 5.0))  # past its mean: still running
    assert scheduler.expected_wait_s() == pytest.approx(0.85, abs=0.05)


async def test_share_counts_the_jobs_sharing_the_machine() -> None:
    # A stream keeps one job queued or running: with k of them, each gets about a k-th of the machine
    # (vocoder_windows plans a window from that share of the decoder's speed), however many workers run them.
    scheduler = DeadlineScheduler(workers=2)  # not started: the jobs stay queued
    assert scheduler.share() == 1.0
    queued = [asyncio.create_task(scheduler.run(lambda _every_core: None, deadline=0)) for _ in range(5)]
    await asyncio.sleep(0)
    assert scheduler.share() == 5.0
    queued[0].cancel()
    await asyncio.gather(queued[0], return_exceptions=True)
    assert scheduler.share() == 4.0  # a cancelled job takes no turn
    for task in queued[1:]:
        task.cancel()
    await asyncio.gather(*queued, return_exceptions=True)
    assert scheduler.share() == 1.0


async def test_a_lone_job_has_every_core_and_waiting_jobs_run_side_by_side() -> None:
    scheduler = DeadlineScheduler(workers=2)
    seen: dict[str, bool] = {}
    first_running, gate = threading.Event(), threading.Event()

    def lone(every_core: bool) -> None:
        seen["lone"] = every_core
        first_running.set()
        gate.wait(5)

    def after(every_core: bool) -> None:
        seen["after"] = every_core

    scheduler.start()
    lone_job = asyncio.create_task(scheduler.run(lone, deadline=0))
    await asyncio.to_thread(first_running.wait, 5)
    after_job = asyncio.create_task(scheduler.run(after, deadline=0))
    await asyncio.sleep(0.2)
    assert "after" not in seen, "a job started beside one that had every core"
    gate.set()
    await asyncio.gather(lone_job, after_job)
    assert seen == {"lone": True, "after": True}  # each ran alone: nothing else waited when it started
    await scheduler.stop()

    # Two jobs waiting at once run side by side, a share of the cores each (they meet at the barrier).
    side_by_side = DeadlineScheduler(workers=2)
    barrier = threading.Barrier(2, timeout=5)

    def meet(every_core: bool) -> bool:
        barrier.wait()
        return every_core

    jobs = [asyncio.create_task(side_by_side.run(meet, deadline=0)) for _ in range(2)]
    await asyncio.sleep(0)
    side_by_side.start()
    assert await asyncio.gather(*jobs) == [False, False]
    await side_by_side.stop()


async def test_idle_workers_sleep() -> None:
    """With nothing queued, a worker waits for a job without using the CPU (it once spun on the event loop)."""
    scheduler = DeadlineScheduler(workers=2)
    scheduler.start()
    await scheduler.run(lambda _every_core: None, deadline=0)
    used = time.process_time()
    await asyncio.sleep(0.5)
    assert time.process_time() - used < 0.1, "the idle scheduler kept the CPU busy"
    await scheduler.stop()


async def test_a_job_due_before_the_one_running_alone_starts_beside_it() -> None:
    """A job cannot be interrupted: a new utterance's first window, due now, must not wait for a window of another
    reply that is due seconds later. A job due later than the one running alone still waits for it."""
    scheduler = DeadlineScheduler(workers=2)
    scheduler.start()
    lone_running, gate = threading.Event(), threading.Event()

    def lone(every_core: bool) -> bool:
        lone_running.set()
        gate.wait(5)
        return every_core

    def told(every_core: bool) -> bool:
        return every_core

    lone_job = asyncio.create_task(scheduler.run(lone, deadline=10.0))
    await asyncio.to_thread(lone_running.wait, 5)
    later = asyncio.create_task(scheduler.run(told, deadline=20.0))
    assert await asyncio.wait_for(scheduler.run(told, deadline=1.0), 5) is False  # beside it, on its share
    await asyncio.sleep(0.2)
    assert not later.done(), "a job due later than the one running alone started beside it"
    gate.set()
    assert await lone_job is True
    assert await later is True  # then alone in its turn
    assert [record.every_core for record in scheduler.history] == [True, False, True]
    await scheduler.stop()


def test_before_any_job_is_measured_a_job_is_assumed_to_take_a_cpu_windows_time() -> None:
    assert DeadlineScheduler().mean_job_s() == UNMEASURED_JOB_S


async def test_a_job_queued_by_the_caller_of_the_job_just_done_goes_ahead_of_later_deadlines() -> None:
    """A stream's first window is queued by the step that received its phonemes: the worker must see it before
    choosing, or another stream's later window (due later) takes the worker first."""
    scheduler = DeadlineScheduler(workers=1)
    scheduler.start()
    order: list[str] = []

    def job(name: str) -> str:
        order.append(name)
        return name

    async def stream() -> None:
        await scheduler.run(lambda _every_core: job("phonemes"), deadline=0)
        await scheduler.run(lambda _every_core: job("first window"), deadline=0)

    started = asyncio.create_task(stream())
    later = asyncio.create_task(scheduler.run(lambda _every_core: job("another stream's later window"), deadline=1))
    await asyncio.gather(started, later)
    assert order == ["phonemes", "first window", "another stream's later window"]
    await scheduler.stop()


async def test_jobs_of_one_batch_queued_together_run_as_one_call() -> None:
    calls: list[list[str]] = []

    def run(items: list[str], every_core: bool) -> list[str]:
        calls.append(items)
        return [item.upper() for item in items]

    def plain_job(every_core: bool) -> str:
        calls.append(["plain"])
        return "plain"

    batch = Batch(run, limit=3)
    async with one_busy_worker() as (scheduler, gate):
        jobs = {
            name: asyncio.create_task(scheduler.run_batched(batch, name, deadline, label=name))
            for name, deadline in [("d", 4.0), ("b", 2.0), ("gone", 2.5), ("a", 1.0), ("c", 3.0)]
        }
        plain = asyncio.create_task(scheduler.run(plain_job, deadline=1.5, label="plain"))
        await asyncio.sleep(0.05)
        assert scheduler.pending_calls() == 1 + 2  # five batched jobs, three to a call, and the plain one
        jobs.pop("gone").cancel()
        await asyncio.sleep(0)
        gate.set()
        assert {name: await job for name, job in jobs.items()} == {n: n.upper() for n in "abcd"}
        assert await plain == "plain"
    # The earliest due runs at its turn with the next ones due, up to the limit; a cancelled job is not run.
    assert calls == [["a", "b", "c"], ["plain"], ["d"]]
    assert [r.label for r in scheduler.history][-3:] == ["a + b + c", "plain", "d"]  # one record per call
    assert scheduler.started == 1 + 4 + 1 and scheduler.pending == 0


async def test_an_item_that_fails_its_batch_fails_alone() -> None:
    calls: list[list[int]] = []

    def run(items: list[int], every_core: bool) -> list[int]:
        calls.append(items)
        if 0 in items:
            raise ZeroDivisionError("one item is bad")
        return [100 // item for item in items]

    batch = Batch(run, limit=4)
    async with one_busy_worker() as (scheduler, gate):
        jobs = [asyncio.create_task(scheduler.run_batched(batch, item, deadline=1.0)) for item in (5, 0, 20)]
        await asyncio.sleep(0.05)
        gate.set()
        results = await asyncio.gather(*jobs, return_exceptions=True)
    assert results[0] == 20 and results[2] == 5
    assert isinstance(results[1], ZeroDivisionError)
    assert calls == [[5, 0, 20], [5], [0], [20]]  # the batch, then each item alone
