"""Live tool output: ``ctx.output`` becomes coalesced, capped ``tool_output`` events
emitted on the loop while the call runs, and nothing once it has ended."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lich.events import Event, ToolOutput
from lich.executor import LIVE_OUTPUT_INTERVAL_S
from lich.tools import Tool, ToolContext, ToolExecutor, ToolRegistry, no_output
from lich.types import ToolCall, ToolResult

HANG_S = 60
SCHEMA: dict[str, Any] = {"type": "object"}


def _executor(tmp_path: Path, *tools: Tool) -> ToolExecutor:
    registry = ToolRegistry()
    for item in tools:
        registry.register(item)
    return ToolExecutor(registry, work_dir=tmp_path)


class _Events:
    """An ``emit``: records each event with the thread it was emitted on."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.threads: set[int] = set()
        self.first = threading.Event()

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        self.threads.add(threading.get_ident())
        self.first.set()

    @property
    def texts(self) -> list[str]:
        return [e.text for e in self.events if isinstance(e, ToolOutput)]


async def test_a_thread_tool_reports_while_it_runs_and_events_come_on_the_loop(
    tmp_path: Path,
) -> None:
    events = _Events()

    def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        assert ctx.watched
        ctx.output("first\n")
        # The event of the first piece reaches the listener while the call still runs.
        seen = events.first.wait(HANG_S)
        ctx.output("second\n")
        ctx.output("third\n")
        return ToolResult.success(f"seen={seen}")

    executor = _executor(tmp_path, Tool("chatty", "prints", SCHEMA, run))
    result = await executor.execute(ToolCall("c9", "chatty", {}), emit=events)

    assert result.output == "seen=True"
    assert events.texts[0] == "first\n"
    assert "".join(events.texts) == "first\nsecond\nthird\n"
    assert {e.call_id for e in events.events if isinstance(e, ToolOutput)} == {"c9"}
    assert events.threads == {threading.get_ident()}  # emitted on the loop, not the worker


async def test_pieces_reported_between_two_flushes_become_one_event(tmp_path: Path) -> None:
    events = _Events()
    flushed = asyncio.Event()

    def emit(event: Event) -> None:
        events(event)
        flushed.set()

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        for _ in range(5000):  # a chatty command: a piece per line, no pause
            ctx.output("x")
        await asyncio.wait_for(flushed.wait(), HANG_S)
        ctx.output("tail")
        return ToolResult.success("done")

    executor = _executor(tmp_path, Tool("flood", "floods", SCHEMA, run))
    result = await executor.execute(ToolCall("c1", "flood", {}), emit=emit)

    assert result.output == "done"
    # 5000 reports, two events: one for the burst, the rest when the call ended.
    assert events.texts == ["x" * 5000, "tail"]


async def test_live_output_stops_at_the_tools_output_cap(tmp_path: Path) -> None:
    events = _Events()

    def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        ctx.output("0123456789abcdef")
        ctx.output("more")
        return ToolResult.success("z" * 50)

    executor = _executor(tmp_path, Tool("big", "prints", SCHEMA, run, max_output_chars=10))
    result = await executor.execute(ToolCall("c1", "big", {}), emit=events)

    assert "".join(events.texts) == "0123456789"
    assert result.ok  # the result is capped as it always was, on its own
    assert result.output.startswith("z")


async def test_a_config_cap_caps_live_output_too(tmp_path: Path) -> None:
    events = _Events()

    def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        for _ in range(10):
            ctx.output("abcd")
        return ToolResult.success("")

    registry = ToolRegistry()
    registry.register(Tool("big", "prints", SCHEMA, run))
    executor = ToolExecutor(registry, work_dir=tmp_path,
                            tool_settings={"big": {"max_output_chars": 6}})
    await executor.execute(ToolCall("c1", "big", {}), emit=events)

    assert "".join(events.texts) == "abcdab"


async def test_output_reported_after_the_call_ended_is_dropped(tmp_path: Path) -> None:
    events = _Events()
    leaked: list[Callable[[str], None]] = []

    def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        leaked.append(ctx.output)
        ctx.output("during")
        return ToolResult.success("")

    executor = _executor(tmp_path, Tool("leaky", "leaks", SCHEMA, run))
    await executor.execute(ToolCall("c1", "leaky", {}), emit=events)
    assert events.texts == ["during"]

    late = leaked[0]
    late("after, on the loop")
    thread = threading.Thread(target=late, args=("after, from a thread",))
    thread.start()
    thread.join(HANG_S)
    # Longer than a flush takes to come: none comes, and nothing raised.
    await asyncio.sleep(LIVE_OUTPUT_INTERVAL_S * 3)
    assert events.texts == ["during"]


async def test_without_a_listener_output_goes_nowhere(tmp_path: Path) -> None:
    seen: list[object] = []

    def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        seen.append(ctx.output)
        seen.append(ctx.watched)
        ctx.output("nobody hears this")
        return ToolResult.success("ok")

    executor = _executor(tmp_path, Tool("quiet", "prints", SCHEMA, run))
    result = await executor.execute(ToolCall("c1", "quiet", {}))

    assert result.output == "ok"
    assert seen == [no_output, False]
    assert not ToolContext(work_dir=tmp_path).watched


async def test_output_takes_text_only(tmp_path: Path) -> None:
    events = _Events()

    def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        ctx.output(b"bytes")  # type: ignore[arg-type]
        return ToolResult.success("")

    executor = _executor(tmp_path, Tool("bytes", "prints", SCHEMA, run))
    result = await executor.execute(ToolCall("c1", "bytes", {}), emit=events)

    assert not result.ok
    assert result.error == "TypeError: ctx.output takes text (str), not bytes"
    assert events.texts == []


async def test_a_timed_out_call_still_sends_what_it_reported(tmp_path: Path) -> None:
    events = _Events()

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        ctx.output("started")
        await asyncio.sleep(HANG_S)
        return ToolResult.success("")

    executor = _executor(tmp_path, Tool("slow", "hangs", SCHEMA, run, timeout_s=0.05))
    result = await executor.execute(ToolCall("c1", "slow", {}), emit=events)

    assert result.error is not None
    assert result.error.startswith("timeout:")
    assert events.texts == ["started"]
