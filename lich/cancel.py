"""Cancellation that any thread (or a signal handler) can trigger and asyncio can await.

A :class:`CancelToken` is handed to :meth:`lich.Agent.run`; the loop checks it
between steps and races every model call and tool against it, so a cancel
lands wherever the run is. Tools running in a worker thread can poll
:attr:`CancelToken.cancelled`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["CancelToken", "Cancelled", "OnCancel", "race"]

T = TypeVar("T")


class Cancelled(Exception):
    """Raised by :func:`race` when the token fired before the awaitable finished."""


class CancelToken:
    """A one-way switch: once :meth:`cancel` is called it stays cancelled."""

    __slots__ = ("_callbacks", "_flag", "_lock", "_waiters")

    def __init__(self) -> None:
        self._flag = threading.Event()
        # Reentrant: a signal handler calling cancel() runs in the main thread, possibly
        # while that thread is inside wait() holding this lock.
        self._lock = threading.RLock()
        self._waiters: set[asyncio.Future[None]] = set()
        self._callbacks: set[OnCancel] = set()

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called."""
        return self._flag.is_set()

    def cancel(self) -> None:
        """Cancel; safe from any thread and from signal handlers, idempotent."""
        with self._lock:
            if self._flag.is_set():
                return
            self._flag.set()
            waiters, self._waiters = self._waiters, set()
            callbacks, self._callbacks = self._callbacks, set()
        for registration in callbacks:
            registration._schedule()
        for fut in waiters:
            loop = fut.get_loop()
            if loop.is_closed():
                continue
            try:
                loop.call_soon_threadsafe(_resolve, fut)
            except RuntimeError:
                pass  # the loop closed meanwhile; nobody is waiting any more

    def on_cancel(
        self, callback: Callable[[], None], loop: asyncio.AbstractEventLoop | None = None
    ) -> OnCancel:
        """Call ``callback()`` on ``loop`` (the running one by default) once the token
        is cancelled — soon, if it already is — unless :meth:`OnCancel.remove` came
        first. It runs from the loop, never inside :meth:`cancel` (which may be called
        from another thread or a signal handler).

        What :func:`lich.loop.unless_cancelled` waits with: a registration and its
        removal instead of a task waiting in :meth:`wait` per awaited call.
        """
        registration = OnCancel(self, callback, loop or asyncio.get_running_loop())
        with self._lock:
            if not self._flag.is_set():
                self._callbacks.add(registration)
        # Checked again after registering, as in wait(): a cancel() that ran in between
        # (a signal handler can interrupt anywhere, and the lock is reentrant) swapped
        # the set out before the add. Scheduled twice, the callback still runs once.
        if self._flag.is_set():
            registration._schedule()
        return registration

    async def wait(self) -> None:
        """Return once the token is cancelled."""
        if self._flag.is_set():
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._waiters.add(fut)
        try:
            # Checked after registering: a cancel() that swapped the waiters out just
            # before our add (a signal handler can interrupt anywhere) is not missed.
            if not self._flag.is_set():
                await fut
        finally:
            with self._lock:
                self._waiters.discard(fut)


class OnCancel:
    """A callback registered with :meth:`CancelToken.on_cancel`."""

    __slots__ = ("_callback", "_loop", "_removed", "_token")

    def __init__(self, token: CancelToken, callback: Callable[[], None],
                 loop: asyncio.AbstractEventLoop) -> None:
        self._token = token
        self._callback = callback
        self._loop = loop
        self._removed = False

    def remove(self) -> None:
        """Never call the callback from now on (also when the token fired already and
        the call is on its way to the loop); idempotent. Call it from the loop."""
        self._removed = True
        with self._token._lock:
            self._token._callbacks.discard(self)

    def _schedule(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._loop.call_soon_threadsafe(self._fire)
        except RuntimeError:
            pass  # the loop closed meanwhile; nobody is waiting any more

    def _fire(self) -> None:
        if not self._removed:
            self._removed = True
            self._callback()


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def race(awaitable: Awaitable[T], token: CancelToken | None) -> T:
    """Await ``awaitable`` unless ``token`` fires first.

    When the token fires, the awaitable's task is cancelled and awaited (so a
    tool can clean up, e.g. kill its process group) and :class:`Cancelled` is
    raised. Without a token this is a plain ``await``.
    """
    if token is None:
        return await awaitable
    if token.cancelled:
        if asyncio.iscoroutine(awaitable):
            awaitable.close()
        raise Cancelled
    task: asyncio.Future[T] = asyncio.ensure_future(awaitable)
    waiter = asyncio.ensure_future(token.wait())
    try:
        await asyncio.wait((task, waiter), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        # Our own task is being cancelled (e.g. Ctrl-C through asyncio.run):
        # take the inner work down with us.
        task.cancel()
        waiter.cancel()
        await asyncio.gather(task, waiter, return_exceptions=True)
        raise
    if task.done():
        waiter.cancel()
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    raise Cancelled
