"""``lich sandbox doctor`` and ``lich sandbox -- CMD``, run as a user runs them (a real
``python -m lich`` process, the plugin named by its module path)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or not sys.platform.startswith("linux"),
    reason="bubblewrap is not installed (.ci/run installs it: apt-get install bubblewrap)")

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9u\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(KEY)
    work = tmp_path / "work"
    work.mkdir()
    return work


def sandbox(work: Path, *args: str, table: str = "", path: str | None = None
            ) -> subprocess.CompletedProcess[str]:
    config = work.parent / "lich.toml"
    config.write_text(f"[sandbox]\n{table}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LICH_")}
    env["HOME"] = str(work.parent / "home")
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "-m", "lich", "--plugin", "lich.sandbox.plugin", "sandbox",
         "--config", str(config), "--work-dir", str(work), *args],
        cwd=work, capture_output=True, text=True, env=env, timeout=120, check=False)


def test_doctor_says_what_the_probe_found(project: Path) -> None:
    done = sandbox(project, "doctor", table='mode = "required"')
    assert done.returncode == 0, done.stderr
    assert "probe:    ok (a sandboxed true ran)" in done.stdout
    assert f"bwrap:    {shutil.which('bwrap')}" in done.stdout
    assert "mode:     required" in done.stdout
    shown = json.loads(sandbox(project, "doctor", "--json").stdout)
    assert shown["ok"] is True
    assert shown["mode"] == "off"
    assert shown["profile"] == "workspace-write"


def test_doctor_without_bwrap_exits_1_saying_why(project: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    done = sandbox(project, "doctor", "--json", table='mode = "auto"', path=str(empty))
    assert done.returncode == 1
    shown = json.loads(done.stdout)
    assert shown["ok"] is False
    assert shown["reason"].startswith("bwrap is not installed")


def test_a_command_runs_in_the_sandbox_with_its_exit_status(project: Path) -> None:
    done = sandbox(project, "--", "sh", "-c",
                   "cat ~/.ssh/id_ed25519; echo made > made.txt; touch /etc/lich-x; exit 3")
    assert done.returncode == 3
    assert "PRIVATE KEY" not in done.stdout + done.stderr
    assert "Read-only file system" in done.stderr
    assert (project / "made.txt").read_text() == "made\n"


def test_the_read_only_profile_applies_to_the_command(project: Path) -> None:
    done = sandbox(project, "--", "sh", "-c", "echo made > made.txt",
                   table='profile = "read-only"')
    assert done.returncode != 0
    assert not (project / "made.txt").exists()


@pytest.mark.parametrize(("args", "table", "said"), [
    (("--",), "", "no command after `--`"),
    (("--", "true"), 'profile = "full"', 'the profile is "full": no sandbox'),
    (("--", "true"), 'mode = "never"', "$.sandbox.mode"),
])
def test_a_command_that_cannot_run_is_a_usage_error(
    project: Path, args: tuple[str, ...], table: str, said: str,
) -> None:
    done = sandbox(project, *args, table=table)
    assert done.returncode == 2
    assert said in done.stderr


def test_a_command_without_bwrap_exits_1_and_runs_nothing(project: Path,
                                                          tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    done = sandbox(project, "--", "/bin/sh", "-c", "echo made > made.txt", path=str(empty))
    assert done.returncode == 1
    assert "sandbox unavailable: bwrap is not installed" in done.stderr
    assert not (project / "made.txt").exists()


@pytest.mark.parametrize("command", [("tools",), ("mcp", "list")])
def test_a_required_sandbox_that_cannot_start_is_an_error_line_not_a_traceback(
    project: Path, tmp_path: Path, command: tuple[str, ...],
) -> None:
    """`lich tools` and `lich mcp list` assemble the runner as a run does."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    config = project.parent / "lich.toml"
    config.write_text('plugins = ["builtin_tools", "mcp", "lich.sandbox.plugin"]\n'
                      '[sandbox]\nmode = "required"\n'
                      f'[mcp.servers.fx]\ncommand = "{sys.executable}"\nargs = ["-c", "0"]\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("LICH_")}
    env["PATH"] = str(empty)
    done = subprocess.run([sys.executable, "-m", "lich", *command, "--config", str(config),
                           "--work-dir", str(project)],
                          cwd=project, capture_output=True, text=True, env=env, timeout=120,
                          check=False)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert ("lich: error: $.sandbox.mode: the sandbox is required but cannot start: "
            "bwrap is not installed") in done.stderr


@pytest.mark.parametrize(("table", "path", "said"), [
    ('mode = "sometimes"', None, "$.sandbox.mode: must be one of 'off', 'auto', 'required'"),
    ('mode = "required"', "empty", "$.sandbox.mode: the sandbox is required but cannot start"),
])
def test_config_validate_reports_the_sandbox_problem(
    project: Path, tmp_path: Path, table: str, path: str | None, said: str,
) -> None:
    config = project.parent / "lich.toml"
    config.write_text(f'plugins = ["builtin_tools", "lich.sandbox.plugin"]\n[sandbox]\n{table}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("LICH_")}
    if path is not None:
        (tmp_path / path).mkdir()
        env["PATH"] = str(tmp_path / path)
    done = subprocess.run([sys.executable, "-m", "lich", "config", "validate", "--config",
                           str(config), "--work-dir", str(project)],
                          cwd=project, capture_output=True, text=True, env=env, timeout=120,
                          check=False)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert said in done.stdout + done.stderr
    assert (done.stdout + done.stderr).count(said) == 1  # said once
