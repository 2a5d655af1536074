"""Shell completion (click's, through ``_LICH_COMPLETE``) works with the lazily
imported builtin commands and the plugin commands, in a real subprocess."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .conftest import lich_command

GREETER = '''
import click
from lich import hookimpl


@hookimpl
def lich_register_commands(cli):
    @cli.command("hello")
    def hello():
        """Greet (from a plugin)."""
'''


def complete(cwd: Path, instruction: str, words: str = "", cword: int = 0) -> str:
    env = {**os.environ, "_LICH_COMPLETE": instruction, "COMP_WORDS": words,
           "COMP_CWORD": str(cword)}
    proc = subprocess.run([*lich_command()], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    return proc.stdout


def names(output: str) -> set[str]:
    """The values of bash_complete's ``type,value`` lines."""
    return {line.split(",", 1)[1] for line in output.splitlines() if line}


@pytest.mark.parametrize(("shell", "marker"), [
    ("bash", "complete -o nosort -F _lich_completion lich"),
    ("zsh", "#compdef lich"),
    ("fish", "complete --no-files --command lich"),
])
def test_the_completion_scripts(work: Path, shell: str, marker: str) -> None:
    script = complete(work, f"{shell}_source")

    assert marker in script
    assert "_LICH_COMPLETE" in script


def test_command_names_are_completed(work: Path) -> None:
    top = names(complete(work, "bash_complete", "lich ", 1))
    config = names(complete(work, "bash_complete", "lich config ", 2))
    partial = names(complete(work, "bash_complete", "lich sess", 1))
    flags = names(complete(work, "bash_complete", "lich --work", 1))

    # The builtins (imported only when looked up) and the gateway plugin's command.
    assert {"run", "chat", "tui", "demo", "config", "plugins", "tools", "sessions",
            "gateway"} <= top
    assert config == {"init", "show", "path", "validate"}
    assert partial == {"sessions"}
    assert flags == {"--work-dir"}


def test_plugin_commands_and_near_misses(work: Path) -> None:
    (work / "greeter.py").write_text(GREETER, encoding="utf-8")

    with_plugin = names(complete(work, "bash_complete", "lich --plugin greeter.py ", 3))
    # A mistyped command is refused when run; completing after it must not fail.
    after_typo = complete(work, "bash_complete", "lich confg ", 2)

    assert "hello" in with_plugin
    assert "Traceback" not in after_typo
