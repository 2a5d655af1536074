"""Helpers for the example-plugin tests: scripted tool plans and agent runs.

Every test here runs the examples the way a user does: through a real
:class:`lich.Agent`, with the plugins loaded by their entry-point names (or
file paths), answering a scripted model from :mod:`lich.testing`.
"""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from lich import Agent, RunResult, ToolMessage, tool
from lich.testing import Reply, ScriptedChat, ScriptRequest, make_test_config
from lich.types import ToolCall, Usage

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "plugins_example"
EXAMPLE_ENTRY_POINTS = ("data_tools", "audit", "guard")


def examples_installed() -> bool:
    """Whether the ``lich-examples`` distribution is installed (``.ci/run`` installs it)."""
    names = {ep.name for ep in importlib.metadata.entry_points(group="lich")}
    return set(EXAMPLE_ENTRY_POINTS) <= names


@pytest.fixture(autouse=True)
def _require_examples_installed() -> None:
    if not examples_installed():
        pytest.fail(
            "the example distribution is not installed; run "
            "`pip install -e plugins_example` (the README's test command does)",
            pytrace=False,
        )


def plan(
    *calls: tuple[str, Mapping[str, Any]],
    usage: Usage | None = None,
) -> Callable[[ScriptRequest], Reply]:
    """A responder: the ``calls`` one per turn, then a final answer listing every
    tool result as JSON (so tests and CLI output can see them)."""

    def respond(request: ScriptRequest) -> Reply:
        results = request.tool_results_since_user()
        if len(results) < len(calls):
            name, args = calls[len(results)]
            call = ToolCall(f"call_{len(results) + 1}", name, dict(args))
            return Reply(tool_calls=(call,), usage=usage)
        return Reply("results: " + json.dumps([r.content for r in results]), usage=usage)

    return respond


def tool_results(result: RunResult) -> list[ToolMessage]:
    """The tool messages of the run, in order."""
    return [m for m in result.messages if isinstance(m, ToolMessage)]


def build_agent(
    work_dir: Path,
    responder: Callable[[ScriptRequest], Reply],
    *,
    plugins: Sequence[str] = (),
    objects: Sequence[tuple[str, object]] = (),
    **config: Any,
) -> Agent:
    """An agent in ``work_dir`` with ``plugins`` loaded, answering from ``responder``."""
    cfg = make_test_config(work_dir, plugins=tuple(plugins), **config)
    return Agent(cfg, plugins=objects, chat=ScriptedChat(responder=responder))


async def run_plan(
    work_dir: Path,
    *calls: tuple[str, Mapping[str, Any]],
    plugins: Sequence[str] = (),
    objects: Sequence[tuple[str, object]] = (),
    **config: Any,
) -> tuple[Agent, RunResult]:
    """Build an agent, run the planned calls, and check every plugin loaded."""
    agent = build_agent(work_dir, plan(*calls), plugins=plugins, objects=objects, **config)
    failed = [r.describe_error() for r in agent.host.reports if not r.ok]
    assert not failed, failed
    result = await agent.run("do the planned calls")
    assert result.stopped_reason == "final"
    return agent, result


class Recorder:
    """An in-process plugin with tools that record what they received.

    ``echo(text, n?)`` answers ``echo: <text>``; ``terminal(command, timeout_ms?)``,
    ``write_file(path, content)`` and ``read_file(path)`` stand in for the
    builtin tools (they do not touch the system) so the hooks can be tested on
    the calls the model really makes.
    """

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []

    def lich_register_tools(self, registry: Any) -> None:
        received = self.received

        @tool
        def echo(text: str, n: int = 1) -> str:
            """Echo the text."""
            received.append(("echo", {"text": text, "n": n}))
            return f"echo: {text}"

        @tool
        def terminal(command: str, timeout_ms: int = 60000) -> str:
            """Pretend to run a command."""
            received.append(("terminal", {"command": command, "timeout_ms": timeout_ms}))
            return f"ran: {command}"

        @tool
        def write_file(path: str, content: str) -> str:
            """Pretend to write a file."""
            received.append(("write_file", {"path": path, "content": content}))
            return f"wrote {len(content)} chars to {path}"

        @tool
        def read_file(path: str) -> str:
            """Pretend to read a file."""
            received.append(("read_file", {"path": path}))
            return f"contents of {path}"

        for item in (echo, terminal, write_file, read_file):
            registry.register(item)

    def names(self) -> list[str]:
        """The tools that ran, in order."""
        return [name for name, _ in self.received]
