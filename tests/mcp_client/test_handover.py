"""The hand-over of a call from the caller's event loop to the runtime's loop and
back (``McpRuntime._hand_over``), without a server: results, exceptions, the
caller's context, cancellation both ways, a runtime closed meanwhile."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from lich.mcp.client import McpRuntime
from lich.mcp.config import parse_mcp_settings
from lich.testing import async_wait_for

caller_var: contextvars.ContextVar[str] = contextvars.ContextVar("caller_var", default="unset")


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[McpRuntime]:
    rt = McpRuntime(parse_mcp_settings({"servers": {}}), work_dir=tmp_path, log_dir=tmp_path)
    yield rt
    rt.close()


async def test_the_result_comes_back_from_the_runtimes_thread_in_the_callers_context(
    runtime: McpRuntime,
) -> None:
    async def where() -> tuple[str, str]:
        seen = caller_var.get()
        caller_var.set("changed on the runtime's loop")  # a copy: the caller keeps its own
        return threading.current_thread().name, seen

    caller_var.set("the caller's")
    assert await runtime._hand_over(where(), lambda: ("closed", "")) == ("lich-mcp", "the caller's")
    assert caller_var.get() == "the caller's"


async def test_an_exception_reaches_the_caller(runtime: McpRuntime) -> None:
    async def fails() -> None:
        raise LookupError("no such thing")

    with pytest.raises(LookupError, match="no such thing"):
        await runtime._hand_over(fails(), lambda: None)


async def test_callers_from_several_loops_at_once(runtime: McpRuntime) -> None:
    async def echo(value: int) -> int:
        await asyncio.sleep(0)
        return value

    def other_thread(out: list[int]) -> None:
        async def calls() -> None:
            out.extend(await asyncio.gather(*(runtime._hand_over(echo(i), lambda: -1)
                                               for i in range(20))))
        asyncio.run(calls())

    theirs: list[int] = []
    worker = threading.Thread(target=other_thread, args=(theirs,))
    worker.start()
    ours = await asyncio.gather(*(runtime._hand_over(echo(i), lambda: -1) for i in range(20)))
    await asyncio.to_thread(worker.join, 30)
    assert ours == list(range(20))
    assert theirs == list(range(20))


async def test_cancelling_the_caller_cancels_the_runtimes_task(runtime: McpRuntime) -> None:
    running, cancelled = threading.Event(), threading.Event()

    async def waits() -> str:
        running.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "slept"

    task = asyncio.ensure_future(runtime._hand_over(waits(), lambda: "closed"))
    await async_wait_for(running.is_set, what="the runtime's task to run")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await async_wait_for(cancelled.is_set, what="the runtime's task to be cancelled")


async def test_a_task_cancelled_on_the_runtimes_side_cancels_the_caller(
    runtime: McpRuntime,
) -> None:
    async def gives_up() -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await runtime._hand_over(gives_up(), lambda: None)


async def test_a_closed_runtime_answers_closed_and_runs_nothing(runtime: McpRuntime) -> None:
    async def starts() -> str:
        await asyncio.sleep(0)  # so that the runtime's thread is running before close()
        return "ran"

    assert await runtime._hand_over(starts(), lambda: "closed") == "ran"
    runtime.close()

    async def never() -> str:
        raise AssertionError("ran on a closed runtime")

    coro = never()
    assert await runtime._hand_over(coro, lambda: "closed") == "closed"
    assert coro.cr_frame is None  # closed, not left to warn that it was never awaited
