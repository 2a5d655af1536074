"""Plugins from the command line: --plugin files, broken plugins, `lich plugins`,
plugin commands, strict mode."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from rich.cells import cell_len

from lich.config import BUILTIN_PLUGINS
from lich.testing import Reply, ScriptRequest
from lich.types import ToolCall

from .conftest import json_lines, run_lich, write_config

GUARD_PLUGIN = textwrap.dedent('''
    """A single-file plugin: a tool and a guard."""
    from lich import Block, hookimpl, tool


    @tool
    def shout(text: str) -> str:
        """Say it louder."""
        return text.upper() + "!"


    @hookimpl
    def lich_register_tools(registry):
        registry.register(shout)


    @hookimpl
    def lich_before_tool_call(call):
        if call.name == "list_dir":
            return Block("listing is not allowed here")
        return None
''')

SHOUT_ALLOWED = '[approvals]\nallow = ["shout"]\n'

BROKEN_PLUGIN = "import no_such_module_for_lich_tests  # fails at import\n"

COMMAND_PLUGIN = textwrap.dedent('''
    import click
    from lich import hookimpl


    @hookimpl
    def lich_register_commands(cli):
        @cli.command("hello")
        @click.argument("name")
        def hello(name):
            """Greet NAME (from a plugin)."""
            click.echo(f"hello, {name}")

        @cli.command("chat")
        def fake_chat():
            """A plugin may not replace a builtin command."""
            click.echo("hijacked")
''')

RAISING_COMMANDS_PLUGIN = textwrap.dedent('''
    from lich import hookimpl


    @hookimpl
    def lich_register_commands(cli):
        raise RuntimeError("commands exploded")
''')


def shout_then_list(request: ScriptRequest) -> Any:
    done = request.tool_results_since_user()
    if len(done) == 0:
        return Reply(tool_calls=(ToolCall("c1", "shout", {"text": "hi"}),))
    if len(done) == 1:
        return Reply(tool_calls=(ToolCall("c2", "list_dir", {"path": "."}),))
    return Reply(" | ".join(f"{m.name}={m.content}" for m in done))


def test_plugin_file_adds_a_tool_and_blocks_a_call(
    tmp_path: Path, work: Path, scripted: Any, lich: Any, monkeypatch: Any
) -> None:
    plugin = tmp_path / "guard.py"
    plugin.write_text(GUARD_PLUGIN, encoding="utf-8")
    server = scripted(responder=shout_then_list)
    # A plugin tool that is not declared read-only asks first: this run allows it.
    write_config(work, server.base_url, extra=SHOUT_ALLOWED)
    # --plugin paths are relative to where the user stands, not to the work dir.
    monkeypatch.chdir(tmp_path)

    result = lich("--work-dir", str(work), "--plugin", "./guard.py", "--json", "go")

    assert result.exit_code == 0, result.stderr
    ends = [e for e in json_lines(result.stdout) if e["type"] == "tool_call_end"]
    assert [e["call"]["name"] for e in ends] == ["shout", "list_dir"]
    assert ends[0]["result"] == {"ok": True, "output": "HI!"}
    assert ends[1]["result"]["ok"] is False
    assert ends[1]["blocked_by"] == "guard"
    assert "blocked_by_plugin: listing is not allowed here" in ends[1]["result"]["error"]
    # The model saw both outcomes.
    seen = [m.content for m in server.requests[-1].messages if m.role == "tool"]
    assert seen[0] == "HI!"
    assert "blocked_by_plugin" in seen[1]
    assert "shout" in server.requests[0].tools


def test_plugin_file_in_a_subprocess_and_in_lich_tools(
    tmp_path: Path, work: Path, scripted: Any
) -> None:
    plugin = tmp_path / "guard.py"
    plugin.write_text(GUARD_PLUGIN, encoding="utf-8")
    server = scripted(responder=shout_then_list)
    # A plugin tool that is not declared read-only asks first: this run allows it.
    write_config(work, server.base_url, extra=SHOUT_ALLOWED)

    proc = run_lich("--plugin", str(plugin), "go", cwd=work)
    tools = run_lich("tools", "--plugin", str(plugin), "--json", cwd=work)

    assert proc.returncode == 0, proc.stderr
    assert "shout=HI!" in proc.stdout
    assert "blocked by guard" in proc.stderr
    listed = {t["name"]: t for t in json.loads(tools.stdout)}
    assert listed["shout"]["plugin"] == "guard"
    assert listed["shout"]["description"] == "Say it louder."
    assert listed["shout"]["parameters"]["properties"]["text"]["type"] == "string"


def _config_with_broken_plugin(work: Path, base_url: str) -> Path:
    (work / "broken.py").write_text(BROKEN_PLUGIN, encoding="utf-8")
    return write_config(work, base_url, plugins=[*BUILTIN_PLUGINS, "broken.py"])


def test_a_broken_plugin_does_not_stop_a_run(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted(["still working"])
    _config_with_broken_plugin(work, server.base_url)

    result = lich("hi")

    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "still working"
    assert "plugin 'broken.py' failed to load" in result.stderr
    assert "no_such_module_for_lich_tests" in result.stderr
    assert result.stderr.count("failed to load") == 1  # reported once, not per lookup


def test_lich_plugins_reports_the_broken_plugin(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted()
    _config_with_broken_plugin(work, server.base_url)

    table = lich("plugins")
    as_json = lich("plugins", "--json")

    assert table.exit_code == 0, table.stderr
    header = next(line for line in table.stdout.splitlines() if "entry" in line)
    assert re.search(r"entry\W+plugin\W+version\W+status\W+tables\W+hooks\W+error", header), header
    assert "broken.py" in table.stdout
    assert "failed" in table.stdout
    assert "ModuleNotFoundError" in table.stdout
    reports = {r["entry"]: r for r in json.loads(as_json.stdout)}
    assert reports["broken.py"]["status"] == "failed"
    assert reports["broken.py"]["phase"] == "import"
    assert reports["broken.py"]["error_type"] == "ModuleNotFoundError"
    assert "no_such_module_for_lich_tests" in reports["broken.py"]["error_message"]
    assert reports["builtin_tools"]["status"] == "loaded"
    assert "lich_register_tools" in reports["builtin_tools"]["hooks"]
    assert reports["openai_compat"]["version"]


def test_strict_plugins_turns_a_failure_into_an_error(
    work: Path, scripted: Any, lich: Any, monkeypatch: Any
) -> None:
    server = scripted(["unused"])
    _config_with_broken_plugin(work, server.base_url)

    strict = lich("--strict-plugins", "hi")
    strict_plugins = lich("plugins", "--strict-plugins")
    monkeypatch.setenv("LICH_STRICT_PLUGINS", "1")
    from_env = lich("hi")

    assert strict.exit_code == 2
    assert "broken.py" in strict.stderr
    assert "strict" in strict.stderr
    assert strict_plugins.exit_code == 2
    assert from_env.exit_code == 2
    assert server.requests == []


def test_a_broken_plugin_never_breaks_help_version_plugins_or_config(
    work: Path, scripted: Any
) -> None:
    server = scripted()
    _config_with_broken_plugin(work, server.base_url)
    (work / "raising.py").write_text(RAISING_COMMANDS_PLUGIN, encoding="utf-8")

    for args in (["--help"], ["--version"], ["plugins"], ["config", "show"],
                 ["config", "validate"], ["--plugin", "raising.py", "--help"]):
        proc = run_lich(*args, cwd=work)
        # A config naming a plugin that fails to load is not "ok" (exit 2, saying why).
        assert proc.returncode == (2 if args == ["config", "validate"] else 0), (
            args, proc.stderr)
        assert "Traceback" not in proc.stderr, args
    plugins = run_lich("--plugin", "raising.py", "plugins", "--json", cwd=work)
    # The report is shown; the exit code says a --plugin entry did not load.
    assert plugins.returncode == 2, plugins.stderr
    assert "Traceback" not in plugins.stderr
    # A --plugin path is made absolute from the current directory.
    reports = {r["plugin"]: r for r in json.loads(plugins.stdout)}
    assert reports["raising"]["entry"] == str(work / "raising.py")
    assert reports["raising"]["status"] == "failed"
    assert reports["raising"]["phase"] == "register"
    assert "commands exploded" in reports["raising"]["error_message"]


def test_plugin_commands_appear_in_help_and_run(
    tmp_path: Path, work: Path, lich: Any
) -> None:
    plugin = work / "greeter.py"
    plugin.write_text(COMMAND_PLUGIN, encoding="utf-8")

    help_text = lich("--plugin", "greeter.py", "--help")
    hello = lich("--plugin", "greeter.py", "hello", "Ada")
    chat_help = lich("--plugin", "greeter.py", "chat", "--help")

    assert help_text.exit_code == 0
    plugin_section = help_text.stdout.split("Plugin commands:")[1]
    assert "hello" in plugin_section
    assert "Greet NAME" in plugin_section
    assert hello.exit_code == 0, hello.stderr
    assert hello.stdout == "hello, Ada\n"
    assert "hijacked" not in chat_help.stdout
    assert "remembers the conversation" in chat_help.stdout


def test_a_plugin_command_named_like_a_builtin_is_reported(work: Path, lich: Any) -> None:
    (work / "greeter.py").write_text(COMMAND_PLUGIN, encoding="utf-8")

    listed = lich("--plugin", "greeter.py", "plugins", "--json")
    table = lich("--plugin", "greeter.py", "plugins")

    assert listed.exit_code == 0, listed.stderr
    (report,) = [r for r in json.loads(listed.stdout) if r["entry"].endswith("greeter.py")]
    taken = ("command_name_taken: command 'chat' not added; the builtin command 'chat' "
             "keeps the name (rename the plugin's command)")
    # The plugin still loads (its other command works); the collision is on its report.
    assert report["status"] == "loaded"
    assert report["warnings"] == [taken]
    assert f"warning: {taken}" in " ".join(table.stdout.split())


def test_plugin_commands_from_the_config(work: Path, scripted: Any, lich: Any) -> None:
    (work / "greeter.py").write_text(COMMAND_PLUGIN, encoding="utf-8")
    server = scripted()
    write_config(work, server.base_url, plugins=[*BUILTIN_PLUGINS, "greeter.py"])

    result = lich("hello", "Bob")

    assert result.exit_code == 0, result.stderr
    assert result.stdout == "hello, Bob\n"


def test_the_documented_agent_command_runs_through_the_one_assembly(
    work: Path, scripted: Any, lich: Any
) -> None:
    """docs/plugins.md's command that assembles an agent, as written there."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "plugins.md").read_text("utf-8")
    code = docs.split("plugin host and an agent", 1)[1].split("```python\n", 1)[1]
    (work / "ask.py").write_text(code.split("```", 1)[0], encoding="utf-8")
    server = scripted(["because."])
    write_config(work, server.base_url, plugins=[*BUILTIN_PLUGINS, "ask.py"])

    flags_after = lich("ask", "why?", "--max-turns", "3")
    (work / ".lich" / "config.toml").write_text("max_turns = 0\n", encoding="utf-8")
    broken = lich("--plugin", str(work / "ask.py"), "ask", "why?")

    assert flags_after.exit_code == 0, flags_after.stderr
    assert flags_after.stdout == "because.\n"
    assert broken.exit_code == 2
    assert "lich: error: " in broken.stderr
    assert "$.max_turns" in broken.stderr


def test_plugins_available_reads_metadata_without_importing(work: Path) -> None:
    code = textwrap.dedent('''
        import json, sys
        from lich.cli import main
        try:
            main(["plugins", "available", "--json"])
        except SystemExit as exc:
            assert exc.code == 0, exc.code
        loaded = [m for m in sys.modules if m.startswith(("lich_providers", "lich_builtin_tools"))]
        print(json.dumps(loaded), file=sys.stderr)
    ''')
    (work / ".lich").mkdir()
    (work / ".lich" / "config.toml").write_text('plugins = ["builtin_tools"]\n',
                                                encoding="utf-8")

    proc = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True,
                          text=True, timeout=60)

    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    for name in BUILTIN_PLUGINS:
        assert name in rows
        assert rows[name]["distribution"] == "lich-agent"
    assert rows["builtin_tools"]["enabled"] is True
    assert rows["anthropic"]["enabled"] is False
    assert rows["openai_compat"]["value"] == "lich_providers.openai_compat"
    assert json.loads(proc.stderr.strip().splitlines()[-1]) == []


def test_plugins_available_table(work: Path, lich: Any) -> None:
    result = lich("plugins", "available")

    assert result.exit_code == 0
    assert "openai_compat" in result.stdout
    assert "yes" in result.stdout


@pytest.mark.parametrize("columns", ["40", "80", "200"])
def test_help_with_a_broken_config_still_works(
    work: Path, lich: Any, monkeypatch: pytest.MonkeyPatch, columns: str
) -> None:
    # The message names a file whose path is as long as the temp dir makes it: at no
    # terminal width may --help wrap it (it used to, whenever the path ended near the edge).
    monkeypatch.setenv("COLUMNS", columns)
    config = work / ".lich" / "config.toml"
    config.parent.mkdir()
    config.write_text("nonsense = 1\n", encoding="utf-8")

    result = lich("--help")

    assert result.exit_code == 0
    assert "chat" in result.stdout
    assert (f"  unavailable: ConfigError: {config}: $.nonsense: unknown key (line 1)\n"
            in result.stdout)


def test_help_keeps_each_problem_of_a_broken_config_on_its_own_line(
    work: Path, lich: Any
) -> None:
    config = work / ".lich" / "config.toml"
    config.parent.mkdir()
    config.write_text("absurd = 1\nfoo = 2\n", encoding="utf-8")

    result = lich("--help")

    assert result.exit_code == 0
    section = result.stdout.split("Plugin commands:\n", 1)[1]
    assert section.startswith(
        f"  unavailable: ConfigError: {config}: invalid configuration:\n"
        "    $.absurd: unknown key (line 1)\n"
        "    $.foo: unknown key (line 2)\n"
    )


def test_piped_plugins_table_keeps_long_paths_and_errors_whole(work: Path, lich: Any) -> None:
    # Piped output is for grep and scripts: a long entry path or error message must not be
    # wrapped or cut by the table, whatever the terminal width would have been.
    deep = work.joinpath(*(["a_rather_long_directory_name"] * 8))
    deep.mkdir(parents=True)
    plugin = deep / "explodes_at_import.py"
    plugin.write_text("raise RuntimeError('boom ' + 'x' * 150)\n", encoding="utf-8")

    result = lich("--plugin", str(plugin), "plugins")

    assert result.exit_code == 2, result.output  # shown, but a --plugin entry failed
    assert str(plugin) in result.output
    assert "RuntimeError: boom " + "x" * 150 in result.output


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def on_a_terminal(monkeypatch: pytest.MonkeyPatch, columns: int) -> None:
    """Make rich take stdout for a ``columns``-wide terminal (without colours)."""
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")  # a "dumb" terminal is 80 wide, always
    monkeypatch.setenv("COLUMNS", str(columns))


def screen_lines(output: str) -> list[str]:
    return [ANSI.sub("", line) for line in output.splitlines()]


def _config_with_exploding_plugin(work: Path, name: str, message: str) -> None:
    (work / name).write_text(f"raise RuntimeError({message!r})\n", encoding="utf-8")
    (work / ".lich").mkdir()
    (work / ".lich" / "config.toml").write_text(
        f'plugins = ["builtin_tools", "{name}"]\n', encoding="utf-8")


@pytest.mark.parametrize("columns", [40, 80, 200])
def test_plugins_table_on_a_terminal_never_wraps_a_path_or_an_error(
    work: Path, lich: Any, monkeypatch: pytest.MonkeyPatch, columns: int
) -> None:
    on_a_terminal(monkeypatch, columns)
    deep = work.joinpath(*(["a_rather_long_directory_name"] * 3))
    deep.mkdir(parents=True)
    plugin = deep / "explodes_at_import.py"
    plugin.write_text("raise RuntimeError('boom ' + 'x' * 100)\n", encoding="utf-8")

    result = lich("--plugin", str(plugin), "plugins")

    assert result.exit_code == 2, result.output  # shown, but a --plugin entry failed
    lines = screen_lines(result.stdout)
    assert any(line.endswith(str(plugin)) for line in lines), lines
    assert any(line.endswith("import: RuntimeError: boom " + "x" * 100) for line in lines)


def test_plugins_table_is_a_table_when_it_fits_and_records_when_it_does_not(
    work: Path, lich: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _config_with_exploding_plugin(work, "boom.py", "boom")

    on_a_terminal(monkeypatch, 150)
    wide = screen_lines(lich("plugins").stdout)
    on_a_terminal(monkeypatch, 40)
    narrow = screen_lines(lich("plugins").stdout)

    assert re.search(r"entry\W+plugin\W+version\W+status\W+tables\W+hooks\W+error", wide[1]), wide
    assert all(len(line) <= 150 for line in wide)
    assert any(re.search(r"boom\.py\W+boom\W+failed\W+import: RuntimeError: boom\W", line)
               for line in wide), wide
    assert narrow[:4] == ["entry: builtin_tools", "  plugin: builtin_tools",
                          narrow[2], "  status: loaded"]
    assert narrow[2].startswith("  version: ")
    failed = narrow[narrow.index("entry: boom.py"):]
    assert failed == ["entry: boom.py", "  plugin: boom", "  status: failed",
                      "  error: import: RuntimeError: boom",
                      "1 of 2 plugin entries did not load."]


@pytest.mark.parametrize(("columns", "as_table"), [(40, False), (200, True)])
def test_plugins_table_measures_wide_characters_in_terminal_cells(
    work: Path, lich: Any, monkeypatch: pytest.MonkeyPatch, columns: int, as_table: bool
) -> None:
    # CJK characters and most emoji take two terminal cells: a table measured in
    # characters would run past the edge, and the terminal would cut or fold it.
    message = "插件炸了 💥 " + "错误" * 12
    _config_with_exploding_plugin(work, "插件.py", message)
    on_a_terminal(monkeypatch, columns)

    lines = screen_lines(lich("plugins").stdout)

    if as_table:
        assert any(re.match(r"┃ entry\W+plugin", line) for line in lines), lines
        assert all(cell_len(line) <= columns for line in lines), lines
        assert any(f"│ import: RuntimeError: {message} │" in line for line in lines), lines
    else:
        assert "entry: 插件.py" in lines
        assert f"  error: import: RuntimeError: {message}" in lines


def test_config_show_on_a_narrow_terminal_keeps_the_file_path_whole(
    work: Path, lich: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = work / ".lich" / "config.toml"
    config.parent.mkdir()
    config.write_text('session_dir = "' + "s" * 60 + '"\n', encoding="utf-8")
    on_a_terminal(monkeypatch, 40)

    lines = screen_lines(lich("config", "show").stdout)

    assert f"config file: {config}" in lines
    assert any(line.endswith(str(work / ("s" * 60))) for line in lines), lines
