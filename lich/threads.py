"""Plain functions of plugins (sync tools, sync run-time hooks) run off the event loop
in daemon threads.

Not ``asyncio.to_thread``: its pool's threads are joined when the event loop shuts
down and again when the interpreter exits, so one plugin function that never
returns (a tool blocked on a socket, a hook in ``time.sleep``) would keep lich from
exiting long after the call itself timed out and the run moved on. A daemon thread
is abandoned at exit instead. The function runs in a copy of the caller's context,
as with ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["run_in_daemon_thread"]

T = TypeVar("T")


def _plugin_error(exc: BaseException) -> BaseException:
    """What the awaiting task gets for ``exc`` raised by a plugin function in a worker.

    ``StopIteration``: a Future refuses it (a TypeError inside ``_settle``), which
    would leave the caller waiting until its timeout; converted as PEP 479 does.
    ``SystemExit`` / ``KeyboardInterrupt`` (or any other non-``Exception``): a signal
    reaches only the main thread, so here it is the plugin's own code (``sys.exit``
    from argparse or a wrapped CLI ``main``). Handed on as they are, they would end
    lich itself instead of failing one tool call or hook.
    """
    if isinstance(exc, Exception) and not isinstance(exc, StopIteration):
        return exc
    wrapped = RuntimeError(f"{type(exc).__name__}({exc}) raised in a plugin function")
    wrapped.__cause__ = exc
    return wrapped


def _settle(fut: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    if fut.done():  # the caller gave up (timeout, cancel): nobody wants the answer
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


async def run_in_daemon_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` in a new daemon thread; awaits its result.

    Cancelling the await (a timeout) does not stop the thread — nothing can — but
    the thread no longer holds up the event loop's shutdown or the process exit.
    """
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)

    def work() -> Callable[[], None]:
        result: Any = None
        error: BaseException | None = None
        try:
            result = call()
        except BaseException as exc:  # handed to the awaiting task, as to_thread does
            error = _plugin_error(exc)

        def answer() -> None:
            try:
                loop.call_soon_threadsafe(_settle, fut, result, error)
            except RuntimeError:
                pass  # the loop is closed: the caller is long gone

        return answer

    name = f"lich-{getattr(fn, '__name__', 'plugin-call')}"
    _submit(work, name)
    return await fut


# Idle daemon threads are reused: starting a thread per call (and waiting for it to
# start) cost more than the rest of a tool turn (B1 in docs/performance.md). A worker
# goes back on the idle list only after its call returned, so a call that never returns
# keeps its thread, exactly as before; nothing is ever joined. It does so before it
# hands the answer to the caller: the caller's next call then always finds it idle,
# however late the scheduler lets it run on (else a loaded machine starts a thread per
# call, the cost this pool is there to avoid).
_MAX_IDLE = 16
_Work = Callable[[], Callable[[], None]]
_idle: list[queue.SimpleQueue[tuple[_Work, str]]] = []
_idle_lock = threading.Lock()


def _submit(work: _Work, name: str) -> None:
    with _idle_lock:
        jobs = _idle.pop() if _idle else None
    if jobs is None:
        jobs = queue.SimpleQueue()
        threading.Thread(target=_serve, args=(jobs,), name=name, daemon=True).start()
    jobs.put((work, name))


def _serve(jobs: queue.SimpleQueue[tuple[_Work, str]]) -> None:
    while True:
        work, name = jobs.get()
        threading.current_thread().name = name  # as if started for this call
        answer = work()  # never raises: errors go to the awaiting task
        with _idle_lock:
            stay = len(_idle) < _MAX_IDLE
            if stay:
                _idle.append(jobs)
        answer()
        if not stay:
            return


def _forget_idle_workers() -> None:
    # A forked child has none of its parent's threads: their queues would swallow work.
    global _idle_lock
    _idle.clear()
    _idle_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_idle_workers)
