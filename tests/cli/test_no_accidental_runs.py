"""A mistyped command is never sent to the model as a task (issue: no accidental runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import config_text, write_config


@pytest.mark.parametrize(("words", "meant"), [
    (["confg", "show"], "config"),
    (["sesions", "list"], "sessions"),
    (["gatewy", "webhook"], "gateway"),
    (["tols"], "tools"),
    (["plugin"], "plugins"),
    (["chats"], "chat"),
    # One edit (Damerau–Levenshtein) for words of three letters or more: a swap of two
    # neighbours, an insertion, a deletion, a substitution.
    (["chta"], "chat"),
    (["cnofig", "show"], "config"),
    (["toosl"], "tools"),
    (["demmo"], "demo"),
    (["sesions"], "sessions"),
    (["tiu"], "tui"),
    (["chst"], "chat"),
    (["rnu", "it"], "run"),
])
def test_a_command_name_mistyped_exits_2_and_calls_no_model(
    words: list[str], meant: str, work: Path, lich: Any, scripted: Any
) -> None:
    server = scripted(["should never be asked"])
    write_config(work, server.base_url)

    result = lich(*words)

    assert result.exit_code == 2, result.stdout
    assert f"lich: error: unknown command {words[0]!r}; did you mean {meant!r}?" in result.stderr
    assert server.requests == []


@pytest.mark.parametrize("args", [
    ["run", "confg", "show"],
    ["--", "confg", "show"],
    ["--max-turns", "2", "--", "confg", "show"],
    ["what", "is", "in", "here?"],
    ["Run", "the", "tests"],  # a capitalised command word starts a sentence, not a typo
    ["What", "is", "here"],  # one edit from "chat", but a sentence
    ["ls"],  # two letters: one edit from too many names to be a typo of one
    ["fix", "the", "bug"],
])
def test_run_and_a_double_dash_always_run_the_task_as_given(
    args: list[str], work: Path, lich: Any, scripted: Any
) -> None:
    server = scripted(["done"])
    write_config(work, server.base_url)

    result = lich(*args)

    assert result.exit_code == 0, result.stderr
    task = " ".join(a for a in args[args.index("--") + 1:] if a) if "--" in args else (
        " ".join(args[1:]) if args[0] == "run" else " ".join(args))
    assert server.user_messages(0) == [task]


def test_a_task_starting_with_a_dash_runs_after_a_double_dash(
    work: Path, lich: Any, scripted: Any
) -> None:
    server = scripted(["done"])
    write_config(work, server.base_url)

    root = lich("--", "--dash-task", "and more")
    run = lich("run", "--", "-v", "is a flag?")

    assert root.exit_code == 0, root.stderr
    assert run.exit_code == 0, run.stderr
    assert server.user_messages(0) == ["--dash-task and more"]
    assert server.user_messages(1) == ["-v is a flag?"]


def test_a_command_of_a_plugin_that_failed_to_load_names_the_failure(
    work: Path, lich: Any, scripted: Any
) -> None:
    server = scripted(["should never be asked"])
    (work / "shout.py").write_text("import no_such_module_here\n", encoding="utf-8")
    write_config(work, server.base_url, plugins=["openai_compat", "shout.py"])

    result = lich("shout", "hello")

    assert result.exit_code == 2
    assert "lich: error: unknown command 'shout': the plugin 'shout', which would" in result.stderr
    assert "failed to load" in result.stderr
    assert "no_such_module_here" in result.stderr
    assert server.requests == []


def test_plugin_commands_are_found_from_flags_after_them(
    work: Path, lich: Any, scripted: Any
) -> None:
    server = scripted(["should never be asked"])
    write_config(work, server.base_url)  # the default plugins: no nats
    other = work / "cluster.toml"
    other.write_text(config_text(server.base_url, extra='plugins = ["+nats"]'), encoding="utf-8")

    worker = lich("worker", "--config", str(other), "--help")
    worker_eq = lich("worker", f"--config={other}", "--help")
    plugin = lich("worker", "--plugin", "nats", "--help")
    status = lich("cluster", "status", "--config", str(other), "--help")
    before = lich("--config", str(other), "cluster", "status", "--help")

    for result in (worker, worker_eq, plugin):
        assert result.exit_code == 0, result.stderr
        assert result.stdout.startswith("Usage: cli worker [OPTIONS]"), result.stdout
    for result in (status, before):
        assert result.exit_code == 0, result.stderr
        assert result.stdout.startswith("Usage: cli cluster status [OPTIONS]"), result.stdout
    assert server.requests == []


@pytest.mark.parametrize(("words", "plugin"), [
    (["worker", "--concurrency", "2"], "nats"),
    (["cluster", "status"], "nats"),
    (["mcp", "list"], "mcp"),
    (["gateway"], "gateway"),
])
def test_a_command_of_an_installed_plugin_not_enabled_exits_2(
    words: list[str], plugin: str, work: Path, lich: Any, scripted: Any
) -> None:
    server = scripted(["should never be asked"])
    write_config(work, server.base_url, plugins=["builtin_tools", "openai_compat"])

    result = lich(*words)

    assert result.exit_code == 2, result.stdout
    assert (f"lich: error: the command {words[0]!r} is of the plugin {plugin!r}, which is "
            f"installed but not enabled: add it with plugins = [\"+{plugin}\"]") in result.stderr
    assert f"--plugin {plugin}" in result.stderr
    assert server.requests == []
    assert not (work / ".lich" / "sessions").exists()  # no run, so no transcript
