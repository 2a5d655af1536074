"""Cancel tokens and ``race``: a cancel lands wherever the awaiting code is."""

from __future__ import annotations

import asyncio
import threading

import pytest

from lich.cancel import Cancelled, CancelToken, race
from lich.testing import async_wait_for

HANG_S = 60


def test_a_token_is_a_one_way_switch() -> None:
    token = CancelToken()
    assert not token.cancelled
    token.cancel()
    token.cancel()
    assert token.cancelled


async def test_wait_returns_when_another_thread_cancels() -> None:
    token = CancelToken()
    waiter = asyncio.create_task(token.wait())
    await asyncio.sleep(0)
    threading.Thread(target=token.cancel).start()
    await asyncio.wait_for(waiter, 10)
    await asyncio.wait_for(token.wait(), 30)  # already cancelled: returns at once


async def test_on_cancel_calls_back_on_the_loop_when_another_thread_cancels() -> None:
    token = CancelToken()
    loop_thread = threading.get_ident()
    called: list[int] = []
    token.on_cancel(lambda: called.append(threading.get_ident()))
    worker = threading.Thread(target=token.cancel)
    worker.start()
    worker.join(10)
    await async_wait_for(lambda: called == [loop_thread], timeout=10)
    await asyncio.sleep(0.01)
    assert called == [loop_thread]  # once


async def test_on_cancel_on_a_cancelled_token_calls_back_soon_not_at_once() -> None:
    token = CancelToken()
    token.cancel()
    called: list[str] = []
    token.on_cancel(lambda: called.append("called"))
    assert called == []  # never from inside on_cancel itself
    await async_wait_for(lambda: called == ["called"], timeout=10)


async def test_a_removed_callback_is_never_called_even_once_cancel_scheduled_it() -> None:
    token = CancelToken()
    called: list[str] = []
    before = token.on_cancel(lambda: called.append("before"))
    before.remove()
    late = token.on_cancel(lambda: called.append("late"))
    token.on_cancel(lambda: called.append("kept"))
    token.cancel()  # both calls are now on their way to the loop
    late.remove()
    late.remove()
    await async_wait_for(lambda: called == ["kept"], timeout=10)
    await asyncio.sleep(0.01)
    assert called == ["kept"]
    assert not token._callbacks  # nothing kept once fired or removed


def test_cancel_from_a_signal_handler_interrupting_the_lock_holder() -> None:
    # A Python signal handler runs in the main thread, possibly while that thread holds
    # the token's lock; the lock must be reentrant or this deadlocks.
    token = CancelToken()
    done = threading.Event()

    def interrupted() -> None:
        with token._lock:
            token.cancel()
        done.set()

    worker = threading.Thread(target=interrupted, daemon=True)
    worker.start()
    assert done.wait(10), "cancel() deadlocked on its own lock"
    assert token.cancelled


async def test_race_returns_the_result_when_not_cancelled() -> None:
    async def work() -> str:
        await asyncio.sleep(0)
        return "result"

    assert await race(work(), CancelToken()) == "result"
    assert await race(work(), None) == "result"


async def test_race_cancels_the_work_when_the_token_fires() -> None:
    token = CancelToken()
    started = asyncio.Event()
    cleaned_up = asyncio.Event()

    async def work() -> str:
        started.set()
        try:
            await asyncio.sleep(HANG_S)
        finally:
            cleaned_up.set()
        return "never"

    async def cancel_soon() -> None:
        await started.wait()
        token.cancel()

    canceller = asyncio.create_task(cancel_soon())
    with pytest.raises(Cancelled):
        await asyncio.wait_for(race(work(), token), 10)
    await canceller
    assert cleaned_up.is_set()


async def test_race_with_a_cancelled_token_never_starts_the_work() -> None:
    token = CancelToken()
    token.cancel()
    started = []

    async def work() -> None:
        started.append(1)

    with pytest.raises(Cancelled):
        await race(work(), token)
    assert started == []


async def test_cancelling_the_awaiting_task_takes_the_work_down_too() -> None:
    started = asyncio.Event()
    inner_cancelled = asyncio.Event()

    async def work() -> None:
        started.set()
        try:
            await asyncio.sleep(HANG_S)
        except asyncio.CancelledError:
            inner_cancelled.set()
            raise

    outer = asyncio.create_task(race(work(), CancelToken()))
    await asyncio.wait_for(started.wait(), 10)
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(outer, 10)
    assert inner_cancelled.is_set()


async def test_exceptions_of_the_work_pass_through() -> None:
    async def work() -> None:
        raise KeyError("inner")

    with pytest.raises(KeyError):
        await race(work(), CancelToken())


async def test_on_cancel_is_not_missed_when_cancel_interrupts_the_registration() -> None:
    # A Python signal handler runs between any two bytecodes of the main thread, and
    # the token's lock is reentrant: cancel() may run inside on_cancel(), after it saw
    # the token not cancelled and before its callback is in the set cancel() swaps
    # out. Made to happen exactly there: the set's add() cancels first, as such a
    # handler would.
    token = CancelToken()

    class InterruptedSet(set[object]):
        def add(self, item: object) -> None:
            token.cancel()  # the "signal handler": it swaps this set out and fires it
            super().add(item)

    token._callbacks = InterruptedSet()  # type: ignore[assignment]
    called: list[str] = []
    token.on_cancel(lambda: called.append("called"))
    await async_wait_for(lambda: called == ["called"], timeout=10)
    await asyncio.sleep(0.01)
    assert called == ["called"]  # once
