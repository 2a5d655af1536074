"""Timing helpers for the adapters: their backoff, per-chat send pacing, rate windows."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import AsyncIterator

from lich.backoff import Backoff

__all__ = ["KeyedPacer", "SlidingWindow", "adapter_backoff", "sleep_or_stop"]


def adapter_backoff(min_s: float, max_s: float) -> Backoff:
    """The adapters' reconnect and send backoff: ``min_s`` doubling to ``max_s``,
    with equal jitter (each wait in the upper half of its step).

    Many bots, or one bot's many sends, dropped by the same outage should not
    all come back at the same instant; the lower bound of half the step keeps
    a flapping connection from being retried hot.
    """
    return Backoff(min_s, max_s, jitter="equal")


async def sleep_or_stop(delay_s: float, stop: asyncio.Event) -> bool:
    """Sleep ``delay_s`` unless ``stop`` is set first; returns whether it was set."""
    if delay_s <= 0:
        await asyncio.sleep(0)
        return stop.is_set()
    try:
        async with asyncio.timeout(delay_s):
            await stop.wait()
    except TimeoutError:
        return False
    return True


class KeyedPacer:
    """One sender at a time per key (a chat), at least ``interval_s`` apart.

    Waiters are served in arrival order, so replies to one chat go out in
    the order they were produced.
    """

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._locks: dict[str, asyncio.Lock] = {}
        self._last: dict[str, float] = {}
        self._users: collections.Counter[str] = collections.Counter()

    @contextlib.asynccontextmanager
    async def slot(self, key: str) -> AsyncIterator[None]:
        """Hold ``key``'s send slot; waits for the previous sender and the interval."""
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._users[key] += 1
        try:
            async with lock:
                yield
        finally:
            self._users[key] -= 1
            if self._users[key] <= 0:
                # Forget idle chats so a busy bot does not keep one lock per chat ever seen.
                del self._users[key]
                self._locks.pop(key, None)
                if time.monotonic() - self._last.get(key, 0.0) >= self.interval_s:
                    self._last.pop(key, None)

    async def wait_turn(self, key: str) -> None:
        """Inside :meth:`slot`: wait until ``interval_s`` has passed since the last send."""
        last = self._last.get(key)
        if last is not None:
            delay = last + self.interval_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)

    def mark(self, key: str) -> None:
        """Inside :meth:`slot`: a message was just sent."""
        self._last[key] = time.monotonic()


class SlidingWindow:
    """At most ``limit`` events in any ``window_s`` seconds (Twitch's chat limit)."""

    def __init__(self, limit: int, window_s: float) -> None:
        self.limit = limit
        self.window_s = window_s
        self._times: collections.deque[float] = collections.deque()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        """Wait until one more event fits in the window, and count it."""
        async with self._lock:
            while True:
                now = time.monotonic()
                while self._times and now - self._times[0] >= self.window_s:
                    self._times.popleft()
                if len(self._times) < self.limit:
                    self._times.append(now)
                    return
                await asyncio.sleep(self._times[0] + self.window_s - now)
