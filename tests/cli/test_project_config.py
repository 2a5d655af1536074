"""The config is found like git finds ``.git``: the work dir, then its parents (up to
``$HOME``); transcripts go to that project's ``.lich/sessions``; every ``.lich/``
lich creates ignores itself in git; ``plugins = ["+x"]`` adds to the defaults."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lich.config import BUILTIN_PLUGINS
from lich.dotlich import GITIGNORE_TEXT

from .conftest import config_text, write_config

SHOUT_PLUGIN = '''
from lich import hookimpl, tool


@tool
def shout(text: str) -> str:
    """Say it louder."""
    return text.upper()


@hookimpl
def lich_register_tools(registry):
    registry.register(shout)
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project under $HOME (the conftest points HOME at tmp_path/home)."""
    path = Path(os.environ["HOME"]) / "proj"
    path.mkdir()
    return path


def test_a_config_in_a_parent_is_found_and_sessions_go_to_that_project(
    project: Path, scripted: Any, lich: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = scripted(["found it"])
    config = write_config(project, server.base_url)
    nested = project / "src" / "deep"
    nested.mkdir(parents=True)
    monkeypatch.chdir(nested)

    run = lich("hello")
    shown = json.loads(lich("config", "show", "--json").stdout)
    path = lich("config", "path")

    assert run.exit_code == 0, run.stderr
    assert run.stdout.strip() == "found it"
    sessions = list((project / ".lich" / "sessions").glob("*.jsonl"))
    assert len(sessions) == 1
    assert not (nested / ".lich").exists()
    assert shown["file"] == str(config)
    # The agent works where lich was started; the project only holds the config and sessions.
    assert shown["values"]["work_dir"]["value"] == str(nested)
    assert shown["values"]["session_dir"]["value"] == str(project / ".lich" / "sessions")
    assert path.exit_code == 0
    assert path.stdout == f"{config}\n"
    assert "above the work dir" in path.stderr
    assert str(project) in path.stderr


def test_the_nearest_config_wins_and_home_is_the_boundary(
    project: Path, scripted: Any, lich: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = scripted()
    home = project.parent
    write_config(home, server.base_url)  # ~/.lich/config.toml: not a project config
    inner = project / "inner"
    inner.mkdir()
    monkeypatch.chdir(inner)

    from_home = lich("config", "path")
    write_config(project, server.base_url)
    own = write_config(inner, server.base_url)
    nearest = lich("config", "path")

    assert from_home.exit_code == 1
    assert str(inner / ".lich" / "config.toml") in from_home.stderr
    assert str(project / ".lich" / "config.toml") in from_home.stderr
    assert str(home / ".lich" / "config.toml") not in from_home.stderr
    assert nearest.stdout == f"{own}\n"
    assert "the work dir's own" in nearest.stderr


def test_relative_paths_in_a_parent_config_are_the_projects(
    project: Path, scripted: Any, lich: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = scripted()
    (project / "shout.py").write_text(SHOUT_PLUGIN, encoding="utf-8")
    write_config(project, server.base_url, plugins=["+shout.py"],
                 extra='session_dir = "transcripts"')
    (project / "sub").mkdir()
    monkeypatch.chdir(project / "sub")

    tools = lich("tools", "--json")
    shown = json.loads(lich("config", "show", "--json").stdout)

    assert tools.exit_code == 0, tools.stderr
    assert "shout" in {t["name"] for t in json.loads(tools.stdout)}
    assert shown["values"]["session_dir"]["value"] == str(project / "transcripts")


def test_plus_entries_add_to_the_default_plugins(
    work: Path, scripted: Any, lich: Any
) -> None:
    server = scripted()
    (work / "shout.py").write_text(SHOUT_PLUGIN, encoding="utf-8")
    write_config(work, server.base_url, plugins=["+shout.py", "+gateway"])

    reports = json.loads(lich("plugins", "--json").stdout)

    assert [r["entry"] for r in reports] == [*BUILTIN_PLUGINS, "shout.py"]
    assert all(r["status"] == "loaded" for r in reports), reports


@pytest.mark.parametrize(("plugins", "problem"), [
    (["builtin_tools", "+shout.py"],
     '$.plugins: either add to the defaults (every entry "+name") or list every plugin '
     "(no \"+\"), not both: 'builtin_tools' has no \"+\""),
    (["+"], '$.plugins[0]: "+" names no plugin'),
])
def test_plus_entries_misused_are_a_config_error(
    work: Path, scripted: Any, lich: Any, plugins: list[str], problem: str
) -> None:
    server = scripted(["must not be asked"])
    config = write_config(work, server.base_url, plugins=plugins)

    result = lich("hello")

    assert result.exit_code == 2
    assert str(config) in result.stderr
    assert problem in result.stderr
    assert server.requests == []


def test_a_new_lich_dir_ignores_itself_and_an_edited_gitignore_stays(
    work: Path, scripted: Any, lich: Any
) -> None:
    server = scripted(["one", "two"])
    # The config is given from elsewhere: the run itself creates .lich/ for its sessions.
    config = work.parent / "elsewhere.toml"
    config.write_text(config_text(server.base_url), encoding="utf-8")

    first = lich("--config", str(config), "hi")
    gitignore = work / ".lich" / ".gitignore"
    created = gitignore.read_text(encoding="utf-8")
    gitignore.write_text("*\n!config.toml\n", encoding="utf-8")
    second = lich("--config", str(config), "again")

    assert first.exit_code == 0, first.stderr
    assert second.exit_code == 0, second.stderr
    assert created == GITIGNORE_TEXT
    assert gitignore.read_text(encoding="utf-8") == "*\n!config.toml\n"
    assert len(list((work / ".lich" / "sessions").glob("*.jsonl"))) == 2


def test_config_init_writes_the_gitignore_too(work: Path, lich: Any) -> None:
    result = lich("config", "init")

    assert result.exit_code == 0, result.stderr
    assert (work / ".lich" / ".gitignore").read_text(encoding="utf-8") == GITIGNORE_TEXT


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_transcripts_never_show_up_in_git(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted(["recorded"])
    config = work.parent / "elsewhere.toml"
    config.write_text(config_text(server.base_url), encoding="utf-8")
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", str(work)], check=True, env=env, timeout=60)
    (work / "code.py").write_text("print()\n", encoding="utf-8")

    result = lich("--config", str(config), "hi")
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"],
                            cwd=work, capture_output=True, text=True, check=True, env=env,
                            timeout=60)

    assert result.exit_code == 0, result.stderr
    assert list((work / ".lich" / "sessions").glob("*.jsonl"))
    assert status.stdout.splitlines() == ["?? code.py"]
