"""Start a coroutine as a task whose first step runs at once, inside that task.

The hook caller (:mod:`lich.plugins.calling`) runs every ``async def`` hook as a
task of its own, so that its deadline holds whatever the hook does. Most hooks
answer without ever waiting (a budget check, a rule match); scheduling a task and
waiting for the loop to run it costs them several event-loop rounds each.
:func:`start_eagerly` runs the first step of the coroutine immediately — as
Python 3.12's eager tasks do — and hands back a done future when that step
finished, so such a hook costs no loop round at all.

The first step runs *as the new task*: :func:`asyncio.current_task` is the new
task while it runs, and the step runs in the task's own copy of the context. So
an :func:`asyncio.timeout`, an anyio cancel scope or a task group the coroutine
enters before its first wait binds to its own task, exactly as if the task had
been started by the loop (running the step in the *caller's* task instead was
tried and broke them: docs/performance.md).

Python 3.12 and later: ``asyncio.Task(..., eager_start=True)``, the standard
library's own eager start. Python 3.11 has none, so it is built from the same
parts 3.12 uses: the task is created (its first step is scheduled, as every
3.11 task's is), the caller's task is swapped out for it with
``asyncio.tasks._leave_task`` / ``_enter_task`` (what 3.12's eager start does
with ``swap_current_task``), the coroutine's first step runs, and the caller is
swapped back. The task drives a :class:`_Resumed` wrapper that hands the task
what the first step yielded (the future the coroutine waits for) on the task's
own first step, and after that passes every ``send`` / ``throw`` through, so
from then on the task runs the coroutine as any task does. A task cancelled
before its own first step cancels the awaited future and waits for it, as a
running task's cancellation does: an awaited child task ends first, and the
coroutine's await gives what it ended with.

A loop with a task factory gets its task from the factory on either version,
started the ordinary way: a factory may run the coroutine inside one of its own,
and a coroutine whose first step already ran is no longer one it can await.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

__all__ = ["start_eagerly"]

T = TypeVar("T")

_NOT_STARTED = 0  # the task has not taken its own first step yet
_RUNNING = 1  # send / throw go through to the coroutine
_FINISHED = 2  # the coroutine ended in the first step: the task just ends


class _Resumed(Coroutine[Any, Any, Any]):
    """What a 3.11 task drives when the coroutine's first step already ran."""

    __slots__ = ("_coro", "_first", "_loop", "_state", "_task")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro
        self._first: Any = None
        self._state = _NOT_STARTED
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None

    def send(self, value: Any) -> Any:
        if self._state == _RUNNING:
            return self._coro.send(value)
        if self._state == _FINISHED:
            raise StopIteration
        # The task's own first step: it receives what the coroutine yielded (the
        # future it waits for, or None for a bare yield) and waits on it as usual.
        self._state = _RUNNING
        first, self._first = self._first, None
        return first

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        if self._state == _FINISHED:
            raise StopIteration
        if self._state == _NOT_STARTED:
            # Cancelled before the task's first step. A running task would cancel the
            # future it waits for and go on waiting for it: an awaited child task ends
            # first (its clean-up may wait too), and the await then gives what the
            # child ended with. Do the same by handing the task that future, as the
            # first step would have. A future that could not be cancelled (done, or
            # not one the task could wait for: another loop's, the task itself) gets
            # the exception at the coroutine's await, as a running task's pending
            # cancellation does.
            self._state = _RUNNING
            first, self._first = self._first, None
            if (isinstance(typ, asyncio.CancelledError) and isinstance(first, asyncio.Future)
                    and first is not self._task and first.get_loop() is self._loop
                    and first.cancel(msg=typ.args[0] if typ.args and typ.args[0] else None)):
                return first
        if val is None and tb is None:
            return self._coro.throw(typ)
        return self._coro.throw(typ, val, tb)  # pragma: no cover (asyncio passes one)

    def close(self) -> None:
        self._state = _FINISHED
        self._coro.close()

    def __await__(self) -> Generator[Any, None, Any]:
        raise TypeError("a started hook coroutine is driven by its task only")

    def __getattr__(self, name: str) -> Any:
        # cr_frame, cr_running, cr_suspended, __qualname__, ...: inspect.getcoroutinestate
        # (anyio asks it about a task's coroutine before cancelling the task) and task
        # names describe the real coroutine. Its own slots are never delegated: unset
        # (an instance made without __init__), they would recurse here for ever.
        if name in _Resumed.__slots__:
            raise AttributeError(name)
        return getattr(self._coro, name)

    def __reduce__(self) -> Any:
        # Copied or pickled, a coroutine raises TypeError; so does what stands for one.
        raise TypeError(f"cannot pickle {type(self).__name__!r} object")

    def first_step(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any],
                   context: contextvars.Context) -> asyncio.Future[Any] | None:
        """Run the coroutine's first step as ``task``; a done future with its outcome
        if it ended there, else ``None`` (the task goes on from where it stopped)."""
        self._loop, self._task = loop, task
        caller = asyncio.current_task(loop)
        if caller is not None:
            asyncio.tasks._leave_task(loop, caller)
        asyncio.tasks._enter_task(loop, task)
        outcome: asyncio.Future[Any] | None = None
        try:
            self._first = context.run(self._coro.send, None)
        except StopIteration as stop:
            self._state = _FINISHED
            outcome = loop.create_future()
            outcome.set_result(stop.value)
        except asyncio.CancelledError:
            self._state = _FINISHED
            outcome = loop.create_future()
            outcome.cancel()
        except (KeyboardInterrupt, SystemExit):
            self._state = _FINISHED
            raise
        except BaseException as exc:
            self._state = _FINISHED
            outcome = loop.create_future()
            outcome.set_exception(exc)
        finally:
            asyncio.tasks._leave_task(loop, task)
            if caller is not None:
                asyncio.tasks._enter_task(loop, caller)
        return outcome


if sys.version_info >= (3, 12):

    def start_eagerly(coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        """A task running ``coro``, its first step already taken; done if that step
        finished it. A loop with a task factory gets a task from it (not eager)."""
        loop = asyncio.get_running_loop()
        if loop.get_task_factory() is not None:
            return loop.create_task(coro)
        return asyncio.Task(coro, loop=loop, eager_start=True)

else:
    # The two private functions this relies on are those of every 3.11 release (a
    # release line that only takes security fixes now); should one be missing, tasks
    # start the ordinary way: a loop round slower per hook, nothing else changes.
    _SWAPS_TASKS = all(hasattr(asyncio.tasks, name) for name in ("_enter_task", "_leave_task"))

    def start_eagerly(coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        """A task running ``coro``, its first step already taken as that task; a done
        future with the outcome instead if that step finished it. A loop with a task
        factory gets a task from it (not eager), as on 3.12."""
        loop = asyncio.get_running_loop()
        if not _SWAPS_TASKS or loop.get_task_factory() is not None:
            # The factory may run the coroutine inside one of its own (tracing): it
            # must get the coroutine itself, which a half-run one no longer is.
            return loop.create_task(coro)
        context = contextvars.copy_context()
        resumed = _Resumed(coro)
        # The Task class itself, not loop.create_task: the shorter path is a good part
        # of what this saves per hook call.
        task: asyncio.Task[T] = asyncio.Task(resumed, loop=loop, context=context)
        outcome = resumed.first_step(loop, task, context)
        return task if outcome is None else outcome
