"""Stream slots (engine/capacity.py) on their own: the ceiling from the measurement, the queue's order (returning
sessions first), the bounded wait, and a waiter that leaves. The real server's use of them: test_capacity.py."""

from __future__ import annotations

import asyncio
import math

import pytest
from kokoro_client.errors import ErrorCode, TTSError
from kokoro_tts.engine.capacity import (
    HEADROOM,
    LEND_LEAD_S,
    MEASURED,
    UNLIMITED,
    Pace,
    ReadReceipts,
    StreamSlots,
    waiting_room,
)


def test_the_ceiling_is_the_measured_throughput_less_the_headroom() -> None:
    slots = StreamSlots(MEASURED)
    assert slots.ceiling == math.inf  # not measured yet: nothing is refused before the warm-up says
    slots.measured(audio_s=30.0, wall_s=4.0)  # 7.5 s of audio per second
    assert slots.throughput == 7.5
    assert slots.ceiling == math.floor(HEADROOM * 7.5) == 6
    slots.measured(audio_s=1.0, wall_s=2.0)  # slower than real time: still one stream, never none
    assert slots.ceiling == 1


def test_a_fixed_count_or_no_limit_ignores_the_measurement() -> None:
    fixed, unlimited = StreamSlots(3), StreamSlots(UNLIMITED)
    for slots in (fixed, unlimited):
        slots.measured(audio_s=100.0, wall_s=1.0)
    assert (fixed.ceiling, unlimited.ceiling) == (3, math.inf)
    with pytest.raises(ValueError, match="streams must be"):
        StreamSlots(-2)


def test_the_waiting_cap_takes_a_burst_the_slots_can_take() -> None:
    """A GPU measures dozens of slots (38 to 54 on an H200, docs/gpu.md): with the CPU-sized cap of 16, 32
    sessions arriving together were refused at the door while slots stood free. The cap is now twice the slots
    where that is more; a CPU's few slots and a server without slots keep the configured cap."""
    assert waiting_room(16, 38) == 76
    assert waiting_room(16, 6) == 16
    assert waiting_room(16, math.inf) == 16
    assert waiting_room(100, 38) == 100


async def test_a_newcomer_waits_for_the_slot_and_gets_it_when_it_is_released() -> None:
    slots, first, second = StreamSlots(1), object(), object()
    await slots.acquire(first, 1.0)
    await slots.acquire(first, 1.0)  # holding one already: no second slot, no wait
    assert (slots.count, slots.holds(first)) == (1, True)
    assert not slots.try_acquire(second)  # none free: no slot, and no place in the queue either
    waiting = asyncio.create_task(slots.acquire(second, 5.0))
    await asyncio.sleep(0.01)
    assert (waiting.done(), slots.waiting) == (False, 1)
    slots.release(first)
    await asyncio.wait_for(waiting, 1.0)
    assert (slots.holds(first), slots.holds(second), slots.waiting) == (False, True, 0)
    slots.release(first)  # releasing a slot not held changes nothing
    assert slots.count == 1


async def test_past_the_bounded_wait_it_is_server_busy_with_a_retry_time() -> None:
    slots = StreamSlots(1)
    await slots.acquire(object(), 1.0)
    with pytest.raises(TTSError) as refused:
        await slots.acquire(object(), 0.05)
    assert refused.value.code == ErrorCode.SERVER_BUSY
    assert refused.value.retry_after_s is not None and refused.value.retry_after_s >= 1
    assert (slots.refused, slots.waiting, slots.count) == (1, 0, 1)


async def test_a_returning_session_goes_ahead_of_newcomers_and_newcomers_keep_their_order() -> None:
    slots, playing = StreamSlots(1), object()
    await slots.acquire(playing, 1.0)
    served: list[str] = []

    async def wait(name: str, returning: bool) -> None:
        holder = object()
        await slots.acquire(holder, 5.0, returning=returning)
        served.append(name)
        await asyncio.sleep(0.01)
        slots.release(holder)

    tasks = [asyncio.create_task(wait("new 1", False)), asyncio.create_task(wait("new 2", False))]
    await asyncio.sleep(0.01)
    tasks.append(asyncio.create_task(wait("returning", True)))
    await asyncio.sleep(0.01)
    slots.release(playing)
    await asyncio.wait_for(asyncio.gather(*tasks), 2.0)
    assert served == ["returning", "new 1", "new 2"]


async def test_a_waiter_that_leaves_is_dropped_from_the_queue_and_loses_no_slot() -> None:
    slots, playing, leaving, next_one = StreamSlots(1), object(), object(), object()
    await slots.acquire(playing, 1.0)
    gone = asyncio.create_task(slots.acquire(leaving, 5.0))
    staying = asyncio.create_task(slots.acquire(next_one, 5.0))
    await asyncio.sleep(0.01)
    gone.cancel()
    await asyncio.gather(gone, return_exceptions=True)
    assert slots.waiting == 1
    slots.release(playing)
    await asyncio.wait_for(staying, 1.0)
    assert (slots.holds(leaving), slots.holds(next_one), slots.count) == (False, True, 1)


async def test_a_lent_slot_goes_to_the_waiter_and_comes_back_ahead_of_everyone_or_over_the_ceiling() -> None:
    """A stream whose client holds plenty of audio lends its slot to a waiter (``Pace``), and is told when one
    comes; when it needs audio again it goes ahead of returning sessions and newcomers, and past its own bound it
    takes a slot over the ceiling rather than be refused: it was admitted."""
    slots, lender, newcomer, returning = StreamSlots(1), object(), object(), object()
    await slots.acquire(lender, 1.0)
    wanted = slots.wanted()
    assert not wanted.done()
    waiting = asyncio.create_task(slots.acquire(newcomer, 5.0))
    await asyncio.wait_for(wanted, 1.0)  # a waiter came
    slots.lend(lender)
    await asyncio.wait_for(waiting, 1.0)
    assert (slots.holds(newcomer), slots.holds(lender), slots.lent) == (True, False, 1)
    second = asyncio.create_task(slots.acquire(returning, 5.0, returning=True))
    await asyncio.sleep(0.01)
    reclaiming = asyncio.create_task(slots.reclaim(lender, 5.0))
    await asyncio.sleep(0.01)
    slots.release(newcomer)
    await asyncio.wait_for(reclaiming, 1.0)
    assert (slots.holds(lender), slots.holds(returning)) == (True, False)
    over = object()
    await asyncio.wait_for(slots.reclaim(over, 0.05), 1.0)  # none free within its bound: over the ceiling
    assert slots.count == 2
    slots.release(lender)
    await asyncio.sleep(0.01)
    assert not second.done()  # the ceiling holds again: one slot, still held
    slots.release(over)
    await asyncio.wait_for(second, 1.0)
    assert (slots.count, slots.holds(returning)) == (1, True)


async def test_a_stream_far_ahead_lends_its_slot_while_its_send_is_stuck_in_a_full_buffer() -> None:
    """The case lending exists for: a slow HTTP reader's send waits on its full receive buffer, with a minute of
    audio ahead of its playback. A waiter that comes meanwhile gets the slot at once, not when the send ends."""
    slots, stream, newcomer = StreamSlots(1), object(), object()
    await slots.acquire(stream, 1.0)
    pace = Pace(slots, stream, 3.0, cut_off=True, lends=True)
    await pace.send(asyncio.sleep(0), 2 * LEND_LEAD_S)  # taken at once: its client holds plenty
    stuck: asyncio.Future[None] = asyncio.get_running_loop().create_future()  # a send into a full buffer
    sending = asyncio.create_task(pace.send(stuck, 1.0))
    await asyncio.sleep(0.01)
    await asyncio.wait_for(slots.acquire(newcomer, 5.0), 1.0)
    assert (slots.holds(newcomer), slots.holds(stream), pace.lent, slots.lent) == (True, False, True, 1)
    stuck.set_result(None)
    await asyncio.wait_for(sending, 1.0)


async def test_a_session_lends_its_slot_like_an_http_stream_until_its_client_first_answers() -> None:
    """A WebSocket stream is judged by its client's answers to its pings, but a client reading slowly answers its
    first ping late while its socket's buffers take seconds of audio: until then it is judged by its transport, as
    an HTTP stream is, and lends its slot while far ahead. Once its client has answered, it no longer lends."""

    async def sent(receipts: ReadReceipts, audio_s: float) -> None:
        await receipts.sent(audio_s)

    async def stuck_send(pace: Pace, newcomer: object, slots: StreamSlots) -> bool:
        """Whether ``newcomer`` gets the slot while ``pace``'s next send waits on a full buffer."""
        stuck: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        sending = asyncio.create_task(pace.send(stuck, 1.0))
        await asyncio.sleep(0.01)
        try:
            await slots.acquire(newcomer, 0.2)
        except TTSError:
            return False
        finally:
            stuck.set_result(None)
            await asyncio.wait_for(sending, 1.0)
        return True

    marks: list[bytes] = []

    async def ping(mark: bytes) -> None:
        marks.append(mark)

    for answered in (False, True):
        receipts, slots, stream, newcomer = ReadReceipts(ping), StreamSlots(1), object(), object()
        await slots.acquire(stream, 1.0)
        pace = Pace(slots, stream, 3.0, receipts=receipts)
        await pace.send(sent(receipts, 2 * LEND_LEAD_S), 2 * LEND_LEAD_S)  # into the socket's buffers at once
        if answered:
            receipts.answered(marks[-1])  # and its client vouched for all of it
        assert await stuck_send(pace, newcomer, slots) is not answered
        assert pace.lent is not answered
