"""Shares the inference workers between sessions: earliest deadline first.

Each job carries the time by which its audio is needed: a new utterance's first chunk is needed now; a later
chunk is needed when the audio already sent will have finished playing. So a long reply, whose next chunk has
seconds of slack, never holds back another session's first chunk, and no session starves: deadlines age.
Jobs run in a thread pool, so the event loop stays free for /ping and new connections. With several workers a job
runs alone, on every core, when nothing else runs or waits, and the others wait for it, unless they are due before
it: a job cannot be interrupted, and a second caller's first window would otherwise wait for a window of the first
caller's reply that is due seconds later (docs/engine.md has the figures). When jobs wait, they run side by side, a
share of the cores each (backends/ort_sessions.py); the job is told which (``run``).

Admission (``admit``): work already accepted must still meet its deadlines, so new work is refused with
``server_busy`` at once when the jobs queued ahead of it would keep its first audio waiting too long. Each active
stream keeps one job queued or running (its next piece), and once the workers fall behind they take those in
turn: a new utterance's first audio waits about one job of each, i.e. (queued + running jobs) × the measured
mean job time, per worker. The same sum is what every accepted stream waits between its pieces.

Batching (``run_batched``): jobs of one ``Batch`` queued together run as one call of its function, at the turn of the
earliest due, up to its limit: on a GPU one call for many streams costs about what one stream's does.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kokoro_client.errors import ErrorCode, TTSError

# A refused client is told to come back after this long at least (HTTP Retry-After), and at most after the longest.
MIN_RETRY_AFTER_S = 1
MAX_RETRY_AFTER_S = 30


def busy(message: str, retry_after_s: float = MIN_RETRY_AFTER_S) -> TTSError:
    """``server_busy``, with when to retry (whole seconds, as HTTP's Retry-After has it)."""
    seconds = min(MAX_RETRY_AFTER_S, max(MIN_RETRY_AFTER_S, math.ceil(retry_after_s)))
    return TTSError(ErrorCode.SERVER_BUSY, f"{message}; retry in {seconds} s.", retry_after_s=seconds)


class Limit:
    """A count with a ceiling: past it, new work is refused with ``server_busy`` at once instead of queueing."""

    def __init__(self, what: str, ceiling: int) -> None:
        self.what = what
        self.ceiling = ceiling
        self.count = 0
        self.refused = 0  # acquisitions refused so far (GET /metrics)

    def acquire(self) -> None:
        if self.count >= self.ceiling:
            self.refused += 1
            raise busy(f"The server is at its limit of {self.ceiling} {self.what}")
        self.count += 1

    def release(self) -> None:
        self.count -= 1

    @contextmanager
    def hold(self) -> Iterator[None]:
        self.acquire()
        try:
            yield
        finally:
            self.release()


class Interrupted(Exception):
    """``unless``'s step did not finish: what it raced finished first."""


async def unless[T](step: Awaitable[T], stop: Awaitable[object]) -> T:
    """``step``'s result, or ``Interrupted`` as soon as ``stop`` finishes first (a cancel, a client gone): the step
    is cancelled and awaited, so a stream's jobs not yet started are dropped rather than waited for."""
    task, stopper = asyncio.ensure_future(step), asyncio.ensure_future(stop)
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        if not task.done():
            task.cancel()
        await asyncio.gather(task, stopper, return_exceptions=True)
    if task.cancelled():
        raise Interrupted
    return task.result()


@dataclass(frozen=True, eq=False)
class Batch[I, R]:
    """Jobs that may run as one call: ``run(items, every_core)`` returns one result per item, in order, for at most
    ``limit`` items. Jobs batch with those of the same ``Batch`` object only."""

    run: Callable[[list[I], bool], list[R]]
    limit: int


@dataclass(order=True)
class _Job:
    deadline: float
    seq: int
    fn: Callable[[bool], Any] = field(compare=False)
    future: asyncio.Future[Any] = field(compare=False)
    label: str = field(default="", compare=False)
    kind: str = field(default="", compare=False)
    batch: Batch[Any, Any] | None = field(default=None, compare=False)
    item: Any = field(default=None, compare=False)


@dataclass
class Tally:
    """Jobs of one kind run so far, and the worker seconds they took (side by side or alone, as they ran)."""

    jobs: int = 0
    seconds: float = 0.0


@dataclass
class JobRecord:
    """One job handed to a worker: what it was, when it was due, when it ran (loop time, i.e. monotonic) and whether
    it ran alone, on every core."""

    label: str
    deadline: float
    started: float
    every_core: bool = False
    finished: float | None = None  # None while it runs


HISTORY = 512  # jobs kept in ``DeadlineScheduler.history``: enough to read one test's or one request's order
MEASURED = 32  # the latest finished jobs whose mean is the expected length of a job (``expected_wait_s``)
UNMEASURED_JOB_S = 0.25  # a job's expected length before any has finished: a CPU window's, roughly


class DeadlineScheduler:
    def __init__(self, workers: int = 1) -> None:
        self._workers = max(1, workers)
        self._executor = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="kokoro-infer")
        self._heap: list[_Job] = []
        self._seq = itertools.count()
        self._ready = asyncio.Event()
        self._shareable = asyncio.Event()  # clear while a job runs exclusive
        self._shareable.set()
        self._exclusive_due = math.inf  # the deadline of the job running exclusive (``_turn``)
        self._tasks: list[asyncio.Task[None]] = []
        self.started = 0  # jobs handed to a worker thread so far
        self.running = 0  # jobs in a worker thread now
        self.history: deque[JobRecord] = deque(maxlen=HISTORY)  # the latest jobs run, oldest first
        self.tallies: defaultdict[str, Tally] = defaultdict(Tally)  # by ``run``'s ``kind`` (GET /metrics)

    @property
    def workers(self) -> int:
        return self._workers

    @property
    def pending(self) -> int:
        """Jobs queued, not yet started."""
        return sum(1 for job in self._heap if not job.future.done())

    def pending_calls(self) -> int:
        """The calls the queued jobs take: a batch's jobs go ``limit`` to a call."""
        batched: defaultdict[Batch[Any, Any], int] = defaultdict(int)
        calls = 0
        for job in self._heap:
            if job.future.done():
                continue
            if job.batch is None:
                calls += 1
            else:
                batched[job.batch] += 1
        return calls + sum(-(-count // batch.limit) for batch, count in batched.items())

    def share(self) -> float:
        """How many jobs share the machine now (queued and running, at least 1): a stream, which keeps one job
        queued or running, gets about this fraction of what the machine does alone (side by side, the workers do a
        little more in all, never less). Read from a worker thread: approximate."""
        return max(1.0, float(self.pending + self.running))

    def mean_job_s(self) -> float:
        """The mean length of the latest ``MEASURED`` finished calls (``UNMEASURED_JOB_S`` before any); a batch's
        jobs share one record."""
        lengths = [r.finished - r.started for r in reversed(self.history) if r.finished is not None][:MEASURED]
        return sum(lengths) / len(lengths) if lengths else UNMEASURED_JOB_S

    def expected_wait_s(self) -> float:
        """How long a job due now would wait for a worker: one mean call for each call queued, plus what the
        running ones have left of theirs, shared among the workers (module docstring)."""
        mean, now = self.mean_job_s(), asyncio.get_running_loop().time()
        # A job past its mean length is still running: it keeps a tenth of a mean, so work in flight never reads as
        # an idle machine (a loaded host's overrunning jobs let a whole burst in under a zero bound).
        left = sum(max(0.1 * mean, mean - (now - r.started)) for r in self.history if r.finished is None)
        return (left + self.pending_calls() * mean) / self._workers

    def admit(self, max_wait_s: float) -> None:
        """Refuse new work (``server_busy``, with a Retry-After) when its first audio would wait over
        ``max_wait_s`` behind the work already accepted."""
        wait = self.expected_wait_s()
        if wait > max_wait_s:
            raise busy(
                f"The server is {wait:.1f} s behind (the limit is {max_wait_s:g} s) with the work it has accepted",
                wait - max_wait_s,
            )

    def start(self) -> None:
        if not self._tasks:
            self._tasks = [asyncio.create_task(self._worker()) for _ in range(self._workers)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def run[T](self, fn: Callable[[bool], T], deadline: float, label: str = "", kind: str = "") -> T:
        """Run ``fn(every_core)`` in a worker thread when its turn comes; ``every_core``: whether the job has every core
        (the module docstring), for the onnx sessions it picks. Cancelling the caller drops a job not yet started.
        ``label`` names the job in ``history``; ``kind`` is what ``tallies`` counts it as."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, _Job(deadline, next(self._seq), fn, future, label, kind))
        self._ready.set()
        return await future

    async def run_batched[I, R](
        self, batch: Batch[I, R], item: I, deadline: float, label: str = "", kind: str = ""
    ) -> R:
        """``batch.run([item, ...])``'s result for ``item``: the job runs at its turn as ``run``'s would, in one
        call with the other jobs of ``batch`` then queued (the earliest due first, up to ``batch.limit``)."""
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        job = _Job(deadline, next(self._seq), partial(_run_one, batch, item), future, label, kind, batch, item)
        heapq.heappush(self._heap, job)
        self._ready.set()
        return await future

    def _mates(self, job: _Job) -> list[_Job]:
        """The queued jobs that run in ``job``'s call, ``job`` first; taken out of the queue."""
        if job.batch is None or job.batch.limit <= 1:
            return [job]
        same = sorted(j for j in self._heap if j.batch is job.batch and not j.future.done())
        mates = same[: job.batch.limit - 1]
        if mates:
            taken = {id(j) for j in mates}
            self._heap = [j for j in self._heap if id(j) not in taken]
            heapq.heapify(self._heap)
        return [job, *mates]

    async def _turn(self) -> None:
        """Returns when the job at the head of the queue may start: at once, unless a job runs exclusive (every core);
        then when that one ends, or at once if the head is due before it (a new utterance's first window, beside a
        window of a reply decoded seconds ahead of its playback), on its share of the cores."""
        while not (self._heap and (self._shareable.is_set() or self._heap[0].deadline < self._exclusive_due)):
            self._ready.clear()
            if not self._heap:  # nothing to run: sleep until a job comes (the exclusive one's end alone is no reason)
                await self._ready.wait()
                continue
            waits = {asyncio.ensure_future(self._ready.wait()), asyncio.ensure_future(self._shareable.wait())}
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()

    async def _worker(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._turn()
            job = heapq.heappop(self._heap)
            if job.future.done():  # its caller went away before its turn
                continue
            # Exclusive (every core, the others paused) when nothing else runs or waits; side by side otherwise.
            exclusive = self._workers > 1 and not self.running and not self.pending
            if exclusive:
                self._shareable.clear()
                self._exclusive_due = job.deadline
            jobs = self._mates(job)
            self.started += len(jobs)
            self.running += 1
            every_core = exclusive or self._workers == 1
            record = JobRecord(" + ".join(j.label for j in jobs), job.deadline, loop.time(), every_core)
            self.history.append(record)
            call = job.fn if len(jobs) == 1 else partial(_run_batch, jobs)
            try:
                results = await loop.run_in_executor(self._executor, call, every_core)
            except Exception as exc:  # handed to the callers, who decide what the client reads
                for j in jobs:
                    if not j.future.done():
                        j.future.set_exception(exc)
            else:
                for j, result in zip(jobs, results if len(jobs) > 1 else [results], strict=True):
                    if j.future.done():
                        continue
                    if isinstance(result, _Failed):
                        j.future.set_exception(result.error)
                    else:
                        j.future.set_result(result)
            finally:
                record.finished = loop.time()
                for j in jobs:  # a batch's worker seconds, shared among its jobs
                    tally = self.tallies[j.kind]
                    tally.jobs, tally.seconds = (
                        tally.jobs + 1,
                        tally.seconds + (record.finished - record.started) / len(jobs),
                    )
                self.running -= 1
                if exclusive:
                    self._exclusive_due = math.inf
                    self._shareable.set()
            # Let the job's caller run before the next job is chosen: a stream whose phonemes job just finished
            # queues its first window now, due earlier than the later windows of others already in the queue.
            await asyncio.sleep(0)


def _run_one[I, R](batch: Batch[I, R], item: I, every_core: bool) -> R:
    (result,) = batch.run([item], every_core)
    return result


@dataclass(frozen=True)
class _Failed:
    """One item's error, in the results of a batch whose call failed (``_run_batch``)."""

    error: Exception


def _run_batch(jobs: list[_Job], every_core: bool) -> list[Any]:
    """The jobs of one batch in one call of its function (``_mates``). Should the call fail, each item runs alone,
    so that only the jobs whose own items fail read an error (a ``_Failed``), never their batch mates."""
    batch = jobs[0].batch
    assert batch is not None
    items = [j.item for j in jobs]
    try:
        results = batch.run(items, every_core)
    except Exception:
        return [_caught(batch, item, every_core) for item in items]
    if len(results) != len(jobs):
        raise RuntimeError(f"a batch of {len(jobs)} jobs returned {len(results)} results")
    return results


def _caught[I, R](batch: Batch[I, R], item: I, every_core: bool) -> R | _Failed:
    try:
        return _run_one(batch, item, every_core)
    except Exception as exc:
        return _Failed(exc)
