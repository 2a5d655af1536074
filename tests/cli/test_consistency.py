"""The command line behaves alike across commands: ``--json`` before or after the command
name (or refused, saying so), and tables in a pipe without trailing spaces."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from .conftest import json_lines, run_lich, write_config

# The commands that print JSON, as words; each is tried with --json in every position.
HONOURING: list[tuple[str, ...]] = [
    ("tools",),
    ("plugins",),
    ("plugins", "available"),
    ("config", "show"),
    ("sessions", "list"),
    ("sessions", "show", "latest"),
    ("sessions", "path"),
    ("sessions", "path", "latest"),
    ("sessions", "rm", "--dry-run", "latest"),
    ("sessions", "prune", "--dry-run", "--failed"),
]

REFUSING: list[tuple[str, ...]] = [
    ("chat",),
    ("tui",),
    ("config", "init"),
    ("config", "path"),
    ("config", "validate"),
]


def _placements(words: tuple[str, ...]) -> list[list[str]]:
    """``--json`` before the command, after the whole command line, and (for a group)
    between the group and its subcommand."""
    out = [["--json", *words], [*words, "--json"]]
    if len(words) > 1:
        out.append([words[0], "--json", *words[1:]])
    return out


@pytest.fixture
def configured(work: Path, scripted: Any, lich: Any) -> Path:
    """A work dir with a config and one recorded session."""
    server = scripted(["an answer"])
    write_config(work, server.base_url)
    assert lich("a question").exit_code == 0
    return work


@pytest.mark.parametrize("words", HONOURING, ids=" ".join)
def test_json_before_or_after_the_command_gives_the_same_json(
    configured: Path, lich: Any, words: tuple[str, ...]
) -> None:
    outputs = []
    for args in _placements(words):
        result = lich(*args)
        assert result.exit_code == 0, (args, result.stderr)
        outputs.append(_untimed(json.loads(result.stdout)))

    assert all(o == outputs[0] for o in outputs)


def _untimed(data: Any) -> Any:
    """``data`` without the plugins' load times, the one part that differs run to run."""
    if isinstance(data, dict):
        return {k: _untimed(v) for k, v in data.items() if k != "load_ms"}
    if isinstance(data, list):
        return [_untimed(v) for v in data]
    return data


@pytest.mark.parametrize("words", REFUSING, ids=" ".join)
def test_a_command_that_cannot_print_json_says_so(
    configured: Path, lich: Any, monkeypatch: pytest.MonkeyPatch, words: tuple[str, ...]
) -> None:
    import lich.tui as tui

    def no_tui(*_args: Any, **_kwargs: Any) -> int:
        raise AssertionError("the TUI must not start")

    monkeypatch.setattr(tui, "run_tui", no_tui)
    for args in _placements(words):
        result = lich(*args, input="")

        assert result.exit_code == 2, args
        assert f"lich {' '.join(words)} cannot print JSON (--json)" in result.stderr
        assert result.stdout == ""
    assert not (configured / ".lich" / "config.toml").read_text(encoding="utf-8").startswith(
        "# lich configuration")  # config init wrote nothing


def test_a_run_takes_json_anywhere(configured: Path, lich: Any, scripted: Any) -> None:
    server = scripted(["one", "two", "three"])
    write_config(configured, server.base_url)

    for args in (["--json", "hi"], ["hi", "--json"], ["run", "--json", "hi"]):
        result = lich(*args)
        events = json_lines(result.stdout)
        assert result.exit_code == 0, result.stderr
        assert events[-1]["type"] == "run_end"


JSON_PLUGIN = textwrap.dedent('''
    import click
    from lich import hookimpl
    from lich.cli.options import get_settings, json_option


    @hookimpl
    def lich_register_commands(cli):
        @cli.command("plain")
        def plain():
            """Prints text only."""
            click.echo("text")

        @cli.command("structured")
        @json_option()
        @click.pass_context
        def structured(ctx):
            """Prints JSON when asked."""
            click.echo('{"ok": true}' if get_settings(ctx).json else "ok")
''')


def test_a_plugin_command_without_json_refuses_it(work: Path, lich: Any) -> None:
    (work / "cmds.py").write_text(JSON_PLUGIN, encoding="utf-8")

    before = lich("--plugin", "cmds.py", "--json", "plain")
    after = lich("--plugin", "cmds.py", "plain", "--json")
    structured = [lich("--plugin", "cmds.py", *args)
                  for args in (["--json", "structured"], ["structured", "--json"])]

    assert before.exit_code == 2
    assert "the plugin command 'plain' cannot print JSON" in before.stderr
    assert before.stdout == ""
    assert after.exit_code == 2
    assert "--json" in after.stderr
    assert [json.loads(r.stdout) for r in structured] == [{"ok": True}, {"ok": True}]


# --------------------------------------------------------------- tables in pipes


@pytest.mark.parametrize("words", [
    ("tools",), ("plugins",), ("plugins", "available"), ("config", "show"), ("sessions", "list"),
], ids=" ".join)
def test_tables_in_a_pipe_have_no_trailing_spaces(configured: Path, words: tuple[str, ...]) -> None:
    result = run_lich(*words, cwd=configured)

    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) >= 2  # a header and at least one row
    assert [line for line in lines if line != line.rstrip()] == []


def test_a_piped_table_keeps_its_columns(configured: Path) -> None:
    result = run_lich("tools", cwd=configured)

    header, *rows = result.stdout.splitlines()
    column = header.index("plugin")
    (read_file,) = [r for r in rows if r.startswith("read_file ")]
    # The columns still line up: only the padding after the last cell went.
    assert read_file[column:].startswith("builtin_tools")
    assert re.match(r"^tool +plugin +description$", header)
