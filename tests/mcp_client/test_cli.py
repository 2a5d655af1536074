"""``lich mcp list``, ``lich mcp import``, and what ``lich plugins``, ``lich tools``
and a run say about MCP servers."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from click.testing import CliRunner, Result

from lich.cli import build_cli
from lich.config import load_config
from lich.mcp.config import parse_mcp_settings

from .conftest import FIXTURE, START_S


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "work"
    path.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.chdir(path)
    logger = logging.getLogger("lich")
    level, handlers = logger.level, list(logger.handlers)
    yield path
    logger.setLevel(level)
    logger.handlers[:] = handlers


def write_config(work: Path, servers: dict[str, Any], **top: Any) -> None:
    path = work / ".lich" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps({**top, "mcp": {"servers": servers}}), encoding="utf-8")


FX = {"command": sys.executable, "args": [str(FIXTURE)], "startup_timeout_s": START_S}
GHOST = {"command": "lich-test-no-such-server"}


@pytest.fixture
def lich() -> Callable[..., Result]:
    def invoke(*args: str) -> Result:
        return CliRunner().invoke(build_cli(), list(args), catch_exceptions=False)

    return invoke


def test_mcp_list_shows_each_servers_state_and_tools(work: Path, lich: Any) -> None:
    write_config(work, {"fx": FX, "ghost": GHOST, "off": {**FX, "enabled": False}})
    result = lich("mcp", "list", "--json")
    assert result.exit_code == 1, result.output  # an enabled server did not start
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["fx"]["status"] == "connected"
    assert rows["fx"]["server"] == "fixture"
    echo = next(t for t in rows["fx"]["tools"] if t["remote"] == "echo")
    assert echo["name"] == "mcp__fx__echo"
    assert echo["tokens"] > 0
    assert rows["fx"]["tokens"] >= sum(t["tokens"] for t in rows["fx"]["tools"]) // 2
    assert rows["ghost"]["status"] == "failed"
    assert rows["ghost"]["error"].startswith("command not found: lich-test-no-such-server")
    assert rows["off"]["status"] == "disabled"
    assert rows["off"]["tools"] == []

    table = lich("mcp", "list")
    assert table.exit_code == 1
    assert "mcp__fx__echo" in table.stdout
    assert "command not found" in table.stdout
    assert "MCP tool definitions: ~" in table.stdout


def test_a_task_only_tool_is_not_offered_and_mcp_list_says_so(
        work: Path, lich: Any, http_fixture: Any) -> None:
    # The fixture's research tool accepts calls only as tasks (taskSupport "required",
    # of the 2025-11-25 revision the fixture speaks over HTTP), which lich does not
    # make: every plain call would fail with -32601.
    write_config(work, {"fx": {"url": http_fixture.url, "startup_timeout_s": START_S}})
    rows = {r["name"]: r for r in json.loads(lich("mcp", "list", "--json").stdout)}
    assert rows["fx"]["task_only"] == ["research"]
    assert "mcp__fx__research" not in {t["name"] for t in rows["fx"]["tools"]}
    assert "mcp__fx__echo" in {t["name"] for t in rows["fx"]["tools"]}
    table = lich("mcp", "list")
    assert "not offered (task-only" in " ".join(table.stdout.split())
    assert "research" in table.stdout
    tools = lich("tools", "--json")
    assert "mcp__fx__research" not in tools.stdout
    assert "mcp__fx__echo" in tools.stdout


def test_mcp_list_without_servers(work: Path, lich: Any) -> None:
    write_config(work, {})
    result = lich("mcp", "list")
    assert result.exit_code == 0
    assert "no MCP servers configured" in result.stderr


def test_plugins_and_tools_report_mcp_servers(work: Path, lich: Any) -> None:
    write_config(work, {"fx": FX, "ghost": GHOST})
    plugins = lich("plugins", "--json")
    (report,) = [r for r in json.loads(plugins.stdout) if r["entry"] == "mcp"]
    assert report["status"] == "loaded"
    assert any(w.startswith("mcp server 'ghost' is unavailable: command not found")
               for w in report["warnings"])
    tools = lich("tools", "--json")
    by_name = {t["name"]: t for t in json.loads(tools.stdout)}
    assert by_name["mcp__fx__echo"]["plugin"] == "mcp"
    assert by_name["mcp__fx__echo"]["timeout_s"] == 60


def test_a_run_warns_once_about_servers_that_did_not_start(
    work: Path, lich: Any, lich_scripted_server: Any
) -> None:
    server = lich_scripted_server(["the answer"])
    write_config(work, {"fx": FX, "ghost": GHOST}, providers=[{
        "kind": "openai_compat", "name": "s", "model": "m", "base_url": server.base_url}])
    result = lich("run", "say something")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if "ghost" in line]
    assert len(lines) == 1
    assert lines[0].startswith("[lich:warn] mcp: 1 of 2 servers did not start")
    assert "the answer" in result.stdout


def test_config_validate_reports_an_unset_variable(work: Path, lich: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LICH_TEST_DOCS_TOKEN", raising=False)
    write_config(work, {"docs": {"url": "http://127.0.0.1:9/mcp",
                                 "headers": {"Authorization": "Bearer ${LICH_TEST_DOCS_TOKEN}"}}})
    result = lich("config", "validate")
    assert result.exit_code == 2
    assert ("$.mcp.servers.docs.headers.Authorization: ${LICH_TEST_DOCS_TOKEN} is not set"
            in result.stderr)


def test_import_converts_mcp_json_to_a_table_lich_reads(work: Path, lich: Any) -> None:
    source = work / ".mcp.json"
    source.write_text(json.dumps({"mcpServers": {
        "git": {"command": "uvx", "args": ["mcp-server-git", "--repository", "."],
                "env": {"GIT_PAGER": "cat"}},
        "docs": {"type": "http", "url": "https://docs.example.invalid/mcp",
                 "headers": {"Authorization": "Bearer ${DOCS_TOKEN:-none}"}},
        "old": {"type": "sse", "url": "https://old.example.invalid/sse"},
        "odd": {"command": "odd-server", "autoApprove": ["x"]},
    }}), encoding="utf-8")
    result = lich("mcp", "import", str(source))
    assert result.exit_code == 0
    assert "old: an SSE server" in result.stderr
    assert "odd: left out autoApprove" in result.stderr
    (work / ".lich").mkdir()
    (work / ".lich" / "config.toml").write_text(result.stdout, encoding="utf-8")
    config = load_config(work_dir=work).config
    settings = parse_mcp_settings(config.table("mcp"), environ={})
    assert settings.servers["git"].args == ("mcp-server-git", "--repository", ".")
    assert settings.servers["git"].env == {"GIT_PAGER": "cat"}
    assert settings.servers["docs"].headers == {"Authorization": "Bearer none"}
    assert settings.servers["old"].enabled is False
    assert settings.servers["odd"].command == "odd-server"


def test_import_refuses_a_file_without_servers(work: Path, lich: Any) -> None:
    source = work / "settings.json"
    source.write_text('{"theme": "dark"}', encoding="utf-8")
    result = lich("mcp", "import", str(source))
    assert result.exit_code == 2
    assert 'no "mcpServers" object' in result.stderr


def test_import_write_appends_to_a_config_keeping_its_comments(work: Path, lich: Any) -> None:
    source = work / "claude_desktop_config.json"
    source.write_text(json.dumps({"mcpServers": {
        "time": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"]}}}),
        encoding="utf-8")
    target = work / ".lich" / "config.toml"
    target.parent.mkdir()
    original = ("# my settings\nmax_turns = 7  # keep it short\n\n[mcp]\n"
                "context_warning_share = 0.5\n")
    target.write_text(original, encoding="utf-8")
    result = lich("mcp", "import", str(source), "--write", str(target))
    assert result.exit_code == 0, result.output
    assert result.stdout == f"wrote 1 server(s) to {target}\n"
    text = target.read_text(encoding="utf-8")
    assert text.startswith(original)
    config = load_config(work_dir=work).config
    assert config.max_turns == 7
    settings = parse_mcp_settings(config.table("mcp"), environ={})
    assert settings.context_warning_share == 0.5
    assert settings.servers["time"].args == ("--local-timezone", "UTC")
    # The same again: the name is taken, and the file is left as it was.
    again = lich("mcp", "import", str(source), "--write", str(target))
    assert again.exit_code == 2
    assert "already has server(s) time; nothing written" in again.stderr
    assert target.read_text(encoding="utf-8") == text


def test_import_write_refuses_an_inline_mcp_table(work: Path, lich: Any) -> None:
    source = work / ".mcp.json"
    source.write_text(json.dumps({"mcpServers": {"a": {"command": "a"}}}), encoding="utf-8")
    target = work / "lich.toml"
    original = 'mcp = { servers = { b = { command = "b" } } }\n'
    target.write_text(original, encoding="utf-8")
    result = lich("mcp", "import", str(source), "--write", str(target))
    assert result.exit_code == 2
    assert "cannot be extended by new tables" in result.stderr
    assert target.read_text(encoding="utf-8") == original
