"""terminal: exit codes, env, timeouts that kill the whole process group, caps, secret scrubbing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from lich.agent import Agent
from lich.cancel import CancelToken
from lich.config import LichConfig, ProviderConfig
from lich.hooks import hookimpl
from lich.providers import ProviderDefaults, ProviderRegistry
from lich.testing import ScriptedChat, async_wait_for
from lich.tools import ToolContext
from lich.types import ToolCall
from lich_builtin_tools import _terminal
from lich_builtin_tools._terminal import make_terminal_tool

from .conftest import Runner, kill_quietly, live_processes, process_alive, wait_until_dead

# Records bash's pid and a backgrounded child's, then blocks in a foreground child:
# the shape of "sleep 100 & sleep 100".
SLEEPERS = "echo $$ > bash.pid; sleep 100 & echo $! > bg.pid; sleep 100"


def _pids(work: Path) -> list[int]:
    return [int((work / name).read_text()) for name in ("bash.pid", "bg.pid")]


def _group_members(pgid: int) -> list[int]:
    """Live processes whose process group is ``pgid`` (read from /proc)."""
    return [pid for pid, fields in live_processes() if int(fields[2]) == pgid]


async def _appears(path: Path) -> None:
    # Written, not just created: a kill between bash's open and its write would
    # leave an empty pid file behind.
    def written() -> bool:
        return path.exists() and bool(path.read_text().strip())

    await async_wait_for(lambda: asyncio.to_thread(written), what=f"{path} to be written",
                         interval=0.02)


async def test_echo_sees_the_tool_env_and_reports_exit_0(run: Runner) -> None:
    run.env = {"LICH_TEST_VALUE": "from-context"}
    result = await run("terminal", {"command": "echo $LICH_TEST_VALUE; pwd"})
    assert result.ok
    assert result.error is None
    assert "from-context" in result.output
    assert str(run.work_dir) in result.output
    assert result.output.endswith("\n[exit 0]")


async def test_non_zero_exit_is_not_ok_without_an_error(run: Runner) -> None:
    result = await run("terminal", {"command": "echo out; echo err >&2; exit 3"})
    assert not result.ok
    assert result.error is None
    assert result.output.endswith("[exit 3]")
    assert result.output.index("out") < result.output.index("err")


async def test_missing_command(run: Runner) -> None:
    assert (await run("terminal", {})).error == "missing_arg: command"


async def test_timeout_kills_the_whole_process_group(run: Runner, work: Path) -> None:
    result = await run("terminal", {"command": SLEEPERS, "timeout_ms": 1500})
    pids = _pids(work)
    try:
        assert result.error == "timeout"
        assert not result.ok
        assert result.output.endswith("[exit -1]")
        assert wait_until_dead(pids) == []
        assert wait_until_dead(_group_members(pids[0])) == []
    finally:
        kill_quietly(pids)


async def test_configured_timeout_tightens_the_default(run: Runner, work: Path) -> None:
    result = await run("terminal", {"command": SLEEPERS}, settings={"timeout_s": 1.5})
    pids = _pids(work)
    try:
        assert result.error == "timeout"
        assert wait_until_dead(pids) == []
    finally:
        kill_quietly(pids)


async def test_timeout_ms_is_clamped_to_the_maximum() -> None:
    tool = make_terminal_tool()
    # The executor allows a little more than the tool's own 300 s maximum, so the tool's
    # deadline (which keeps the output) fires first.
    assert 300 < tool.timeout_s <= 310
    assert tool.max_output_chars == 20_000


async def test_cancellation_kills_the_process_group(run: Runner, work: Path) -> None:
    token = CancelToken()

    async def cancel_when_started() -> None:
        await _appears(work / "bg.pid")
        token.cancel()

    canceller = asyncio.ensure_future(cancel_when_started())
    result = await run("terminal", {"command": SLEEPERS}, cancel=token)
    await canceller
    pids = _pids(work)
    try:
        assert result.error == "cancelled"
        assert wait_until_dead(pids) == []
    finally:
        kill_quietly(pids)


async def test_task_cancellation_from_outside_kills_the_group(work: Path) -> None:
    """The executor's own deadline cancels the task: the tool must still kill the group."""
    tool = make_terminal_tool()
    ctx = ToolContext(work_dir=work)
    task = asyncio.ensure_future(tool.execute({"command": SLEEPERS}, ctx))  # type: ignore[arg-type]
    await _appears(work / "bg.pid")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    pids = _pids(work)
    try:
        assert wait_until_dead(pids) == []
    finally:
        kill_quietly(pids)


async def _drained() -> None:
    """Wait until no background job's pipe is still being drained (so none outlives the
    test's event loop as an unclosed transport)."""
    await async_wait_for(lambda: not _terminal._DETACHED,
                         what="the background job's pipes to close", interval=0.02)


async def test_background_job_does_not_hold_the_call_open(run: Runner, work: Path) -> None:
    # A call held open by the job would return only when it ends, long after pytest's
    # timeout: the job still running when the call returns shows it was not waited for.
    result = await run("terminal", {"command": "sleep 600 & echo $! > bg.pid; echo started"})
    pid = int((work / "bg.pid").read_text())
    try:
        assert result.ok
        assert "started" in result.output
        # Left running: the group is killed only on timeout or cancellation.
        assert process_alive(pid)
        assert len(_terminal._DETACHED) == 2  # its stdout and stderr, still drained
    finally:
        kill_quietly([pid])
        await _drained()


async def test_background_job_holding_the_pipe_survives_its_later_writes(
    run: Runner, work: Path
) -> None:
    """Closing our end of the pipe would kill the job with SIGPIPE at its next write: a
    ``server &`` that died at its first log line. It keeps running; its output is dropped."""
    command = ("(sleep 1; echo late; echo late >&2; echo alive > marker) & echo $! > bg.pid; "
               "echo started")
    result = await run("terminal", {"command": command})
    pid = int((work / "bg.pid").read_text())
    try:
        assert result.ok
        assert result.output == "started\n\n[exit 0]"
        await _appears(work / "marker")
        assert (work / "marker").read_text() == "alive\n"
        await _drained()  # it exited, closing its pipes: nothing is kept for it
    finally:
        kill_quietly([pid])


async def test_redirected_background_job_returns_at_once_and_keeps_running(
    run: Runner, work: Path
) -> None:
    command = "sleep 30 > /dev/null 2>&1 & echo $! > bg.pid; echo started"
    result = await run("terminal", {"command": command})
    pid = int((work / "bg.pid").read_text())
    try:
        assert result.ok
        assert "started" in result.output
        assert process_alive(pid)
        assert not _terminal._DETACHED  # it holds none of our pipes
    finally:
        kill_quietly([pid])


async def test_streams_are_capped_while_reading(run: Runner) -> None:
    # 20 MB on stdout: buffered whole it would be slow and large; capped it is neither.
    result = await run("terminal", {"command": "head -c 20000000 /dev/zero | tr '\\0' y; "
                                               "echo tail >&2"})
    assert result.ok
    assert len(result.output) <= 20_000
    assert result.output.endswith("[exit 0]")
    assert "[... truncated" in result.output


async def test_exit_line_survives_a_tight_output_cap(run: Runner) -> None:
    result = await run("terminal", {"command": "seq 1 100000; exit 4"},
                       settings={"max_output_chars": 300})
    assert len(result.output) <= 300
    assert result.output.endswith("[exit 4]")


async def test_secrets_are_scrubbed_from_the_environment(
    run: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    mp = monkeypatch
    secrets = {
        "OPENAI_API_KEY": "sk-openai-value-1",
        "GITHUB_TOKEN": "ghp-value-2",
        "DB_PASSWORD": "hunter2-value-3",
        "MY_SECRET_THING": "secret-value-4",
        "lower_api_key": "lower-value-5",
        "CUSTOM_LLM_CREDS": "provider-value-6",  # only secret because a provider names it
        "PASSED_TOKEN": "passed-value-8",  # secret-looking, but allowed by pass_env
    }
    for name, value in secrets.items():
        mp.setenv(name, value)
    mp.setenv("LICH_PLAIN_VALUE", "plain-visible")
    run.config = LichConfig(
        work_dir=str(run.work_dir), plugins=(),
        providers=(ProviderConfig(kind="openai_compat", name="p", model="m",
                                  api_key_env="CUSTOM_LLM_CREDS"),),
    )
    run.env = {"CONTEXT_TOKEN": "context-value-9"}
    result = await run("terminal", {"command": "env"}, settings={"pass_env": ["PASSED_TOKEN"]})
    assert result.ok
    for name, value in secrets.items():
        if name == "PASSED_TOKEN":
            assert f"{name}={value}" in result.output
        else:
            assert value not in result.output, name
    assert "context-value-9" not in result.output
    assert "LICH_PLAIN_VALUE=plain-visible" in result.output


async def test_bad_pass_env_setting_is_a_clear_error(run: Runner) -> None:
    result = await run("terminal", {"command": "true"}, settings={"pass_env": "GITHUB_TOKEN"})
    assert result.error == (
        "invalid_setting: $.tools.terminal.pass_env: expected an array, got string")
    result = await run("terminal", {"command": "true"},
                       settings={"pass_env": ["A", 1], "pass_envs": []})
    assert result.error == (
        "invalid_setting: $.tools.terminal.pass_env[1]: expected a string, got integer; "
        "$.tools.terminal.pass_envs: unknown key (did you mean 'pass_env'?)")


class _ZetaProvider:
    """A third-party provider kind whose default key variable looks like nothing secret."""

    name = "zeta"
    model = "z"

    async def chat(self, *args: Any) -> Any:
        raise AssertionError("never called")


class _ZetaPlugin:
    @hookimpl
    def lich_register_providers(self, registry: ProviderRegistry) -> None:
        registry.register("zeta", lambda config: _ZetaProvider(),
                          defaults=ProviderDefaults(base_url="https://zeta.invalid",
                                                    key_env="ZETA_CREDS"))


async def test_a_third_party_kinds_default_key_is_scrubbed_too(
    work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry, not a list in the core, says which variables hold provider keys."""
    monkeypatch.setenv("ZETA_CREDS", "zeta-value-1")
    monkeypatch.setenv("ZETA_PLAIN", "zeta-plain")
    config = LichConfig(work_dir=str(work), plugins=("builtin_tools",))
    agent = Agent(config, plugins=[("zeta", _ZetaPlugin())], chat=ScriptedChat())
    terminal = await agent.executor.execute(ToolCall("c1", "terminal", {"command": "env"}))
    assert "zeta-value-1" not in terminal.output
    assert "ZETA_PLAIN=zeta-plain" in terminal.output
    env_get = await agent.executor.execute(
        ToolCall("c2", "env_get", {"keys": ["ZETA_CREDS"], "reveal": True}))
    assert env_get.output == "ZETA_CREDS=<redacted: 12 chars>"
