"""lich._eager.start_eagerly: a task whose first step runs at once, as that task.

What the hook caller relies on: the first step runs before the call returns and
inside the new task (its current task, its own context), a coroutine that ends
there gives a done future with its outcome, one that waits goes on as an
ordinary task — cancellable at once, even before the loop ran it.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import logging
import sys
from collections.abc import Coroutine
from typing import Any

import pytest

from lich._eager import start_eagerly

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


async def test_a_coroutine_that_never_waits_is_done_when_the_call_returns() -> None:
    steps: list[str] = []

    async def answer() -> int:
        steps.append("ran")
        return 42

    fut = start_eagerly(answer())
    assert steps == ["ran"]  # before this task gave the loop a single round
    assert fut.done()
    assert fut.result() == 42


async def test_the_first_step_runs_as_the_new_task_not_the_caller() -> None:
    caller = asyncio.current_task()
    seen: list[asyncio.Task[object] | None] = []

    async def where() -> None:
        seen.append(asyncio.current_task())
        await asyncio.sleep(0)
        seen.append(asyncio.current_task())

    fut = start_eagerly(where())
    assert asyncio.current_task() is caller  # swapped back after the step
    await fut
    assert seen[0] is not caller
    assert seen[0] is not None
    assert seen[0] is seen[1] is fut  # the same task before and after its first wait


async def test_the_first_step_runs_in_the_tasks_own_context() -> None:
    VAR.set("caller")
    seen: list[str] = []

    async def sets() -> None:
        seen.append(VAR.get())
        VAR.set("hook")
        await asyncio.sleep(0)
        seen.append(VAR.get())

    await start_eagerly(sets())
    assert seen == ["caller", "hook"]
    assert VAR.get() == "caller"  # the task's change stays in the task


async def test_a_coroutine_ending_in_its_first_step_leaks_no_context_var() -> None:
    VAR.set("caller")

    async def sets() -> str:
        VAR.set("hook")
        return VAR.get()

    assert start_eagerly(sets()).result() == "hook"
    assert VAR.get() == "caller"


async def test_an_exception_in_the_first_step_is_the_futures_and_logged_nowhere(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def fails() -> None:
        raise ValueError("bad")

    fut = start_eagerly(fails())
    assert fut.done()
    with pytest.raises(ValueError, match="bad"):
        fut.result()
    del fut
    for _ in range(3):
        await asyncio.sleep(0)  # (3.11) the wrapper task's own step ends it
    gc.collect()
    assert "never retrieved" not in caplog.text


async def test_a_cancellation_raised_in_the_first_step_cancels_the_future() -> None:
    async def cancelled() -> None:
        raise asyncio.CancelledError

    fut = start_eagerly(cancelled())
    assert fut.cancelled()


async def test_an_asyncio_timeout_entered_in_the_first_step_cancels_only_the_new_task() -> None:
    async def bounded() -> str:
        try:
            async with asyncio.timeout(0.01):
                await asyncio.sleep(30)
        except TimeoutError:
            return "own timeout"
        return "no timeout"

    fut = start_eagerly(bounded())
    assert await asyncio.wait_for(fut, 10) == "own timeout"
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_an_anyio_cancel_scope_entered_in_the_first_step_binds_to_the_new_task() -> None:
    anyio = pytest.importorskip("anyio")

    async def scoped() -> str:
        with anyio.move_on_after(0.01) as scope:
            await anyio.sleep(30)
        return "moved on" if scope.cancelled_caught else "slept"

    assert await asyncio.wait_for(start_eagerly(scoped()), 10) == "moved on"
    await asyncio.sleep(0)  # still running: this task was never cancelled


async def test_a_task_group_opened_in_the_first_step_cancels_its_own_parent() -> None:
    # A failing child cancels the group's parent task: that must be the new task,
    # never the caller (which would be cancelled out of its own await here).
    async def child() -> None:
        raise RuntimeError("child failed")

    async def grouped() -> str:
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(child())
                await asyncio.sleep(30)
        except ExceptionGroup as failed:
            return f"group failed: {failed.exceptions[0]}"
        return "group ended"

    assert await asyncio.wait_for(start_eagerly(grouped()), 10) == "group failed: child failed"
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_cancelled_before_the_loop_ran_it_the_coroutine_gets_the_cancellation() -> None:
    # Cancelled in the same step that started it: on 3.11 the task has not taken its
    # own first step yet. The coroutine still gets CancelledError at its await, and
    # what it waited for (a child task) is cancelled with it, as for any task.
    seen: list[str] = []
    child = asyncio.ensure_future(asyncio.sleep(30))

    async def waits() -> None:
        try:
            await child
        except asyncio.CancelledError:
            seen.append("cancelled at its await")
            raise

    fut = start_eagerly(waits())
    assert not fut.done()
    fut.cancel()
    with pytest.raises(asyncio.CancelledError):
        await fut
    assert seen == ["cancelled at its await"]
    assert child.cancelled()


async def test_a_coroutine_that_swallows_the_early_cancellation_keeps_running() -> None:
    async def stubborn() -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(0)
            return "finished anyway"
        return "slept"

    fut = start_eagerly(stubborn())
    fut.cancel()
    assert await asyncio.wait_for(fut, 10) == "finished anyway"


async def test_the_task_is_an_ordinary_task_after_its_first_wait() -> None:
    release = asyncio.Event()
    steps: list[int] = []

    async def several() -> int:
        for i in range(3):
            steps.append(i)
            await release.wait()
            release.clear()
        return len(steps)

    fut = start_eagerly(several())
    assert steps == [0]
    for _ in range(3):
        release.set()
        await asyncio.sleep(0.001)
    assert await asyncio.wait_for(fut, 10) == 3
    assert isinstance(fut, asyncio.Task)


async def test_nested_eager_starts_restore_each_callers_task() -> None:
    outer_tasks: list[object] = []

    async def inner() -> object:
        return asyncio.current_task()

    async def outer() -> object:
        me = asyncio.current_task()
        inner_task = start_eagerly(inner()).result()
        outer_tasks.append(asyncio.current_task() is me)
        return inner_task

    caller = asyncio.current_task()
    inner_task = start_eagerly(outer()).result()
    assert outer_tasks == [True]
    assert inner_task not in (caller, None)
    assert asyncio.current_task() is caller


def test_keyboard_interrupt_in_the_first_step_reaches_the_caller_with_its_task_restored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def interrupts() -> None:
        raise KeyboardInterrupt

    async def main() -> bool:
        me = asyncio.current_task()
        try:
            start_eagerly(interrupts())
        except KeyboardInterrupt:
            return asyncio.current_task() is me
        return False

    with caplog.at_level(logging.ERROR):
        assert asyncio.run(main()) is True


async def _started_plainly(coro: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
    task = asyncio.ensure_future(coro)
    await asyncio.sleep(0)  # its first step: it now waits at its first await
    return task


@pytest.mark.parametrize("start", ["eagerly", "plainly"])
@pytest.mark.parametrize("child_ends", ["cancelled", "failing in its clean-up"])
async def test_cancelled_before_its_first_step_it_waits_for_its_child_as_a_running_task_does(
    start: str, child_ends: str, caplog: pytest.LogCaptureFixture,
) -> None:
    # A running task cancelled while it awaits a child task cancels the child and
    # waits for it to end: the child's clean-up comes first, and what the child ends
    # with (its cancellation, or an error its clean-up raised) is what the await gives
    # the parent. Cancelled before its own first step, the eager task must behave the
    # same ("plainly" is the reference: an ordinary task cancelled at the same await).
    order: list[str] = []

    async def child_body() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(0)  # a clean-up that waits
            order.append("child cleaned up")
            if child_ends == "failing in its clean-up":
                raise ValueError("clean-up failed") from None
            raise

    child = [asyncio.ensure_future(child_body())]  # (a list: dropped at the end)
    await asyncio.sleep(0)  # the child waits in its sleep

    async def parent() -> None:
        try:
            await child[0]
        except BaseException as exc:
            order.append(f"parent got {type(exc).__name__}")
            raise

    fut = start_eagerly(parent()) if start == "eagerly" else await _started_plainly(parent())
    fut.cancel()
    expected = (asyncio.CancelledError if child_ends == "cancelled" else ValueError)
    with pytest.raises(expected):
        await asyncio.wait_for(fut, 10)
    assert order == ["child cleaned up", f"parent got {expected.__name__}"]
    del fut
    child.clear()
    gc.collect()
    assert "never retrieved" not in caplog.text


async def test_a_loop_whose_task_factory_wraps_coroutines_still_runs_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A task factory may run each coroutine inside one of its own (tracing, metrics):
    # the coroutine must reach it as a coroutine, not as a half-run one only a task
    # can drive. Such a loop gets an ordinary task from its factory.
    wrapped: list[str] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any],
                **kwargs: Any) -> asyncio.Task[Any]:
        async def traced() -> Any:
            wrapped.append("traced")
            return await coro

        return asyncio.Task(traced(), loop=loop, **kwargs)

    async def at_once() -> str:
        return "at once"

    async def after_a_wait() -> str:
        await asyncio.sleep(0)
        return "after a wait"

    loop = asyncio.get_running_loop()
    loop.set_task_factory(factory)  # type: ignore[arg-type]  # (typeshed: no **kwargs)
    try:
        answers = [await asyncio.wait_for(start_eagerly(make()), 10)
                   for make in (at_once, after_a_wait)]
    finally:
        loop.set_task_factory(None)
    assert answers == ["at once", "after a wait"]
    assert wrapped == ["traced", "traced"]
    gc.collect()
    assert "never retrieved" not in caplog.text


async def test_the_started_coroutine_refuses_to_be_copied_as_a_coroutine_does() -> None:
    # What the task drives on 3.11 is a wrapper that describes the real coroutine
    # (its frame, state and name). Copying or pickling it must fail as for the
    # coroutine itself (a TypeError), not recurse through that delegation.
    import copy
    import inspect
    import pickle

    async def waits() -> None:
        await asyncio.sleep(0)

    fut = start_eagerly(waits())
    assert isinstance(fut, asyncio.Task)
    coro = fut.get_coro()
    assert inspect.getcoroutinestate(coro) == inspect.CORO_SUSPENDED  # type: ignore[arg-type]
    for attempt in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(TypeError):
            attempt(coro)
    await fut


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12+ uses the standard eager start")
async def test_without_the_task_swap_functions_tasks_start_the_ordinary_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The 3.11 path relies on asyncio.tasks._enter_task/_leave_task; were a release to
    # drop them, start_eagerly must still run every coroutine, just not eagerly.
    import lich._eager as eager

    monkeypatch.setattr(eager, "_SWAPS_TASKS", False)
    ran: list[str] = []

    async def quick() -> str:
        ran.append("quick")
        return "done"

    future = start_eagerly(quick())
    assert not future.done()  # not started in the call: an ordinary task
    assert ran == []
    assert await future == "done"
    assert ran == ["quick"]
