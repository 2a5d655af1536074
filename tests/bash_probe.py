"""What bash really does with a terminal line, and what the approval rules decide for
it: the two sides of the shell-reader tables (tests/approvals/test_shell_table.py,
tests/security/test_item03_shell_reader.py).

A line is an attack when bash, running it as the terminal tool does, creates the file
``pwned`` in its work dir; the stand-in programs on its PATH (a ``git`` that does
nothing, an ``ssh`` that runs its command locally, ...) make lines that name them
runnable here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path

from lich.approvals.rules import RuleSet, decide
from lich.tools import Tool
from lich.types import ToolResult

__all__ = ["TERMINAL", "bash_made_pwned", "rule_action"]

TERMINAL = Tool(
    name="terminal", description="terminal",
    parameters={"type": "object", "required": ["command"],
                "properties": {"command": {"type": "string"}}},
    execute=lambda args, ctx: ToolResult.success(""), requires_approval=True)
"""A tool shaped like the builtin terminal, for the rules to judge."""

_QUIET_GIT = {"git": "#!/bin/sh\nexit 0\n"}


def bash_made_pwned(line: str, where: Path,
                    stand_ins: Mapping[str, str] = _QUIET_GIT) -> bool:
    """Run ``line`` as the terminal tool does (``bash -c``, in a process group of its
    own, with ``stand_ins`` as programs on PATH) and say whether ``pwned`` appeared. A
    command bash started in the background (``&``, a process substitution,
    ``coproc``) stays in the group: waited for (bounded) until the group is empty."""
    bin_dir = where / "bin"
    bin_dir.mkdir()
    for name, text in stand_ins.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(where),
           "LC_ALL": "C.UTF-8"}
    proc = subprocess.Popen(["bash", "-c", line], cwd=where, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        proc.wait(timeout=30)
        pause = threading.Event()
        for _ in range(1000):
            if (where / "pwned").exists():
                break
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            pause.wait(0.01)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    return (where / "pwned").exists()


def rule_action(line: str, *, allow: tuple[str, ...], deny: tuple[str, ...] = ()) -> str:
    """What the rules decide for ``terminal(line)``: ``allow``, ``ask`` or ``deny``."""
    rules = RuleSet.parse(allow, (), deny)
    return decide(rules, "ask", "terminal", {"command": line}, TERMINAL, "/w").action
