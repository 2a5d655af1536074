"""The gateway as a plugin: entry point, cheap import, adapter registration, the runner,
and the ``lich gateway`` command (including SIGTERM to a real subprocess)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from gateway_process import gateway_process
from lich_env import lich_env

from lich.gateway.registry import (
    AdapterContext,
    AdapterRegistry,
    GatewayError,
    UnknownPlatformError,
)
from lich.hooks import hookimpl
from lich.plugins import PluginHost, available_plugins
from lich.testing import Reply, ScriptedModel, ScriptedServer, ScriptRequest, async_wait_for

from .conftest import events, gateway_responder


def test_the_gateway_is_a_builtin_entry_point():
    from lich.config import BUILTIN_PLUGINS

    assert "gateway" in BUILTIN_PLUGINS
    entry = {p.name: p for p in available_plugins()}["gateway"]
    assert entry.value == "lich.gateway.plugin"


def test_loading_registers_the_four_platforms_attributed_to_the_plugin(tmp_path: Path):
    host = PluginHost(work_dir=tmp_path)
    (report,) = host.load(["gateway"])
    assert report.ok, report.describe_error()
    assert set(report.hooks) == {
        "lich_register_gateway_adapters", "lich_register_commands", "lich_add_hookspecs",
        "lich_register_config_tables"}
    # Its own hooks, for other plugins (and itself) to implement.
    assert report.hookspecs == ("lich_make_bus", "lich_register_gateway_adapters")
    registry = AdapterRegistry()
    host.register_into("lich_register_gateway_adapters", registry)
    assert registry.names() == ["webhook", "telegram", "discord", "twitch"]
    assert {registry.plugin_of(n) for n in registry.names()} == {"gateway"}


def test_a_bad_gateway_table_is_a_config_error_for_every_agent(tmp_path: Path):
    """What `lich config validate` reports, a plain run refuses: not only `lich gateway`."""
    from lich.agent import Agent
    from lich.config import ConfigError
    from lich.testing import make_test_config

    config = make_test_config(tmp_path, plugins=["gateway"],
                              gateway={"queue_limit": 0, "telegram": {"allowed_users": "me"}})
    host = PluginHost(work_dir=tmp_path)
    host.load(["gateway"])
    assert sorted(host.check_config(config)) == [
        "$.gateway.queue_limit: must be at least 1, got 0",
        "$.gateway.telegram.allowed_users: expected an array of ids, got string",
    ]
    with pytest.raises(ConfigError, match=r"\$\.gateway\.queue_limit: must be at least 1"):
        Agent(config, chat=ScriptedModel(["never"]))
    fine = make_test_config(tmp_path, plugins=["gateway"], gateway={"queue_limit": 2})
    assert host.check_config(fine) == []
    Agent(fine, chat=ScriptedModel(["never"]))


def test_importing_the_plugin_module_is_cheap():
    code = (
        "import sys, lich.gateway.plugin, lich.gateway;"
        "heavy = [m for m in ('httpx', 'starlette', 'uvicorn', 'websockets', 'anyio')"
        " if m in sys.modules]; print(','.join(heavy))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout.strip() == ""


class _EchoAdapter:
    """A third-party platform: answers whatever ``inject`` gets, into ``sent``."""

    name = "echo"

    def __init__(self, context: AdapterContext) -> None:
        self.context = context
        self.sent: list[str] = []
        self.started = self.stopped = False

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    async def inject(self, text: str) -> None:
        from lich.gateway.bus import InboundMessage

        reply = await self.context.bus.handle(InboundMessage("echo", "room", "me", text))
        self.sent.append(reply.text)


class _EchoPlugin:
    @hookimpl
    def lich_register_gateway_adapters(self, registry: AdapterRegistry) -> None:
        registry.register("echo", _EchoAdapter)


class _ShadowPlugin:
    @hookimpl
    def lich_register_gateway_adapters(self, registry: AdapterRegistry) -> None:
        registry.register("webhook", _EchoAdapter)  # replaces the builtin (it runs first)


class _BrokenPlugin:
    @hookimpl
    def lich_register_gateway_adapters(self, registry: AdapterRegistry) -> None:
        registry.register("mine", _EchoAdapter)
        raise RuntimeError("half-way through")


async def test_a_third_party_platform_registers_the_same_way(start_gateway: Any):
    runner = await start_gateway(["echo"], {"echo": {"greeting": "hi"}},
                                 objects=[("echo_plugin", _EchoPlugin())])
    adapter: _EchoAdapter = runner.adapter("echo")
    assert adapter.started
    assert adapter.context.settings == {"greeting": "hi"}
    await adapter.inject("read notes.txt")
    assert adapter.sent == ["the file says: lich is a plugin-first agent harness"]
    assert runner.registry.plugin_of("echo") == "echo_plugin"
    await runner.stop()
    assert adapter.stopped


async def test_a_plugin_that_fails_to_register_is_unloaded_whole(start_gateway: Any):
    runner = await start_gateway(["webhook"], {"webhook": {"port": 0}},
                                 objects=[("broken", _BrokenPlugin())])
    assert not runner.registry.has("mine")
    assert runner.registry.names() == ["webhook", "telegram", "discord", "twitch"]
    report = next(r for r in runner.host.reports if r.entry == "broken")
    assert report.status == "failed"
    assert "half-way through" in report.describe_error()


async def test_a_duplicate_platform_is_reported_and_skipped(start_gateway: Any):
    runner = await start_gateway(["webhook"], objects=[("shadow", _ShadowPlugin())])
    assert isinstance(runner.adapter("webhook"), _EchoAdapter)
    assert runner.registry.plugin_of("webhook") == "shadow"
    assert runner.registry.plugin_of("telegram") == "gateway"
    report = next(r for r in runner.host.reports if r.entry == "gateway")
    assert report.ok
    assert report.warnings == (
        "duplicate_gateway_platform: webhook (already registered by shadow); skipped",)


def test_a_duplicate_outside_the_host_raises():
    registry = AdapterRegistry()
    registry.register("x", _EchoAdapter)
    with pytest.raises(ValueError, match="duplicate_gateway_platform: x"):
        registry.register("x", _EchoAdapter)
    with pytest.raises(TypeError):
        registry.register("", _EchoAdapter)
    with pytest.raises(TypeError):
        registry.register("y", "not callable")  # type: ignore[arg-type]


async def test_unknown_platforms_are_named(start_gateway: Any):
    with pytest.raises(UnknownPlatformError, match=r"unknown gateway platform: telegrm "
                                                   r"\(available: webhook, telegram"):
        await start_gateway(["telegrm"])


async def test_one_platform_failing_does_not_stop_the_others(
    start_gateway: Any, gateway_log: pytest.LogCaptureFixture,
):
    runner = await start_gateway(["webhook", "telegram"], {"webhook": {"port": 0}}, env={})
    assert list(runner.adapters) == ["webhook"]
    assert "LICH_TELEGRAM_BOT_TOKEN" in runner.failed["telegram"]
    assert events(gateway_log, "adapter_failed")[0]["platform"] == "telegram"


async def test_nothing_started_is_an_error(start_gateway: Any):
    with pytest.raises(GatewayError, match="no gateway platform could start"):
        await start_gateway(["discord"], env={})


async def test_tools_listed_but_missing_are_warned_about(
    start_gateway: Any, gateway_log: pytest.LogCaptureFixture,
):
    await start_gateway(["webhook"], {"webhook": {"port": 0}, "tools": ["read_file", "nope"]})
    assert events(gateway_log, "tools_unavailable")[0]["tools"] == "nope"
    assert not events(gateway_log, "terminal_unconfined")


async def test_terminal_in_the_gateway_is_warned_about(
    start_gateway: Any, gateway_log: pytest.LogCaptureFixture,
):
    # A shell is not confined by path: every chat user could read every transcript.
    await start_gateway(["webhook"], {"webhook": {"port": 0}, "tools": ["read_file", "terminal"]})
    (warning,) = events(gateway_log, "terminal_unconfined")
    assert "transcripts" in warning["detail"]


@pytest.fixture
def lich_logging() -> Any:
    """Put the ``lich`` logger back as it was: the command installs its own handler."""
    import logging

    logger = logging.getLogger("lich")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    yield logger
    logger.handlers[:] = saved[0]
    logger.setLevel(saved[1])
    logger.propagate = saved[2]


def test_the_command_is_on_the_lich_cli(tmp_path: Path, lich_logging: Any):
    from lich.cli import build_cli

    result = CliRunner().invoke(build_cli(), ["--work-dir", str(tmp_path), "gateway", "--help"])
    assert result.exit_code == 0, result.output
    assert "Serve the agent on chat platforms" in result.output
    assert "--grace" in result.output
    assert "--port" in result.output


def test_the_command_reports_usage_errors(tmp_path: Path, lich_logging: Any):
    from lich.cli import build_cli

    (tmp_path / ".lich").mkdir()
    config = tmp_path / ".lich" / "config.toml"
    config.write_text('[gateway]\nhistory_cap = "many"\n')
    result = CliRunner().invoke(build_cli(), ["--work-dir", str(tmp_path), "gateway"])
    assert result.exit_code == 2
    assert "$.gateway.history_cap: expected an integer, got string" in result.output
    config.write_text(
        '[[providers]]\nkind = "openai_compat"\nname = "p"\nmodel = "m"\n'
        'base_url = "http://127.0.0.1:9/v1"\n'
    )
    result = CliRunner().invoke(build_cli(), ["--work-dir", str(tmp_path), "gateway", "slack"])
    assert result.exit_code == 2
    assert "unknown gateway platform: slack" in result.output


# ------------------------------------------------------------- SIGTERM, for real


def _slow_responder(request: ScriptRequest) -> Any:
    text = request.last_user()
    if text.startswith("slow "):
        return Reply(f"finished {text[5:]}", delay_s=1.5)
    return gateway_responder(request)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
async def test_sigterm_lets_the_run_in_flight_finish_then_exits_0(tmp_path: Path):
    server = ScriptedServer(ScriptedModel(responder=_slow_responder)).start()
    try:
        (tmp_path / ".lich").mkdir()
        (tmp_path / ".lich" / "config.toml").write_text(
            'stream = false\n'
            '[[providers]]\nkind = "openai_compat"\nname = "scripted"\nmodel = "m"\n'
            f'base_url = "{server.base_url}"\n'
            '[gateway]\nplatforms = ["webhook"]\ngrace_s = 20\n'
            '[gateway.webhook]\nport = 0\nopen = true\n'
        )
        async with gateway_process(tmp_path, lich_env()) as gateway:
            process, lines = gateway.process, gateway.lines
            async with httpx.AsyncClient(timeout=60) as client:
                url = f"http://127.0.0.1:{gateway.port}"
                request = asyncio.create_task(
                    client.post(f"{url}/message", json={"text": "slow job", "chat_id": "t"}))
                await async_wait_for(lambda: any("event=message_in" in ln for ln in lines),
                                     timeout=30, what="the message to arrive")
                process.send_signal(signal.SIGTERM)
                response = await asyncio.wait_for(request, 60)
            assert response.status_code == 200, response.text
            assert response.json()["reply"] == "finished job"
            code = await asyncio.wait_for(process.wait(), 60)
        await async_wait_for(lambda: any("event=gateway_stopped" in ln for ln in lines),
                             timeout=10, what="the last log line to be read")
        assert code == 0, "\n".join(lines)
        text = "\n".join(lines)
        assert "event=signal signal=SIGTERM" in text
        assert "event=gateway_stopped clean=True" in text
        # The run's transcript was written through to its end.
        session = next((tmp_path / ".lich" / "sessions").glob("gw-webhook-t-*.jsonl"))
        records = [json.loads(line) for line in session.read_text().splitlines()]
        assert records[-1]["kind"] == "meta"
        assert records[-1]["stopped_reason"] == "final"
    finally:
        server.stop()
