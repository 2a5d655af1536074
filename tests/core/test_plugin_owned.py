"""Plugins own their hook specs (``lich_add_hookspecs``), their config tables
(``lich_register_config_tables``) and slash commands (``lich_register_slash_commands``):
the builtins exactly as a third-party plugin."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import attrs
import pytest

from lich.config import ConfigError, load_config
from lich.plugins import PluginHost
from lich.settings import ConfigTables, at_least, setting
from lich.slash import SlashCommand, SlashContext, SlashRegistry, run_slash_command
from lich.testing import make_test_config

SPEC_OWNER = '''
from lich.hooks import hookimpl, hookspec


class Specs:
    @hookspec
    def lich_weather_sources(self, registry):
        """Add weather sources: ``registry.append(name)``."""


@hookimpl
def lich_add_hookspecs(host):
    host.add_hookspecs(Specs)
'''

SOURCE = '''
def lich_weather_sources(registry):
    registry.append("rain gauge")
'''


def write(path: Path, text: str) -> str:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return str(path)


def test_hook_lich_add_hookspecs(tmp_path: Path) -> None:
    owner = write(tmp_path / "weather.py", SPEC_OWNER)
    source = write(tmp_path / "gauge.py", SOURCE)
    wrong = write(tmp_path / "wrong.py", "def lich_weather_sources(registry, city): pass\n")
    stray = write(tmp_path / "stray.py", "def lich_weather_sourcez(registry): pass\n")
    host = PluginHost(work_dir=tmp_path)
    # The implementation listed before the plugin that specifies its hook still loads:
    # unknown hooks are judged once every entry had its chance to add specs.
    reports = host.load([source, wrong, owner, stray])
    by_name = {r.plugin: r for r in reports}
    assert by_name["gauge"].ok, by_name["gauge"]
    assert by_name["weather"].hookspecs == ("lich_weather_sources",)
    assert host.spec_owners == {"lich_weather_sources": "weather"}
    assert (by_name["wrong"].status, by_name["wrong"].phase) == ("failed", "validate")
    assert "'city' not an argument of lich_weather_sources, which takes (registry)" in (
        by_name["wrong"].error_message or "")
    stray_report = by_name["stray"]
    assert (stray_report.status, stray_report.phase, stray_report.error_type) == (
        "failed", "validate", "UnknownHook")
    assert "lich_weather_sourcez (did you mean 'lich_weather_sources'?)" in (
        stray_report.error_message or "")
    sources: list[str] = []
    host.pm.hook.lich_weather_sources(registry=sources)
    assert sources == ["rain gauge"]  # wrong.py and stray.py left nothing behind

    # A spec that exists already fails the plugin adding it (register), whole.
    again = write(tmp_path / "again.py", SPEC_OWNER.replace("Specs)", "Specs)  # twice"))
    (report,) = host.load([again])
    assert (report.status, report.phase) == ("failed", "register")
    assert "lich_weather_sources: specified already (by weather)" in (report.error_message or "")
    # Without the owner loaded, its hook is unknown, naming that a plugin's hooks need it.
    alone = PluginHost(work_dir=tmp_path)
    (lone,) = alone.load([source])
    assert lone.error_type == "UnknownHook"
    assert "a plugin's own hooks need that plugin loaded" in (lone.error_message or "")
    # The gateway's hooks are the gateway's own: not in a host without it.
    core = PluginHost(work_dir=tmp_path)
    assert not hasattr(core.pm.hook, "lich_make_bus")
    core.load(["gateway"])
    assert core.reports[0].hookspecs == ("lich_make_bus", "lich_register_gateway_adapters")


@attrs.frozen
class GreeterSettings:
    greeting: str = "hello"
    repeat: int = setting(1, check=at_least(1))


class Greeter:
    def lich_register_config_tables(self, tables: ConfigTables) -> None:
        tables.claim("greeter", GreeterSettings, help="how to greet")


class Squatter:
    def lich_register_config_tables(self, tables: ConfigTables) -> None:
        tables.claim("greeter", GreeterSettings)  # the first claim keeps the table


def test_hook_lich_register_config_tables(tmp_path: Path) -> None:
    host = PluginHost(work_dir=tmp_path)
    host.register_object(Greeter(), "greeter")
    host.register_object(Squatter(), "squatter")
    tables = host.config_tables()
    assert tables.claim_for("greeter", {}).plugin == "squatter"  # registered last: asked first
    (greeter,) = [r for r in host.reports if r.plugin == "greeter"]
    assert greeter.warnings == (
        "duplicate_config_table: greeter (already registered by squatter); skipped",)
    assert greeter.tables == ()
    assert [r.tables for r in host.reports if r.plugin == "squatter"] == [("greeter",)]

    fine = make_test_config(tmp_path, greeter={"repeat": 2})
    assert host.check_config(fine) == []
    bad = make_test_config(tmp_path, greeter={"repeat": 0, "greting": "hi"}, gretter={"a": 1},
                           plugin_settings={"old_style": {"anything": 1}})
    problems = host.check_config(bad)
    assert "$.greeter.repeat: must be at least 1, got 0" in problems
    assert any(p.startswith("$.greeter.greting: unknown key") for p in problems), problems
    assert ("$.gretter: no loaded plugin claims the table [gretter] (did you mean 'greeter'?)"
            in problems)
    # [plugin_settings.x] needs no claim for one release (it never had one).
    assert not any("old_style" in p for p in problems)
    # The core's own table, claimed for its kind as a store plugin claims its own.
    store = make_test_config(tmp_path, session_store={"kind": "jsonl", "dsn": "x"})
    assert host.check_config(store) == [
        "$.session_store.dsn: the jsonl store takes no settings (its directory is session_dir)"]


def test_a_table_of_an_installed_plugin_that_is_not_enabled_names_it_without_importing_it(
        tmp_path: Path) -> None:
    # In a process of its own: whether lich.otel / lich.nats_bus were ever imported.
    script = textwrap.dedent(f"""
        import json, sys
        from lich.plugins import PluginHost
        from lich.testing import make_test_config
        host = PluginHost(work_dir={str(tmp_path)!r})
        host.load(["gateway"])
        config = make_test_config({str(tmp_path)!r}, otel={{"exporter": "none"}},
                                  bus={{"kind": "nats"}})
        print(json.dumps([host.check_config(config),
                          [m for m in sys.modules if m.startswith(("lich.otel", "lich.nats"))]]))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True)
    problems, imported = json.loads(out.stdout)
    assert imported == []
    assert ("$.otel: no loaded plugin claims the table [otel] (the installed plugin 'otel' "
            "claims it, and is not enabled: add \"otel\" to plugins, or \"+otel\")") in problems
    assert ("$.bus.kind: no loaded plugin claims [bus] kind 'nats' (claimed kinds: 'memory') "
            "(the installed plugin 'nats' claims it, and is not enabled: add \"nats\" to "
            "plugins, or \"+nats\")") in problems


def test_plugin_tables_are_split_from_the_core_keys_and_plugin_settings_still_read(
        tmp_path: Path) -> None:
    loaded = load_config(work_dir=tmp_path, data={
        "max_turns": 3, "greeter": {"repeat": 2}, "plugin_settings": {"old": {"k": 1}}})
    config = loaded.config
    assert config.max_turns == 3
    assert dict(config.tables) == {"greeter": {"repeat": 2}, "old": {"k": 1}}
    assert config.legacy_tables == frozenset({"old"})
    assert config.table("old") == {"k": 1}
    assert config.plugin_settings.get("old") == {"k": 1}  # the deprecated spelling
    assert config.table("missing") == {}
    assert len(loaded.notices) == 1
    assert loaded.notices[0].startswith("$.plugin_settings: deprecated")
    assert "write [old] instead of [plugin_settings.old]" in loaded.notices[0]
    # The same table both ways, a plain unknown key, a non-table: errors at load.
    with pytest.raises(ConfigError) as both:
        load_config(work_dir=tmp_path, data={"old": {}, "plugin_settings": {"old": {}}})
    assert "$.plugin_settings.old: [old] is given too; keep one" in str(both.value)
    with pytest.raises(ConfigError, match=r"max_turn"):
        load_config(work_dir=tmp_path, data={"max_turn": 3})
    with pytest.raises(ConfigError, match=r"\$\.plugin_settings\.x: expected a table"):
        load_config(work_dir=tmp_path, data={"plugin_settings": {"x": 3}})
    # "tables" is no key of the file: a table so named is a plugin's like any other.
    odd = load_config(work_dir=tmp_path, data={"tables": {"a": 1}}).config
    assert dict(odd.tables) == {"tables": {"a": 1}}


class Weather:
    def lich_register_slash_commands(self, registry: SlashRegistry) -> None:
        async def weather(context: SlashContext) -> str:
            await asyncio.sleep(0)
            return f"sunny in {context.args or 'here'} ({context.front_end})"

        registry.register(SlashCommand("weather", "say the weather", arg_hint="[CITY]",
                                       run=weather))
        registry.register(SlashCommand("help", "mine", run=lambda context: "no"))


class Runless:
    def lich_register_slash_commands(self, registry: SlashRegistry) -> None:
        registry.register(SlashCommand("norun", "nothing to run"))


async def test_hook_lich_register_slash_commands(tmp_path: Path) -> None:
    host = PluginHost(work_dir=tmp_path)
    host.register_object(Weather(), "weather")
    host.register_object(Runless(), "runless")
    table = host.slash_commands()
    names = [c.name for c in table.commands]
    # The front ends' own commands first (they register through the same hook), then
    # the plugin's; its /help is left out, and a command without run fails its plugin.
    assert names[:8] == ["help", "model", "usage", "clear", "sessions", "resume", "new", "exit"]
    assert "weather" in names
    assert "norun" not in names
    (weather,) = [r for r in host.reports if r.plugin == "weather"]
    assert weather.warnings == (
        "duplicate_slash_command: help (already registered by lich); skipped",)
    (runless,) = [r for r in host.reports if r.plugin == "runless"]
    assert (runless.status, runless.phase) == ("failed", "register")
    for front_end in ("chat", "tui", "gateway"):
        parsed = table.parse("/weather Oslo", front_end)
        assert parsed is not None
        assert parsed.command is not None
        assert parsed.command.run is not None
        context = SlashContext(parsed.args, front_end)
        assert await run_slash_command(parsed.command, context) == (
            f"sunny in Oslo ({front_end})")
        assert any("/weather [CITY]" in line for line in table.help_lines(front_end))
    # One /new for every front end (the gateway's too), registered once, no clash.
    assert table.get("new", "gateway") is table.get("new", "chat") is not None
    assert [c.name for c in table.for_front_end("gateway")][:4] == [
        "new", "start", "approve", "deny"]
    # The gateway's own commands are its own: not offered in chat.
    chat = table.parse("/approve x", "chat")
    assert chat is not None
    assert chat.error == (
        "/approve is not available in lich chat (only in the gateway)")


def test_config_validate_and_show_start_no_mcp_server(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from lich.cli import build_cli

    work = tmp_path / "work"
    (work / ".lich").mkdir(parents=True)
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / ".config"))
    started = work / "started"
    spy = work / "spy.py"
    spy.write_text(f"import pathlib\npathlib.Path({str(started)!r}).write_text('x')\n",
                   encoding="utf-8")
    (work / ".lich" / "config.toml").write_text(
        'tools_enabled = ["read_file", "mcp__spy__echo"]\n'
        "[mcp.servers.spy]\n"
        f"command = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(spy))}]\n", encoding="utf-8")
    validate = CliRunner().invoke(build_cli(), ["config", "validate"], catch_exceptions=False)
    show = CliRunner().invoke(build_cli(), ["config", "show", "--json"], catch_exceptions=False)
    assert validate.exit_code == 0, validate.stderr
    assert ("$.tools_enabled: no loaded plugin provides mcp__spy__echo (unless among the "
            "tools of the MCP servers spy (not started here))") in validate.stderr
    assert show.exit_code == 0, show.stderr
    assert json.loads(show.stdout)["values"]["mcp"]["value"]["servers"]["spy"]["args"] == [
        str(spy)]
    assert not started.exists()  # no process was started for either


def test_config_show_masks_secrets_in_plugin_tables_but_not_their_limits() -> None:
    from lich.cli.config import mask_secrets

    shown = mask_secrets({"webhook": {"max_unauthenticated": 32, "token_env": "T"},
                          "headers": {"Authorization": "Bearer x"}, "api_key": "k"})
    assert shown == {"webhook": {"max_unauthenticated": 32, "token_env": "T"},
                     "headers": {"Authorization": "***"}, "api_key": "***"}
