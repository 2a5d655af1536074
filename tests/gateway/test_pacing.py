"""The adapters' timing helpers: their backoff, stop-aware sleeps, per-chat pacing, rate windows.

Spacing is read from the clock the helper itself consulted when it let a
caller through (no assertion depends on how fast the machine is).
"""

from __future__ import annotations

import asyncio
import itertools

import pytest

from lich.gateway.pacing import KeyedPacer, SlidingWindow, adapter_backoff, sleep_or_stop


def test_the_adapters_backoff_is_jittered_within_the_upper_half_of_each_step():
    backoff = adapter_backoff(1.0, 4.0)
    assert backoff.jitter == "equal"
    delays = [backoff.next_delay() for _ in range(5)]
    for delay, ceiling in zip(delays, (1.0, 2.0, 4.0, 4.0, 4.0), strict=True):
        assert ceiling / 2 - 0.001 <= delay <= ceiling
    backoff.reset()
    assert 0.5 - 0.001 <= backoff.next_delay() <= 1.0


def test_the_adapters_backoff_spreads_bots_dropped_together():
    delays = {adapter_backoff(1.0, 60.0).delay(4) for _ in range(50)}
    assert len(delays) > 10  # not all at the same instant


def test_the_adapters_backoff_from_zero_never_waits():
    backoff = adapter_backoff(0.0, 0.0)
    assert [backoff.next_delay() for _ in range(3)] == [0.0, 0.0, 0.0]


async def test_sleep_or_stop_wakes_when_stopped():
    stop = asyncio.Event()
    sleeper = asyncio.create_task(sleep_or_stop(60, stop))
    await asyncio.sleep(0)
    stop.set()
    assert await asyncio.wait_for(sleeper, 30) is True


async def test_sleep_or_stop_runs_out_unless_stopped():
    stop = asyncio.Event()
    assert await sleep_or_stop(0.01, stop) is False
    assert await sleep_or_stop(0, stop) is False
    stop.set()
    assert await sleep_or_stop(0, stop) is True


async def test_keyed_pacer_serves_one_key_in_order_and_spaces_its_sends():
    pacer = KeyedPacer(0.2)
    sent: list[tuple[str, int, float]] = []

    async def sender(key: str, n: int) -> None:
        async with pacer.slot(key):
            await pacer.wait_turn(key)
            pacer.mark(key)
            sent.append((key, n, pacer._last[key]))
            await asyncio.sleep(0)

    await asyncio.wait_for(
        asyncio.gather(*(sender(k, n) for n in range(3) for k in ("a", "b"))), 30)
    for key in ("a", "b"):
        mine = [(n, at) for k, n, at in sent if k == key]
        assert [n for n, _ in mine] == [0, 1, 2]  # arrival order
        # (an asyncio timer may fire a clock tick early; the spacing is what counts)
        assert all(later - earlier >= 0.2 - 1e-6
                   for (_, earlier), (_, later) in itertools.pairwise(mine))
    # Two keys do not wait for each other: b's first send came before a's second.
    order = [(k, n) for k, n, _ in sent]
    assert order.index(("b", 0)) < order.index(("a", 1))


async def test_keyed_pacer_forgets_idle_keys():
    pacer = KeyedPacer(0.0)
    for key in ("x", "y"):
        async with pacer.slot(key):
            await pacer.wait_turn(key)
            pacer.mark(key)
    assert pacer._locks == {}
    assert pacer._last == {}


async def test_sliding_window_lets_at_most_limit_through_per_window():
    window = SlidingWindow(2, 0.2)
    released: list[float] = []
    for _ in range(5):
        await asyncio.wait_for(window.acquire(), 30)
        released.append(window._times[-1])
    for i in range(len(released) - 2):
        assert released[i + 2] - released[i] >= 0.2


@pytest.mark.parametrize("limit", [1, 3])
async def test_sliding_window_does_not_wait_below_the_limit(limit: int):
    window = SlidingWindow(limit, 60)
    # A window of a minute would hang here if the first ``limit`` acquisitions waited.
    await asyncio.wait_for(asyncio.gather(*(window.acquire() for _ in range(limit))), 30)
    assert len(window._times) == limit
