"""A plugin named with ``--plugin`` must load: a run, ``lich chat`` and the inspection
commands exit 2 with its load report instead of going on without it. Plugins from the
config keep warn-and-continue."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

from lich.config import BUILTIN_PLUGINS

from .conftest import run_lich, write_config

SYNTAX_ERROR = "def lich_before_tool_call(call)\n    return None\n"  # the colon is missing

RAISES_AT_REGISTRATION = textwrap.dedent('''
    from lich import hookimpl


    @hookimpl
    def lich_register_tools(registry):
        raise RuntimeError("tools exploded")
''')

RAISES_IN_CHECK_CONFIG = textwrap.dedent('''
    from lich import hookimpl


    @hookimpl
    def lich_check_config(config):
        raise RuntimeError("check exploded")
''')


def test_a_plugin_with_a_syntax_error_stops_the_run_before_any_model_request(
    work: Path, scripted: Any, lich: Any
) -> None:
    server = scripted(["must not be asked"])
    write_config(work, server.base_url)
    (work / "guard.py").write_text(SYNTAX_ERROR, encoding="utf-8")

    result = lich("--plugin", "./guard.py", "delete everything")

    assert result.exit_code == 2, result.output
    assert "lich: error: a plugin given with --plugin did not load" in result.stderr
    # The load report: the entry (made absolute), the phase, the error and where it is.
    assert f"{work / 'guard.py'}: failed: import: SyntaxError:" in result.stderr
    assert "guard.py:1" in result.stderr
    assert server.requests == []


def test_a_plugin_failing_at_registration_stops_the_run(
    work: Path, scripted: Any, lich: Any
) -> None:
    server = scripted(["must not be asked"])
    write_config(work, server.base_url)
    (work / "tools_boom.py").write_text(RAISES_AT_REGISTRATION, encoding="utf-8")
    (work / "check_boom.py").write_text(RAISES_IN_CHECK_CONFIG, encoding="utf-8")

    registration = lich("--plugin", "tools_boom.py", "go")
    check = lich("--plugin", "check_boom.py", "go")
    chat = lich("chat", "--plugin", "tools_boom.py", input="hello\n")

    assert registration.exit_code == 2, registration.output
    assert "register: RuntimeError: tools exploded" in registration.stderr
    assert check.exit_code == 2, check.output
    assert "validate: RuntimeError: check exploded" in check.stderr
    assert chat.exit_code == 2, chat.output
    assert "tools exploded" in chat.stderr
    assert server.requests == []


def test_a_missing_plugin_file_is_named(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted(["must not be asked"])
    write_config(work, server.base_url)

    result = lich("--plugin", "./gaurd.py", "go")

    assert result.exit_code == 2
    assert "./gaurd.py: failed: resolve: FileNotFoundError: no plugin file at" in result.stderr
    assert server.requests == []


def test_the_same_plugin_from_the_config_only_warns(
    work: Path, scripted: Any, lich: Any
) -> None:
    server = scripted(["still working"])
    (work / "guard.py").write_text(SYNTAX_ERROR, encoding="utf-8")
    write_config(work, server.base_url, plugins=[*BUILTIN_PLUGINS, "guard.py"])

    result = lich("go")
    strict = lich("--strict-plugins", "go")

    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "still working"
    assert "lich: warning: plugin 'guard.py' failed to load" in result.stderr
    assert strict.exit_code == 2
    assert len(server.requests) == 1


def test_inspection_commands_show_the_report_and_exit_2(
    work: Path, scripted: Any, lich: Any
) -> None:
    server = scripted()
    write_config(work, server.base_url)
    (work / "guard.py").write_text(SYNTAX_ERROR, encoding="utf-8")
    entry = str(work / "guard.py")

    plugins = lich("plugins", "--plugin", "guard.py", "--json")
    validate = lich("config", "validate", "--plugin", "guard.py")
    tools = lich("tools", "--plugin", "guard.py")

    assert plugins.exit_code == 2
    reports = {r["entry"]: r for r in json.loads(plugins.stdout)}
    assert reports[entry]["status"] == "failed"
    assert reports[entry]["error_type"] == "SyntaxError"
    assert validate.exit_code == 2
    assert f"plugin {entry!r}: failed: import: SyntaxError" in validate.stderr
    assert tools.exit_code == 2
    assert "a plugin given with --plugin did not load" in tools.stderr


def test_inspection_commands_run_the_settings_checks_a_run_runs(
    work: Path, scripted: Any, lich: Any
) -> None:
    """A plugin whose lich_check_config fails is failed in `lich plugins` and
    `lich tools` too, as every run would refuse it."""
    server = scripted()
    write_config(work, server.base_url)
    (work / "check_boom.py").write_text(
        RAISES_IN_CHECK_CONFIG + "\n\n@hookimpl\ndef lich_register_tools(registry):\n"
        "    from lich import Tool, ToolResult\n"
        "    registry.register(Tool('shout', 'd', {'type': 'object'},"
        " lambda a, c: ToolResult('x')))\n",
        encoding="utf-8")
    entry = str(work / "check_boom.py")

    plugins = lich("plugins", "--plugin", "check_boom.py", "--json")
    tools = lich("tools", "--plugin", "check_boom.py", "--json")

    reports = {r["entry"]: r for r in json.loads(plugins.stdout)}
    assert (reports[entry]["status"], reports[entry]["phase"]) == ("failed", "validate")
    assert plugins.exit_code == 2
    assert tools.exit_code == 2
    assert "shout" not in tools.stdout


def test_tools_json_shows_the_limits_a_run_uses(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted()
    write_config(work, server.base_url,
                 extra="[tools.list_dir]\ntimeout_s = 5\nmax_output_chars = 100\n"
                       "runs_inline = true\n"
                       "[tools.grep_files]\nruns_inline = true\n")

    result = lich("tools", "--json")

    assert result.exit_code == 0, result.stderr
    rows = {t["name"]: t for t in json.loads(result.stdout)}
    row = rows["list_dir"]
    assert (row["timeout_s"], row["max_output_chars"], row["runs_inline"]) == (5.0, 100, True)
    assert rows["read_file"]["runs_inline"] is False  # a plain tool, in a worker thread
    assert rows["grep_files"]["runs_inline"] is False  # async: on the loop as a coroutine


def test_a_bad_runs_inline_setting_is_a_config_error(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted()
    write_config(work, server.base_url, extra="[tools.list_dir]\nruns_inline = \"yes\"\n")

    result = lich("tools", "--json")

    assert result.exit_code == 2
    assert "$.tools.list_dir.runs_inline: expected true or false, got string" in result.stderr


def test_a_plugin_that_loads_changes_nothing(work: Path, scripted: Any) -> None:
    server = scripted(["done"])
    write_config(work, server.base_url)
    (work / "fine.py").write_text("from lich import hookimpl\n", encoding="utf-8")

    run = run_lich("--plugin", "fine.py", "go", cwd=work)
    plugins = run_lich("plugins", "--plugin", "fine.py", cwd=work)

    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "done"
    assert plugins.returncode == 0, plugins.stderr


def test_a_plugin_both_in_the_config_and_on_the_command_line_is_loaded_once(
    work: Path, scripted: Any, lich: Any
) -> None:
    server = scripted(["done"])
    (work / "fine.py").write_text("from lich import hookimpl\n", encoding="utf-8")
    (work / "other").mkdir()
    (work / "other" / "fine.py").write_text("from lich import hookimpl\n", encoding="utf-8")
    write_config(work, server.base_url, plugins=["+fine.py"])

    same_file = lich("--plugin", "./fine.py", "go")
    same_name = lich("--plugin", "other/fine.py", "go")

    assert same_file.exit_code == 0, same_file.stderr
    # Another file whose plugin name is taken did not load: that is the error.
    assert same_name.exit_code == 2
    assert "skipped: register: DuplicatePlugin" in same_name.stderr
    assert len(server.requests) == 1


def test_the_gateway_refuses_a_plugin_failing_its_check_before_it_listens(
    work: Path, scripted: Any, lich: Any
) -> None:
    """The gateway builds its agents itself, later: the check must not wait for them."""
    server = scripted(["must not be asked"])
    write_config(work, server.base_url)
    (work / "check_boom.py").write_text(RAISES_IN_CHECK_CONFIG, encoding="utf-8")

    result = lich("--plugin", "check_boom.py", "gateway", "webhook", "--port", "0")

    assert result.exit_code == 2, result.output
    assert "a plugin given with --plugin did not load" in result.stderr
    assert "validate: RuntimeError: check exploded" in result.stderr
    assert server.requests == []


def test_the_gateway_refuses_a_bad_plugin_table_before_it_listens(
    work: Path, scripted: Any, lich: Any
) -> None:
    server = scripted(["must not be asked"])
    write_config(work, server.base_url,
                 extra="[plugin_settings.failover]\nmax_attempts = 0\n")

    result = lich("gateway", "webhook", "--port", "0")

    assert result.exit_code == 2, result.output
    assert "$.plugin_settings.failover.max_attempts: must be at least 1" in result.stderr
