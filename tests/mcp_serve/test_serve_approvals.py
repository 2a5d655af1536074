"""Who approves a served call: never ``--yes`` (it would approve any MCP client's
``terminal`` and ``write_file``), only ``lich mcp serve --allow`` for the tools it
names; every other call that asks is denied with a reason that suggests no flag
the server does not take."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import IO

import pytest

from .test_serve import BOUND_S, log_once_ended, serve_env, served, text_of

pytest.importorskip("mcp", reason="the mcp extra is not installed")


@pytest.mark.parametrize("where", ["before", "after"])
def test_yes_is_refused_by_mcp_serve(work: Path, home: Path, hook_log: Path,
                                     where: str) -> None:
    args = (["--yes", "mcp", "serve"] if where == "before" else ["mcp", "--yes", "serve"])
    proc = subprocess.run(
        [sys.executable, "-m", "lich", *args, "--work-dir", str(work)], cwd=work, input="",
        capture_output=True, text=True, env=serve_env(home, hook_log), timeout=BOUND_S)
    if where == "after" and "No such option" in proc.stderr:
        assert proc.returncode == 2  # the group takes no --yes: refused all the same
        return
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert "--yes does not apply to lich mcp serve" in proc.stderr
    assert "--allow" in proc.stderr


async def test_allow_approves_only_the_named_tools_calls(
    work: Path, home: Path, hook_log: Path, stderr: IO[str]
) -> None:
    (work / ".lich" / "config.toml").write_text(
        '[approvals]\nallow = ["peek"]\n', encoding="utf-8")
    async with served(work, home, hook_log, "--plugin", "./guard.py", "--plugin",
                      "tools_plugin.py", "--allow", "write_file", stderr=stderr) as client:
        written = await client.call_tool("write_file", {"path": "made.txt", "content": "x"})
        # boom is not read-only and no rule allows it now: the default approvals ask,
        # and --allow does not name it.
        other = await client.call_tool("boom", {"reason": "r"})

    assert written.is_error is False, text_of(written)
    assert (work / "made.txt").read_text(encoding="utf-8") == "x"
    assert other.is_error is True
    assert text_of(other).startswith("approval_unavailable: ")
    assert "--yes" not in text_of(other)
    records = log_once_ended(hook_log)
    assert [r["type"] for r in records if r["hook"] == "event"].count("approval_resolved") == 2


def test_allow_naming_a_tool_that_is_not_served_is_a_usage_error(
    work: Path, home: Path, hook_log: Path
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "lich", "mcp", "serve", "--work-dir", str(work),
         "--tools", "read_file", "--allow", "write_file"], cwd=work, input="",
        capture_output=True, text=True, env=serve_env(home, hook_log), timeout=BOUND_S)
    assert proc.returncode == 2
    assert "--allow: write_file is not a served tool" in proc.stderr
