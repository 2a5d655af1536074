"""The done-when test of plugin-owned config, hooks and slash commands: the third-party
single-file plugin ``forecast.py`` — its own ``[forecast]`` table, its own hook
``lich_forecast_sources`` (answered by ``forecast_gauge.py``) and ``/forecast`` —
works in the CLI, ``lich chat``, the TUI (Textual's pilot) and the gateway (the
webhook on loopback), as the builtins' tables and hooks do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from lich import Agent
from lich.cli import build_cli
from lich.testing import ScriptedChat, async_wait_for, make_test_config

from .conftest import EXAMPLES

FORECAST = str(EXAMPLES / "forecast.py")
GAUGE = str(EXAMPLES / "forecast_gauge.py")
OSLO = "forecast for Oslo (metric): rain gauge in Oslo: 12 mm of rain"
BERGEN = "forecast for Bergen (metric): rain gauge in Bergen: 12 mm of rain"
HANG_GUARD_S = 20.0


def write_config(work: Path, extra: str = "", plugins: tuple[str, ...] = (GAUGE, FORECAST),
                 base_url: str = "http://127.0.0.1:9/v1") -> None:
    # The gauge is listed before the plugin whose hook it implements, on purpose.
    (work / ".lich").mkdir(exist_ok=True)
    (work / ".lich" / "config.toml").write_text(
        "plugins = [" + ", ".join(json.dumps(f"+{p}") for p in plugins) + "]\n"
        '[forecast]\ncity = "Oslo"\n' + extra
        + f'[[providers]]\nkind = "openai_compat"\nname = "s"\nmodel = "m"\n'
          f'base_url = "{base_url}"\n', encoding="utf-8")


def run_lich(work: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(work), "XDG_CONFIG_HOME": str(work / ".config"),
           "XDG_CACHE_HOME": str(work / ".cache")}
    return subprocess.run([sys.executable, "-m", "lich", *args], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    monkeypatch.chdir(path)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    return path


def test_in_the_cli_its_table_hook_and_command_work_like_a_builtins(work: Path) -> None:
    write_config(work)
    said = run_lich(work, "forecast")
    assert (said.returncode, said.stdout.strip()) == (0, OSLO), said.stderr
    assert run_lich(work, "forecast", "Bergen").stdout.strip() == BERGEN
    # `lich plugins`: the plugin owns its table and hook spec exactly as gateway owns its.
    listed = run_lich(work, "plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    reports = {r["plugin"]: r for r in json.loads(listed.stdout)}
    assert reports["forecast"]["tables"] == ["forecast"]
    assert reports["forecast"]["hookspecs"] == ["lich_forecast_sources"]
    assert "lich_forecast_sources" in reports["forecast_gauge"]["hooks"]
    assert reports["gateway"]["tables"] == ["gateway", "bus (kind memory)"]
    assert reports["gateway"]["hookspecs"] == ["lich_make_bus", "lich_register_gateway_adapters"]
    assert reports["approvals"]["tables"] == ["approvals"]
    # config show / init / validate cover its table as they cover the builtins'.
    shown = json.loads(run_lich(work, "config", "show", "--json").stdout)["values"]
    assert shown["forecast"] == {"value": {"city": "Oslo", "units": "metric"}, "source": "file"}
    assert shown["approvals"]["source"] == "default"
    template = run_lich(work, "config", "init", "--print").stdout
    assert "# forecast (plugin forecast): the forecast example: city and units" in template
    assert '# units = "metric"' in template
    assert "# approvals (plugin approvals): " in template
    assert run_lich(work, "config", "validate").returncode == 0

    # A bad value, a typo'd table: errors naming the $.path, from validate and a run alike.
    write_config(work, extra='units = "kelvin"\n[forcast]\ncity = "x"\n')
    bad = run_lich(work, "config", "validate")
    assert bad.returncode == 2
    assert "$.forecast.units: must be one of 'metric', 'imperial', got 'kelvin'" in bad.stderr
    assert ("$.forcast: no loaded plugin claims the table [forcast] (did you mean "
            "'forecast'?)") in bad.stderr
    refused = run_lich(work, "forecast")
    assert refused.returncode == 2
    assert "$.forecast.units" in refused.stderr
    # Not enabled: its table is an error naming no plugin (a file plugin has no entry
    # point to find it by); its hook's implementer fails to load, naming the hook.
    write_config(work, plugins=(GAUGE,))
    alone = run_lich(work, "config", "validate")
    assert alone.returncode == 2
    assert "$.forecast: no loaded plugin claims the table [forecast]" in alone.stderr
    gauge = next(r for r in json.loads(run_lich(work, "plugins", "--json").stdout)
                 if r["plugin"] == "forecast_gauge")
    assert (gauge["status"], gauge["error_type"]) == ("failed", "UnknownHook")


def test_in_chat_slash_forecast_runs_the_plugin_and_help_lists_it(work: Path) -> None:
    write_config(work)
    result = CliRunner().invoke(build_cli(), ["chat"], catch_exceptions=False,
                                input="/help\n/forecast\n/forecast Bergen\n/quit\n")
    assert result.exit_code == 0, result.stderr
    assert "/forecast [CITY]" in result.stderr
    assert OSLO in result.stderr
    assert BERGEN in result.stderr
    assert "unknown command" not in result.stderr


def agent_for(work: Path, **config: Any) -> tuple[Agent, ScriptedChat]:
    chat = ScriptedChat(["a model answer"])
    cfg = make_test_config(work, plugins=(GAUGE, FORECAST), forecast={"city": "Oslo"}, **config)
    return Agent(cfg, chat=chat), chat


async def test_in_the_tui_slash_forecast_is_a_notice(work: Path) -> None:
    from textual.widgets import Static

    from lich.tui.app import LichApp

    agent, chat = agent_for(work)
    app = LichApp(agent)

    def notices() -> list[str]:
        return [str(w.render()) for w in app.transcript.query(".notice").results(Static)]

    async with app.run_test(size=(100, 30)) as pilot:
        for text in ("/help", "/forecast Bergen", "/forecast"):
            app.prompt.value = text
            await pilot.press("enter")
        await async_wait_for(lambda: OSLO in notices(), HANG_GUARD_S, "the forecast",
                             pause=pilot.pause)
        assert BERGEN in notices()
        assert any("/forecast [CITY]" in n for n in notices())
        assert chat.calls == []  # a slash command never reaches the model
        app.prompt.value = "/exit"
        await pilot.press("enter")
        await async_wait_for(lambda: app.return_code is not None, HANG_GUARD_S, "exit",
                             pause=pilot.pause)


async def test_in_the_gateway_slash_forecast_is_the_reply(work: Path) -> None:
    from lich.agent import load_plugins
    from lich.gateway.runner import GatewayRunner

    chat = ScriptedChat(["a model answer"])
    cfg = make_test_config(work, plugins=("builtin_tools", "gateway", GAUGE, FORECAST),
                           forecast={"city": "Oslo"}, gateway={"webhook": {"port": 0}})
    runner = GatewayRunner(cfg, ["webhook"], host=load_plugins(cfg), chat=chat,
                           env={"LICH_GATEWAY_TOKEN": "t0ken"})
    await runner.start()
    try:
        url = f"http://127.0.0.1:{runner.adapter('webhook').port}/message"  # type: ignore[attr-defined]
        async with httpx.AsyncClient(timeout=30, headers={"x-lich-token": "t0ken"}) as client:
            replies = [(await client.post(url, json={"text": text, "chat_id": "c1"})).json()
                       for text in ("/forecast", "/forecast@lichbot Bergen", "hello")]
    finally:
        await runner.stop(grace_s=2)
    assert replies[0]["reply"] == OSLO
    assert replies[1]["reply"] == BERGEN
    assert replies[2]["reply"] == "a model answer"
    assert len(chat.calls) == 1  # only "hello" reached the model
