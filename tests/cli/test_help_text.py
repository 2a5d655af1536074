"""Every command's ``--help``, builtin and plugin alike: plain text (no reST markup
from the docstrings), and only the flags that command honours (a run's flags —
the model, budgets, approvals — on the commands that run the agent)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click
import pytest

from lich.cli import build_cli

from .conftest import write_config

# Every plugin that adds commands, enabled, so that theirs are walked too.
PLUGINS = 'plugins = ["+nats"]'
# What a run is made with: these make no sense for a command that runs no model.
MODEL_FLAGS = ("--model", "--provider-kind", "--base-url", "--api-key-env", "--max-turns",
               "--max-cost", "--max-tokens", "--system-prompt", "--no-stream")
RUN_FLAGS = ("--yes", "--read-only", "--tools", "--no-tools", "--resume")
# The commands that run the agent (or show the configuration a run gets).
RUNS = {"run", "chat", "tui"}
CONFIGURES = {"config init", "config show", "config validate", "config path",
              "gateway", "worker", "mcp serve"}
# Commands with a flag of that name of their own.
OWN = {"demo": {"--no-stream"}, "mcp serve": {"--tools"}}
MARKUP = re.compile(r"``|:(?:func|class|meth|attr|data|mod|ref):`")


def _commands(group: click.Group, ctx: click.Context, prefix: str = "") -> list[str]:
    found = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        path = f"{prefix}{name}"
        found.append(path)
        if isinstance(command, click.Group):
            found += _commands(command, ctx, f"{path} ")
    return found


@pytest.fixture
def every_command(work: Path, scripted: Any) -> list[str]:
    write_config(work, scripted([]).base_url, extra=PLUGINS)
    cli = build_cli()
    with cli.make_context("lich", []) as ctx:
        commands = _commands(cli, ctx)
    assert {"sessions show", "worker", "cluster status", "mcp list", "gateway"} <= set(commands)
    return commands


def test_no_help_shows_rest_markup(every_command: list[str], lich: Any) -> None:
    for path in ["", *every_command]:
        result = lich(*path.split(), "--help")
        assert result.exit_code == 0, (path, result.output)
        assert not MARKUP.search(result.output), (path, result.output)


def test_run_flags_are_only_on_the_commands_that_run(every_command: list[str],
                                                     lich: Any) -> None:
    for path in every_command:
        help_text = lich(*path.split(), "--help").output
        offered = {flag for flag in (*MODEL_FLAGS, *RUN_FLAGS)
                   if re.search(rf"(^|[\s,]){re.escape(flag)}\b", help_text, re.M)}
        if path in RUNS:
            assert offered == {*MODEL_FLAGS, *RUN_FLAGS}, path
        elif path in CONFIGURES:
            assert offered >= set(MODEL_FLAGS), path
        else:
            assert offered <= OWN.get(path, set()), (path, offered)


def test_a_run_flag_after_a_command_that_runs_nothing_is_a_usage_error(
    work: Path, scripted: Any, lich: Any
) -> None:
    write_config(work, scripted([]).base_url)
    result = lich("sessions", "list", "--max-cost", "1")
    assert result.exit_code == 2
    assert "No such option '--max-cost'" in result.output
    # Before the command, at the root, it is a run's flag and harmless there.
    assert lich("--max-cost", "1", "sessions", "list").exit_code == 0
