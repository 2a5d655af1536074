"""`lich config`, `lich tools`, `lich sessions`, `lich tui`."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from lich.config import load_config

from .conftest import write_config

# ---------------------------------------------------------------------- config


def test_config_init_writes_a_template_that_loads(work: Path, lich: Any) -> None:
    result = lich("config", "init")

    path = work / ".lich" / "config.toml"
    assert result.exit_code == 0, result.stderr
    assert str(path) in result.stdout
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# lich configuration")
    loaded = load_config(work_dir=work)
    assert loaded.file == str(path)
    # No model given: the provider stays commented out, so lich says "no model configured".
    assert loaded.config.providers == ()
    again = lich("config", "init")
    assert again.exit_code == 2
    assert "exists already" in again.stderr
    assert lich("config", "init", "--force").exit_code == 0


def _uncomment(text: str) -> str:
    setting = re.compile(r"^# (\[\[?[a-z_.]+\]\]?$|[a-z_]+ = )")
    return "\n".join(line[2:] if setting.match(line) else line for line in text.splitlines())


def test_every_commented_setting_in_the_template_is_valid(work: Path, lich: Any) -> None:
    """The template documents real keys: uncommented, every line must still load."""
    result = lich("config", "init", "--print")
    assert result.exit_code == 0
    uncommented = _uncomment(result.stdout)
    assert "\nmax_turns = 25" in uncommented
    assert "\n[tools.terminal]" in uncommented
    path = work / "all.toml"
    path.write_text(uncommented, encoding="utf-8")

    config = load_config(work_dir=work, config_path=str(path)).config

    assert [p.name for p in config.providers] == ["main", "fallback"]
    assert config.tools["terminal"]["timeout_s"] == 300
    # Each plugin table, with its defaults, as its plugin claims it.
    assert config.table("approvals") == {"mode": "ask", "allow": [], "ask": [], "deny": []}
    assert config.table("session_store") == {"kind": "jsonl"}
    assert config.table("gateway")["webhook"]["port"] == 8089
    assert config.table("failover")["max_attempts"] == 3


def test_config_init_fills_in_the_model_from_flags(work: Path, lich: Any) -> None:
    result = lich("config", "init", "--model", "llama3.1", "--provider-kind", "ollama")

    assert result.exit_code == 0, result.stderr
    config = load_config(work_dir=work, env={}, trust=True).config
    assert config.providers[0].model == "llama3.1"
    assert config.providers[0].kind == "ollama"
    assert config.providers[0].base_url == "http://localhost:11434"
    # The provider is filled in: the last line does not ask for it again.
    assert result.stderr.strip().splitlines()[-1] == (
        'next: `lich config validate`, then `lich "hello"`.')


def test_config_init_without_a_model_asks_for_a_provider(work: Path, lich: Any) -> None:
    result = lich("config", "init")

    assert result.exit_code == 0, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("next: fill in a provider")


def test_config_init_user(work: Path, lich: Any, tmp_path: Path) -> None:
    result = lich("config", "init", "--user")

    assert result.exit_code == 0, result.stderr
    written = Path(result.stdout.split("wrote ", 1)[1].strip())
    assert written.is_file()
    assert str(tmp_path / "home") in str(written)


def test_config_show_names_every_source_and_hides_secrets(
    work: Path, lich: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = work / ".lich" / "config.toml"
    config.parent.mkdir()
    config.write_text(
        'max_turns = 7\n[plugin_settings.audit]\ntoken = "plugin-secret"\n'
        '[[providers]]\nkind = "openai_compat"\nname = "main"\nmodel = "m"\n'
        'api_key_env = "MY_KEY"\nheaders = {Authorization = "Bearer header-secret"}\n',
        encoding="utf-8",
    )
    monkeypatch.setenv("MY_KEY", "sk-very-secret")
    monkeypatch.setenv("LICH_LOG_LEVEL", "debug")

    table = lich("config", "show", "--system-prompt", "be brief")
    as_json = lich("--json", "config", "show", "--system-prompt", "be brief")

    assert table.exit_code == 0, table.stderr
    data = json.loads(as_json.stdout)
    values = data["values"]
    assert data["file"] == str(config)
    assert values["max_turns"] == {"value": 7, "source": "file"}
    assert values["log_level"] == {"value": "debug", "source": "env"}
    assert values["system_prompt"] == {"value": "be brief", "source": "flag"}
    assert values["temperature"] == {"value": None, "source": "default"}
    provider = values["providers"]["value"][0]
    assert provider["api_key_env"] == "MY_KEY"
    assert provider["api_key_set"] is True
    assert provider["headers"] == {"Authorization": "***"}
    # The deprecated [plugin_settings.audit] is shown as the table it is read as.
    assert values["audit"] == {"value": {"token": "***"},
                               "source": "file ([plugin_settings], deprecated)"}
    for out in (table.stdout, as_json.stdout):
        for secret in ("sk-very-secret", "header-secret", "plugin-secret"):
            assert secret not in out
    assert "MY_KEY (set)" in table.stdout
    assert re.search(r"max_turns\s+7\s+file", table.stdout)
    assert re.search(r"system_prompt\s+be brief\s+flag", table.stdout)


def test_config_show_model_from_env(work: Path, lich: Any,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LICH_MODEL", "env-model")

    data = json.loads(lich("config", "show", "--json").stdout)

    assert data["file"] is None
    assert data["values"]["providers"]["source"] == "env"
    assert data["values"]["providers"]["value"][0]["model"] == "env-model"


def test_config_path(work: Path, lich: Any) -> None:
    missing = lich("config", "path")
    lich("config", "init")
    found = lich("config", "path")
    explicit = lich("config", "path", "--config", str(work / "nope.toml"))

    assert missing.exit_code == 1
    assert str(work / ".lich" / "config.toml") in missing.stderr
    assert found.exit_code == 0
    assert found.stdout.strip() == str(work / ".lich" / "config.toml")
    assert explicit.exit_code == 2
    assert "config not found" in explicit.stderr


def test_config_validate(work: Path, lich: Any, scripted: Any) -> None:
    server = scripted()
    path = write_config(work, server.base_url)
    ok = lich("config", "validate")

    path.write_text('tools_enabled = ["read_file", "no_such_tool"]\n'
                    '[[providers]]\nkind = "telepathy"\nname = "a"\nmodel = "m"\n',
                    encoding="utf-8")
    unknown_kind = lich("config", "validate")

    path.write_text('max_turns = 0\n', encoding="utf-8")
    invalid = lich("config", "validate")
    path.write_text('colour = "blue"\n', encoding="utf-8")
    unknown_key = lich("config", "validate")

    assert ok.exit_code == 0, ok.stderr
    assert ok.stdout.startswith("ok: ")
    assert unknown_kind.exit_code == 2
    assert f"{path}: $.providers[0].kind" in unknown_kind.stderr
    assert "telepathy" in unknown_kind.stderr
    assert "$.tools_enabled: no loaded plugin provides no_such_tool" in unknown_kind.stderr
    assert invalid.exit_code == 2
    assert str(path) in invalid.stderr
    assert "$.max_turns" in invalid.stderr
    assert unknown_key.exit_code == 2
    assert f"{path}: $.colour: unknown key" in unknown_key.stderr


def test_config_validate_gives_the_line_of_each_problem(
    work: Path, lich: Any, scripted: Any
) -> None:
    server = scripted(["never"])
    path = write_config(work, server.base_url, extra=(
        "[plugin_settings.failover]\nmax_attempts = 0\n"))
    text = path.read_text(encoding="utf-8")
    path.write_text(text + "\n[[providers]]\nkind = \"ollama\"\nmodel = \"m\"\n",
                    encoding="utf-8")
    lines = path.read_text(encoding="utf-8").splitlines()
    settings_line = lines.index("max_attempts = 0") + 1
    second = [i for i, line in enumerate(lines, 1) if line == "[[providers]]"][1]

    validate = lich("config", "validate")
    run = lich("run", "hello")

    assert validate.exit_code == 2
    # The $.path and the line: a missing key points at its table's header.
    assert (f"{path}: $.providers[1].name: required key missing (line {second})"
            in validate.stderr)
    assert run.exit_code == 2
    assert f"$.providers[1].name: required key missing (line {second})" in run.stderr
    # A plugin's own settings check gets its line too (in a run and in validate).
    path.write_text(text, encoding="utf-8")
    validate = lich("config", "validate")
    run = lich("run", "hello")
    assert (f"$.plugin_settings.failover.max_attempts: must be at least 1, got 0 "
            f"(line {settings_line})") in validate.stderr
    assert f"must be at least 1, got 0 (line {settings_line})" in run.stderr
    assert server.requests == []


def test_config_validate_is_not_ok_while_a_configured_plugin_fails_to_load(
    work: Path, lich: Any, scripted: Any
) -> None:
    server = scripted(["never"])
    (work / "broken.py").write_text("import os\n\nimport no_such_module_zz\n",
                                    encoding="utf-8")
    (work / "hook_raises.py").write_text(
        "from lich import hookimpl\n\n\ndef helper():\n    raise RuntimeError('boom')\n\n\n"
        "@hookimpl\ndef lich_register_tools(registry):\n    helper()\n", encoding="utf-8")
    write_config(work, server.base_url, plugins=["builtin_tools", "approvals", "openai_compat",
                                                 "broken.py", "hook_raises.py"])

    validate = lich("config", "validate")
    plugins = lich("plugins", "--json")

    assert validate.exit_code == 2, validate.stdout
    assert not validate.stdout.startswith("ok")
    # Each failure says where: the import that failed, the line of the hook that raised.
    assert (f"plugin 'broken.py': failed: import: ModuleNotFoundError: No module named "
            f"'no_such_module_zz' ({work / 'broken.py'}:3)") in validate.stderr
    assert (f"plugin 'hook_raises.py': failed: register: RuntimeError: boom "
            f"({work / 'hook_raises.py'}:5)") in validate.stderr
    reports = {r["entry"]: r for r in json.loads(plugins.stdout)}
    assert reports["hook_raises.py"]["error_message"] == "boom"
    assert reports["hook_raises.py"]["error_at"] == f"{work / 'hook_raises.py'}:5"
    assert server.requests == []


def test_config_validate_checks_plugin_settings_as_a_run_does(
    work: Path, lich: Any, scripted: Any
) -> None:
    """A config that every run rejects is never reported as ok."""
    server = scripted(["never"])
    path = write_config(work, server.base_url, extra=(
        "[plugin_settings.failover]\nmax_attempts = 0\nbase_delay = 1\n"))

    validate = lich("config", "validate")
    run = lich("run", "hello")

    assert validate.exit_code == 2
    assert f"{path}: $.plugin_settings.failover.max_attempts: must be at least 1, got 0" in (
        validate.stderr)
    assert "$.plugin_settings.failover.base_delay: unknown key (did you mean 'base_delay_s'?)" in (
        validate.stderr)
    assert run.exit_code == 2
    assert "$.plugin_settings.failover.max_attempts: must be at least 1" in run.stderr
    assert server.requests == []  # rejected before any model call


def test_config_validate_checks_the_gateway_table_as_a_run_does(
    work: Path, lich: Any, scripted: Any
) -> None:
    server = scripted(["never"])
    path = write_config(work, server.base_url, extra=(
        "[gateway]\nhistory_cap = 1\n[gateway.twitch]\nchannels = [\"ok\", true]\n"))

    validate = lich("config", "validate")
    run = lich("run", "hello")

    assert validate.exit_code == 2
    assert f"{path}: $.gateway.history_cap: must be at least 2, got 1" in validate.stderr
    assert (f"{path}: $.gateway.twitch.channels[1]: expected a string or an integer, "
            "got boolean") in validate.stderr
    assert run.exit_code == 2
    assert "$.gateway.history_cap: must be at least 2, got 1" in run.stderr
    assert server.requests == []


def test_config_validate_checks_builtin_tool_tables_as_a_run_does(
    work: Path, lich: Any, scripted: Any
) -> None:
    server = scripted(["never"])
    path = write_config(work, server.base_url, extra=(
        "[tools.terminal]\npass_env = \"GITHUB_TOKEN\"\ntimeout_s = 30\n"
        "[tools.fetch_url]\nallow_privat = true\n"
        "[tools.their_tool]\ntheir_key = 1\n"))

    validate = lich("config", "validate")
    run = lich("run", "hello")

    assert validate.exit_code == 2
    assert f"{path}: $.tools.terminal.pass_env: expected an array, got string" in (
        validate.stderr)
    assert (f"{path}: $.tools.fetch_url.allow_privat: unknown key "
            "(did you mean 'allow_private'?)") in validate.stderr
    assert "their_tool" not in validate.stderr  # another plugin's table: not builtin_tools'
    assert run.exit_code == 2
    assert "$.tools.terminal.pass_env: expected an array, got string" in run.stderr
    assert server.requests == []


def test_a_plugin_whose_check_crashes_fails_its_load_report(
    work: Path, lich: Any, scripted: Any
) -> None:
    (work / "checker.py").write_text(
        "from lich import hookimpl\n\n"
        "@hookimpl\n"
        "def lich_check_config(config):\n"
        "    raise RuntimeError('checker bug')\n",
        encoding="utf-8",
    )
    server = scripted()
    write_config(work, server.base_url, plugins=["openai_compat", "checker.py"])

    result = lich("config", "validate")

    # A run goes on without it (a warning); validate does not call such a config "ok".
    assert result.exit_code == 2, result.stderr
    assert "checker.py" in result.stderr
    assert f"RuntimeError: checker bug ({work / 'checker.py'}:5)" in result.stderr


def test_config_validate_json_file(work: Path, lich: Any, tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{"providers": [{"kind": "openai_compat", "name": "a", "model": 5}]}',
                    encoding="utf-8")

    result = lich("config", "validate", "--config", str(path))

    assert result.exit_code == 2
    assert f"{path}: $.providers[0].model" in result.stderr


def test_config_validate_warns_about_no_model(work: Path, lich: Any) -> None:
    result = lich("config", "validate")

    assert result.exit_code == 0
    assert "no model configured" in result.stderr


# ----------------------------------------------------------------------- tools


def test_tools_lists_enabled_tools(work: Path, lich: Any, scripted: Any) -> None:
    server = scripted()
    write_config(work, server.base_url,
                 extra='tools_disabled = ["terminal"]')
    markup = work / "markup.py"
    markup.write_text(
        "from lich import hookimpl, tool\n\n"
        "@tool\ndef odd(x: int) -> str:\n    '''Looks like [bold]markup[/bold] but is not.'''\n"
        "    return str(x)\n\n"
        "@hookimpl\ndef lich_register_tools(registry):\n    registry.register(odd)\n",
        encoding="utf-8",
    )

    table = lich("tools", "--plugin", "markup.py")
    as_json = lich("tools", "--json")

    assert table.exit_code == 0, table.stderr
    assert re.search(r"read_file\s+builtin_tools\s+Read", table.stdout)
    assert "Looks like [bold]markup[/bold] but is not." in table.stdout
    assert "terminal" not in table.stdout
    tools = {t["name"]: t for t in json.loads(as_json.stdout)}
    assert "terminal" not in tools
    assert tools["read_file"]["plugin"] == "builtin_tools"
    assert tools["read_file"]["parameters"]["type"] == "object"
    assert "path" in tools["read_file"]["parameters"]["properties"]


# -------------------------------------------------------------------- sessions


def test_sessions_list_show_path(work: Path, lich: Any, scripted: Any) -> None:
    from lich.testing import Reply
    from lich.types import ToolCall

    server = scripted([Reply("checking", (ToolCall("c1", "list_dir", {"path": "."}),)),
                       "all good"])
    write_config(work, server.base_url)
    assert lich("first question").exit_code == 0

    listed = lich("sessions", "list")
    as_json = json.loads(lich("sessions", "list", "--json").stdout)
    sid = as_json[0]["session_id"]
    shown = lich("sessions", "show", "latest")
    shown_json = json.loads(lich("sessions", "show", sid, "--json").stdout)
    directory = lich("sessions", "path")
    file = lich("sessions", "path", sid)

    assert listed.exit_code == 0
    assert sid in listed.stdout
    assert "first question" in listed.stdout
    assert as_json[0]["title"] == "first question"
    assert shown.exit_code == 0, shown.stderr
    assert "you: first question" in shown.stdout
    assert "→ list_dir(" in shown.stdout
    assert "lich: all good" in shown.stdout
    assert "run ended: final after 2 turns" in shown.stdout
    assert [m["role"] for m in shown_json["messages"]] == [
        "system", "user", "assistant", "tool", "assistant"]
    assert shown_json["problems"] == []
    assert directory.stdout.strip() == str(work / ".lich" / "sessions")
    assert Path(file.stdout.strip()) == work / ".lich" / "sessions" / f"{sid}.jsonl"


def test_sessions_show_reports_a_corrupt_line(work: Path, lich: Any, scripted: Any) -> None:
    server = scripted(["fine"])
    write_config(work, server.base_url)
    assert lich("hello").exit_code == 0
    path = next((work / ".lich" / "sessions").glob("*.jsonl"))
    lines = path.read_text(encoding="utf-8").splitlines()
    lines.insert(2, "{not json")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    shown = lich("sessions", "show", path.stem)

    assert shown.exit_code == 0
    assert "you: hello" in shown.stdout
    assert "line 3: corrupt record skipped" in shown.stderr


def test_sessions_unknown_and_empty(work: Path, lich: Any) -> None:
    empty = lich("sessions", "list")
    unknown = lich("sessions", "show", "nope-1")

    assert empty.exit_code == 0
    assert "no sessions" in empty.stderr
    assert unknown.exit_code == 2
    assert "nope-1" in unknown.stderr


# ------------------------------------------------------------------------- tui


def test_tui_gets_the_assembled_agent_with_resume_and_plugins(
    work: Path, lich: Any, monkeypatch: pytest.MonkeyPatch, scripted: Any
) -> None:
    calls: list[tuple[Any, ...]] = []

    def run_tui(agent: Any, *, resume: str | None = None, config_location: Any = None) -> int:
        calls.append((agent, resume, config_location))
        return 0

    import lich.cli.tui as cli_tui
    import lich.tui as tui

    monkeypatch.setattr(tui, "run_tui", run_tui)
    # CliRunner's streams are no terminals; a real one is tested in test_paths_and_terminals.
    monkeypatch.setattr(cli_tui, "terminal_problem", lambda: None)
    server = scripted(["an answer"])
    write_config(work, server.base_url)
    (work / "extra.py").write_text("", encoding="utf-8")
    assert lich("a question").exit_code == 0
    (sid,) = [p.stem for p in (work / ".lich" / "sessions").glob("*.jsonl")]

    result = lich("--max-turns", "4", "tui", "--resume", "latest", "--plugin", "extra.py")

    assert result.exit_code == 0, result.stderr
    agent, resume, location = calls[0]
    assert agent.config.max_turns == 4
    assert resume == sid  # resolved before the TUI starts
    # The config in use: where the approval dialog's "always" offers to write first.
    assert (location.path, location.reason) == (work / ".lich" / "config.toml", "work_dir")
    assert agent.config.plugins[-1] == str(work / "extra.py")
    (report,) = [r for r in agent.host.reports if r.entry == str(work / "extra.py")]
    assert report.status == "loaded"


@pytest.mark.parametrize("ref", ["bogus", "latest"])
def test_tui_resume_of_a_missing_session_exits_2_before_the_tui_starts(
    work: Path, lich: Any, monkeypatch: pytest.MonkeyPatch, scripted: Any, ref: str
) -> None:
    def run_tui(*_args: Any, **_kwargs: Any) -> int:
        raise AssertionError("the TUI must not start")

    import lich.cli.tui as cli_tui
    import lich.tui as tui

    monkeypatch.setattr(tui, "run_tui", run_tui)
    monkeypatch.setattr(cli_tui, "terminal_problem", lambda: None)  # CliRunner has none
    server = scripted()
    write_config(work, server.base_url)

    from_tui = lich("tui", "--resume", ref)
    from_run = lich("--resume", ref, "a task")

    assert from_tui.exit_code == 2
    assert from_tui.stderr.startswith("lich: error: --resume: ")
    assert from_tui.stderr == from_run.stderr
    assert from_run.exit_code == 2


def test_tui_without_textual_says_how_to_install_it(
    work: Path, lich: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(sys.modules):
        if name == "lich.tui" or name.startswith(("lich.tui.", "textual")):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "textual", None)  # import textual → ModuleNotFoundError

    result = lich("tui")

    assert result.exit_code == 2
    assert "pip install 'lich-agent[tui]'" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("model", [
    "plain", 'quote"d', "back\\slash", "new\nline", "tab\there", "del\x7fchar", "nul\x00x",
    "bell\x07", "ünï©ødé ✓", "emoji 🦜", "'single'", "#hash", "a = b", "[table]", "\u2028sep",
])
def test_config_init_writes_any_value_as_toml_that_reads_back(
    work: Path, lich: Any, model: str
) -> None:
    """The whole template round-trips: every value it writes reads back as itself."""
    import tomllib

    url = "http://127.0.0.1:9/v1?x=" + model.replace("\x00", "")
    result = lich("config", "init", "--model", model, "--base-url", url,
                  "--api-key-env", "MY_" + "KEY")
    assert result.exit_code == 0, result.stderr
    text = (work / ".lich" / "config.toml").read_text(encoding="utf-8")
    data = tomllib.loads(text)  # a file tomllib rejects is the bug this guards against
    (provider,) = data["providers"]
    assert provider == {"kind": "openai_compat", "name": "main", "model": model,
                        "base_url": url, "api_key_env": "MY_KEY"}
    # And lich itself loads it to the same values.
    (loaded,) = load_config(work_dir=work, env={}, trust=True).config.providers
    assert (loaded.model, loaded.base_url) == (model, url)
