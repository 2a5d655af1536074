"""lich.threads: plain plugin functions in reused daemon threads, under failure and cancel.

(Reuse, context and fork are covered in tests/bench/test_perf_fixes.py.)
"""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from lich import threads as _threads
from lich.agent import Agent
from lich.hooks import hookimpl
from lich.testing import Reply, ScriptedChat, async_wait_for, make_test_config
from lich.threads import run_in_daemon_thread
from lich.tools import Tool, ToolExecutor, ToolRegistry
from lich.types import ToolCall, ToolMessage


async def test_stop_iteration_reaches_the_caller_instead_of_hanging_it() -> None:
    # A Future refuses StopIteration; unconverted, the caller waited for its timeout.
    def exhausted() -> int:
        return next(iter([]))

    with pytest.raises(RuntimeError, match="StopIteration") as info:
        await asyncio.wait_for(run_in_daemon_thread(exhausted), 10)
    assert isinstance(info.value.__cause__, StopIteration)


async def test_a_sync_tool_raising_stop_iteration_is_a_failed_result(tmp_path: Path) -> None:
    def execute(args: dict[str, Any], ctx: Any) -> Any:
        return next(iter([]))

    registry = ToolRegistry()
    registry.register(Tool("empty", "d", {"type": "object"}, execute, timeout_s=60))
    executor = ToolExecutor(registry, work_dir=tmp_path)
    result = await asyncio.wait_for(executor.execute(ToolCall("c1", "empty", {})), 10)
    assert not result.ok
    assert result.error is not None
    assert "StopIteration" in result.error


async def test_a_cancelled_caller_leaves_the_worker_to_finish_and_serve_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A pool of its own: with the process-wide one already holding its maximum of idle
    # workers (earlier tests leave some), the worker would retire instead of rejoining.
    monkeypatch.setattr(_threads, "_idle", [])
    started, release, finished = threading.Event(), threading.Event(), threading.Event()
    ident: list[int] = []

    def slow() -> str:
        ident.append(threading.get_ident())
        started.set()
        release.wait(10)
        finished.set()
        return "late answer"  # nobody wants it any more: must not error or warn

    task = asyncio.ensure_future(run_in_daemon_thread(slow))
    assert await asyncio.to_thread(started.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    assert await asyncio.to_thread(finished.wait, 10)

    # The worker goes back to the idle list (once its late, no-op _settle is done) and
    # answers the next call. Wait for it to be back before calling: a call made earlier
    # starts a second worker, which then sits on top of the (LIFO) idle list and would
    # answer every later poll — the flake seen on a loaded machine.
    await async_wait_for(lambda: len(_threads._idle) == 1,
                         what="the worker back on its (own, empty) idle list")
    answer = await asyncio.wait_for(run_in_daemon_thread(threading.get_ident), 10)
    assert answer == ident[0]


async def test_a_timed_out_call_raising_later_is_not_an_unretrieved_error() -> None:
    release = threading.Event()

    def fails_late() -> None:
        release.wait(10)
        raise ValueError("too late")

    with pytest.raises(TimeoutError):
        await asyncio.wait_for(run_in_daemon_thread(fails_late), 0.05)
    release.set()
    # filterwarnings=error and the loop's exception handler would turn a stray
    # "exception never retrieved" or a failing callback into a failure of this test.
    assert await asyncio.wait_for(run_in_daemon_thread(lambda: "ok"), 10) == "ok"


def _exits(args: dict[str, Any], ctx: Any) -> Any:
    sys.exit(2)  # what argparse does on bad input, or a wrapped CLI's main()


async def test_a_sync_tool_calling_sys_exit_fails_its_call_not_lich(tmp_path: Path) -> None:
    registry = ToolRegistry()
    registry.register(Tool("exits", "d", {"type": "object"}, _exits))
    executor = ToolExecutor(registry, work_dir=tmp_path)
    result = await asyncio.wait_for(executor.execute(ToolCall("c1", "exits", {})), 10)
    assert not result.ok
    assert result.error is not None
    assert "SystemExit(2)" in result.error


async def test_a_plain_function_raising_keyboard_interrupt_is_a_plugin_error() -> None:
    def interrupts() -> None:
        raise KeyboardInterrupt

    with pytest.raises(RuntimeError, match="KeyboardInterrupt") as info:
        await asyncio.wait_for(run_in_daemon_thread(interrupts), 10)
    assert isinstance(info.value.__cause__, KeyboardInterrupt)


class _ExitingHook:
    @hookimpl
    def lich_before_tool_call(self, call: ToolCall) -> None:
        sys.exit(3)


class _Tools:
    @hookimpl
    def lich_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(Tool("exits", "d", {"type": "object"}, _exits))


async def test_a_sync_before_hook_calling_sys_exit_blocks_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    chat = ScriptedChat([Reply(tool_calls=[ToolCall("c1", "exits", {})]), Reply("done")])
    agent = Agent(make_test_config(tmp_path),
                  plugins=[("tools", _Tools()), ("exiter", _ExitingHook())], chat=chat)
    result = await asyncio.wait_for(agent.run("go"), 30)
    assert result.stopped_reason == "final"
    (message,) = [m for m in result.messages if isinstance(m, ToolMessage)]
    assert "blocked_by_plugin: hook_error (exiter): RuntimeError: SystemExit(3)" in message.content
