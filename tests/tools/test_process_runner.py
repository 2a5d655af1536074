"""lich_make_process_runner: a third-party runner wraps every process lich starts.

The runner below rewrites each launch to ``sh -c '<log the launch>; exec "$@"' …``,
so the proof that a process went through it is written by the process itself, from
inside the wrapper, not only recorded by the runner. Each kind is attacked for real:
the terminal's command, grep_files' worker, disk_usage's du, a stdio MCP server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from lich.agent import Agent
from lich.config import ConfigError
from lich.hooks import hookimpl
from lich.processes import DIRECT, DirectRunner, Launch, ProcessRunner
from lich.testing import ScriptedChat, make_test_config
from lich.types import ToolCall

# Written by the wrapper itself, in the started process, before it execs the program.
_WRAP = 'printf "%s %s\\n" "$LICH_TEST_KIND" "$LICH_TEST_OWNER" >> "$LICH_TEST_LOG"; exec "$@"'


class LoggingRunner:
    """Wraps every launch in a shell that logs it; records entries and exits."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.entered: list[Launch] = []
        self.left: list[str] = []

    @contextlib.asynccontextmanager
    async def launch(self, spec: Launch) -> AsyncIterator[Launch]:
        self.entered.append(spec)
        env = {**spec.env, "LICH_TEST_KIND": spec.kind, "LICH_TEST_OWNER": spec.owner,
               "LICH_TEST_LOG": str(self.log)}
        try:
            yield attrs.evolve(spec, argv=("sh", "-c", _WRAP, "sh", *spec.argv), env=env)
        finally:
            self.left.append(spec.owner)


class RunnerPlugin:
    def __init__(self, runner: object) -> None:
        self.runner = runner

    @hookimpl
    def lich_make_process_runner(self, config: Any) -> object:
        return self.runner


def _logged(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


async def _call(agent: Agent, name: str, args: dict[str, Any]) -> Any:
    return await agent.executor.execute(ToolCall(id="c1", name=name, args=args))


def test_the_default_runner_runs_a_launch_as_given(tmp_path: Path) -> None:
    agent = Agent(make_test_config(tmp_path, plugins=("builtin_tools",)), chat=ScriptedChat([]))
    assert agent.process_runner is DIRECT
    assert isinstance(DIRECT, ProcessRunner)
    assert agent.executor.process_runner is DIRECT

    async def enter() -> Launch:
        spec = Launch(argv=["true"], env={}, cwd="/", kind="helper", owner="x")
        async with DirectRunner().launch(spec) as got:
            return got

    spec = asyncio.run(enter())
    assert spec.argv == ("true",)


async def test_hook_make_process_runner__every_builtin_tool_process_goes_through_it(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("needle here\n")
    log = tmp_path / "launches.log"
    runner = LoggingRunner(log)
    agent = Agent(make_test_config(work, plugins=("builtin_tools",)),
                  plugins=[("wrapper", RunnerPlugin(runner))], chat=ScriptedChat([]))
    try:
        assert agent.process_runner is runner

        result = await _call(agent, "terminal", {"command": "echo ran $LICH_TEST_KIND"})
        assert result.ok, result.output
        assert "ran terminal" in result.output
        assert _logged(log) == ["terminal terminal"]

        found = await _call(agent, "grep_files", {"pattern": "needle"})
        assert found.ok, found.error
        assert "notes.txt:1: needle here" in found.output  # the worker still got its fd
        assert _logged(log)[-1] == "helper grep_files"

        sizes = await _call(agent, "disk_usage", {"path": "."})
        assert sizes.ok, sizes.error
        assert "notes.txt" in sizes.output  # du still ran in the inherited directory
        assert _logged(log)[-1] == "helper disk_usage"
    finally:
        await agent.aclose()
    assert [s.kind for s in runner.entered] == ["terminal", "helper", "helper"]
    assert runner.left == ["terminal", "grep_files", "disk_usage"]  # every context was left
    assert all(s.cwd for s in runner.entered)
    # The terminal's environment reaches the runner whole: the call's mark is in it.
    assert "LICH_TOOL_CALL" in runner.entered[0].env


async def test_a_runner_that_fails_fails_the_start_closed(tmp_path: Path) -> None:
    """A sandbox that cannot start must not run the command unconfined."""

    class Refusing:
        @contextlib.asynccontextmanager
        async def launch(self, spec: Launch) -> AsyncIterator[Launch]:
            raise RuntimeError("sandbox unavailable: no user namespaces")
            yield spec  # pragma: no cover

    agent = Agent(make_test_config(tmp_path, plugins=("builtin_tools",)),
                  plugins=[("refusing", RunnerPlugin(Refusing()))], chat=ScriptedChat([]))
    marker = tmp_path / "ran"
    try:
        result = await _call(agent, "terminal", {"command": f"touch {marker}"})
        found = await _call(agent, "grep_files", {"pattern": "x"})
    finally:
        await agent.aclose()
    assert result.error == "spawn_failed: sandbox unavailable: no user namespaces"
    assert found.error is not None
    assert "sandbox unavailable" in found.error
    assert not marker.exists()


async def test_a_runner_yielding_no_launch_fails_the_start(tmp_path: Path) -> None:
    class Broken:
        @contextlib.asynccontextmanager
        async def launch(self, spec: Launch) -> AsyncIterator[Any]:
            yield ["sh", "-c", "touch ran"]

    agent = Agent(make_test_config(tmp_path, plugins=("builtin_tools",)),
                  plugins=[("broken", RunnerPlugin(Broken()))], chat=ScriptedChat([]))
    try:
        result = await _call(agent, "terminal", {"command": "true"})
    finally:
        await agent.aclose()
    assert result.error is not None
    assert "not a lich.processes.Launch" in result.error
    assert not (tmp_path / "ran").exists()


def test_an_answer_that_is_not_a_runner_fails_its_plugin(tmp_path: Path) -> None:
    agent = Agent(make_test_config(tmp_path, plugins=("builtin_tools",)),
                  plugins=[("bogus", RunnerPlugin("not a runner"))], chat=ScriptedChat([]))
    assert agent.process_runner is DIRECT
    report = next(r for r in agent.host.reports if r.entry == "bogus")
    assert report.phase == "register"
    assert "not a process runner" in (report.error_message or "")


def test_a_runner_hook_that_raises_is_a_config_error_naming_the_plugin(tmp_path: Path) -> None:
    class Raising:
        @hookimpl
        def lich_make_process_runner(self, config: Any) -> object:
            raise RuntimeError("boom")

    with pytest.raises(ConfigError, match="lich_make_process_runner of plugin 'raising'"):
        Agent(make_test_config(tmp_path, plugins=("builtin_tools",)),
              plugins=[("raising", Raising())], chat=ScriptedChat([]))


pytest.importorskip("mcp", reason="the MCP SDK (lich-agent[mcp]) is not installed")
FIXTURE = Path(__file__).parents[1] / "mcp_client" / "fixture_server.py"


def _cwd(pid: int) -> str:
    return os.path.realpath(f"/proc/{pid}/cwd")


def _cwd_of(path: Path) -> str:
    return os.path.realpath(path)


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/environ")
async def test_a_stdio_mcp_server_goes_through_the_runner_with_only_its_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The SDK spawns the server itself: the runner's rewritten argv, env and cwd are
    what it starts. And the server sees only what it is configured with (#28.11)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-lich-launcher-key-0123456789")
    monkeypatch.setenv("LICH_LAUNCHER_ONLY", "from-the-launcher")
    pid_file = tmp_path / "server.pid"
    log = tmp_path / "launches.log"
    runner = LoggingRunner(log)
    servers = {"fx": {"command": sys.executable, "args": [str(FIXTURE)],
                      "env": {"FIXTURE_PID_FILE": str(pid_file), "GIVEN": "configured"},
                      "startup_timeout_s": 60.0}}
    cfg = make_test_config(tmp_path, plugins=("mcp",), mcp={"servers": servers})
    agent = Agent(cfg, plugins=[("wrapper", RunnerPlugin(runner))], chat=ScriptedChat([]))
    try:
        echoed = await _call(agent, "mcp__fx__echo", {"text": "hello"})
        assert echoed.ok, echoed.error
        assert _logged(log) == ["mcp mcp:fx"]
        env = _environ(int(pid_file.read_text()))
        assert env["GIVEN"] == "configured"
        assert env["LICH_TEST_KIND"] == "mcp"  # the runner's env is the one it runs with
        assert "OPENAI_API_KEY" not in env
        assert "LICH_LAUNCHER_ONLY" not in env
        assert not any("sk-lich-launcher-key" in v for v in env.values())
        assert _cwd(int(pid_file.read_text())) == _cwd_of(tmp_path)
    finally:
        await agent.aclose()
    assert runner.left == ["mcp:fx"]  # left once the server stopped


def test_a_runner_that_fails_fails_the_mcp_server_closed(tmp_path: Path) -> None:
    """The server is not started unconfined: it is failed, with the runner's reason."""
    from lich.mcp.config import parse_mcp_settings
    from lich.mcp.plugin import open_runtime

    class Refusing:
        @contextlib.asynccontextmanager
        async def launch(self, spec: Launch) -> AsyncIterator[Launch]:
            raise RuntimeError("sandbox unavailable: bwrap is missing")
            yield spec  # pragma: no cover

    pid_file = tmp_path / "server.pid"
    servers = {"fx": {"command": sys.executable, "args": [str(FIXTURE)],
                      "env": {"FIXTURE_PID_FILE": str(pid_file)}, "startup_timeout_s": 60.0}}
    config = make_test_config(tmp_path, plugins=("mcp",), mcp={"servers": servers})
    runtime = open_runtime(parse_mcp_settings(config.table("mcp")), config, Refusing())
    try:
        [state] = runtime.states()
        status, error = state.status, state.error or ""
    finally:
        runtime.close()
    assert status == "failed"
    assert "sandbox unavailable: bwrap is missing" in error
    assert not pid_file.exists()  # nothing ran
