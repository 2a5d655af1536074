"""Helpers for the TUI pilot tests: a real Agent on a scripted model, a test tool,
and waiting for the app without timed assertions (only a generous hang guard)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lich.agent import Agent
from lich.hooks import hookimpl
from lich.testing import ScriptedChat, Step, async_wait_for, make_test_config
from lich.tools import Tool, ToolRegistry, tool
from lich.types import ChatOptions, ChatResult, Message, ToolDefinition

HANG_GUARD_S = 20.0


@tool
def shout(text: str) -> str:
    """Say ``text`` loudly."""
    return text.upper() + "!"


@tool
def lines(count: int) -> str:
    """Produce ``count`` numbered lines."""
    return "\n".join(f"line {i}" for i in range(1, count + 1))


class ToolsPlugin:
    """An in-process plugin registering the given tools."""

    def __init__(self, *tools: Tool) -> None:
        self.tools = tools or (shout, lines)

    @hookimpl
    def lich_register_tools(self, registry: ToolRegistry) -> None:
        for item in self.tools:
            registry.register(item)


class GatedChat:
    """Wraps a :class:`ScriptedChat`: streams the reply's deltas, then holds the
    answer until :attr:`gate` is set — so a test can look at the streamed text
    while the model call is still in flight."""

    def __init__(self, inner: ScriptedChat) -> None:
        self.inner = inner
        self.name = inner.name
        self.gate = asyncio.Event()
        self.streamed = asyncio.Event()

    async def __call__(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition], options: ChatOptions
    ) -> ChatResult:
        result = await self.inner(messages, tools, options)
        self.streamed.set()
        await self.gate.wait()
        return result


def make_agent(
    work_dir: Path,
    steps: Sequence[Step | str] = (),
    *,
    chat: Any = None,
    plugin: object | None = None,
    **config: Any,
) -> tuple[Agent, ScriptedChat]:
    """A real :class:`Agent` in ``work_dir`` answering from ``steps`` (streaming on)."""
    scripted = ScriptedChat(steps)
    cfg = make_test_config(work_dir, **{"stream": True, **config})
    agent = Agent(cfg, plugins=[("test_tools", plugin or ToolsPlugin())], chat=chat or scripted)
    return agent, scripted


async def wait_for(pilot: Any, predicate: Callable[[], bool], what: str) -> None:
    """Let the app run until ``predicate()`` holds; fail (not hang) after a generous bound."""
    await async_wait_for(predicate, HANG_GUARD_S, what, pause=pilot.pause)


async def send(pilot: Any, text: str) -> None:
    """Type ``text`` into the prompt and press Enter."""
    pilot.app.prompt.value = text
    await pilot.press("enter")
