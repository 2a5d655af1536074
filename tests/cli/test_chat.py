"""`lich chat`: memory across lines, slash commands, sessions."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from lich.agent import Agent
from lich.cli.chat import KEYS_HELP, ChatSession
from lich.cli.options import CliSettings
from lich.sessions import JsonlSessionStore
from lich.slash import SLASH_COMMANDS
from lich.testing import Fail, Reply, ScriptedChat, ScriptRequest, make_test_config

from .conftest import run_lich, write_config


def remembering(request: ScriptRequest) -> Any:
    """Answers with the first thing the user said in this conversation."""
    users = [m.content for m in request.messages if m.role == "user"]
    if len(users) == 1:
        return Reply(f"Noted: {users[0]}")
    return Reply(f"Earlier you said: {users[0]} (messages so far: {len(users)})")


def test_chat_remembers_the_first_line_in_the_second(
    work: Path, scripted: Any, lich: Any
) -> None:
    server = scripted(responder=remembering)
    write_config(work, server.base_url)

    result = lich("chat", input="my name is Ada\nwhat is my name?\n")

    assert result.exit_code == 0, result.stderr
    assert "Noted: my name is Ada" in result.stdout
    assert "Earlier you said: my name is Ada (messages so far: 2)" in result.stdout
    second = server.requests[1].messages
    assert [m.content for m in second if m.role == "user"] == ["my name is Ada",
                                                              "what is my name?"]
    assert any(m.role == "assistant" and m.content == "Noted: my name is Ada" for m in second)
    # One session file holds the whole conversation.
    sessions = JsonlSessionStore(work / ".lich" / "sessions").list()
    assert len(sessions) == 1
    history = JsonlSessionStore(work / ".lich" / "sessions").history(sessions[0].session_id)
    assert [m.content for m in history if m.role == "user"] == ["my name is Ada",
                                                               "what is my name?"]


def test_chat_in_a_subprocess_remembers(work: Path, scripted: Any) -> None:
    server = scripted(responder=remembering)
    write_config(work, server.base_url)

    proc = run_lich("chat", cwd=work, input="the secret word is teal\nwhat was it?\n/exit\n")

    assert proc.returncode == 0, proc.stderr
    assert "Earlier you said: the secret word is teal" in proc.stdout
    assert len(server.requests) == 2


def test_chat_slash_commands(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted(responder=remembering)
    write_config(work, server.base_url)

    result = lich("chat", input="\n".join([
        "/help",
        "first thought",
        "/usage",
        "/model",
        "/new",
        "fresh start",
        "/sessions",
        "/bogus",
        "/quit",
        "never sent",
    ]) + "\n")

    assert result.exit_code == 0, result.stderr
    err = result.stderr
    assert "/resume ID|latest" in err  # /help
    assert "this chat: 1 run," in err  # /usage
    assert "model: scripted-model (provider scripted, kind openai_compat)" in err
    assert "new session" in err
    assert "unknown command /bogus (/help lists the commands)" in err
    # /new forgot the first conversation.
    assert server.user_messages(1) == ["fresh start"]
    assert "Noted: fresh start" in result.stdout
    # /quit stopped reading: the last line was never sent.
    assert len(server.requests) == 2
    # /sessions listed both conversations.
    assert err.count("first thought") >= 1
    assert "fresh start" in err


def test_chat_resume_latest_and_by_id(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted(responder=remembering)
    write_config(work, server.base_url)
    assert lich("remember pears").exit_code == 0
    sid = JsonlSessionStore(work / ".lich" / "sessions").list()[0].session_id

    by_flag = lich("chat", "--resume", "latest", input="what did I say?\n")
    by_command = lich("chat", input=f"/resume {sid}\nand now?\n")

    assert by_flag.exit_code == 0, by_flag.stderr
    assert "Earlier you said: remember pears (messages so far: 2)" in by_flag.stdout
    assert by_command.exit_code == 0, by_command.stderr
    assert f"resumed session {sid}" in by_command.stderr
    assert "Earlier you said: remember pears (messages so far: 3)" in by_command.stdout


def test_chat_resume_of_a_missing_session(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted()
    write_config(work, server.base_url)

    flag = lich("chat", "--resume", "latest", input="hi\n")
    command = lich("chat", input="/resume nope-1\n/exit\n")

    assert flag.exit_code == 2
    assert "no sessions" in flag.stderr
    assert command.exit_code == 0
    assert "nope-1" in command.stderr


def test_chat_model_switch(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted(["one", "two"])
    write_config(work, server.base_url)

    result = lich("chat", input="hello\n/model other-model\nagain\n")

    assert result.exit_code == 0, result.stderr
    assert [r.model for r in server.requests] == ["scripted-model", "other-model"]
    assert server.user_messages(1) == ["hello", "again"]


def test_chat_survives_a_model_failure(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted([Fail(400, {"error": {"message": "context too long"}}), "recovered"])
    write_config(work, server.base_url)

    result = lich("chat", input="first\nsecond\n")

    assert result.exit_code == 0
    assert "model call failed" in result.stderr
    assert "recovered" in result.stdout


def test_chat_ignores_empty_lines_and_takes_no_task(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted(["hi there"])
    write_config(work, server.base_url)

    result = lich("chat", input="\n   \nhello\n")
    extra = lich("chat", "a task")

    assert result.exit_code == 0
    assert len(server.requests) == 1
    assert extra.exit_code == 2


def test_chat_usage_counts_tokens(work: Path, scripted: Any, lich: Any) -> None:
    from lich.types import Usage

    server = scripted([Reply("a", usage=Usage(10, 2, 12)), Reply("b", usage=Usage(20, 3, 23))])
    write_config(work, server.base_url)

    result = lich("chat", input="one\ntwo\n/usage\n")

    assert result.exit_code == 0
    assert "this chat: 2 runs, 30 prompt + 5 completion = 35 tokens" in result.stderr
    assert "last run: 20 prompt + 3 completion = 23 tokens" in result.stderr


def test_chat_counts_say_one_run_one_turn_and_group_digits(
    work: Path, scripted: Any, lich: Any
) -> None:
    from lich.types import Usage

    server = scripted([Reply("a", usage=Usage(1200, 34, 1234))])
    write_config(work, server.base_url)

    result = lich("chat", input="one\n/usage\n")

    assert result.exit_code == 0, result.stderr
    assert "[1 turn · 1,234 tokens]" in result.stderr
    assert "this chat: 1 run, 1,200 prompt + 34 completion = 1,234 tokens" in result.stderr
    assert "1 runs" not in result.stderr
    assert "1 turns" not in result.stderr


def _session(tmp_path: Path, console: Console) -> ChatSession:
    """A chat session on a scripted model, its stderr going to ``console``."""
    config = make_test_config(tmp_path)
    agent = Agent(config, chat=ScriptedChat([]))
    return ChatSession(CliSettings(), config, agent, console)


def test_chat_help_is_generated_from_the_shared_table(
    work: Path, scripted: Any, lich: Any
) -> None:
    server = scripted()
    write_config(work, server.base_url)

    result = lich("chat", input="/help\n")

    assert result.exit_code == 0, result.stderr
    expected = [*SLASH_COMMANDS.help_lines("chat"), KEYS_HELP]
    assert result.stderr.splitlines() == expected


def test_chat_has_a_handler_for_every_command_of_the_table(tmp_path: Path) -> None:
    session = _session(tmp_path, Console(file=io.StringIO()))
    assert set(session.handlers()) == {c.name for c in SLASH_COMMANDS.for_front_end("chat")}


def test_chat_unknown_commands_and_missing_arguments(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted()
    write_config(work, server.base_url)

    result = lich("chat", input="/sesions\n/resume\n/\n/q\nnever sent\n")

    assert result.exit_code == 0, result.stderr
    err = result.stderr
    assert "unknown command /sesions: did you mean /sessions? (/help lists them)" in err
    assert "usage: /resume ID|latest — continue a recorded session" in err
    assert "unknown command / (/help lists the commands)" in err
    assert server.requests == []  # /q quit before the last line, and commands never reach it


async def test_chat_clear_clears_a_terminal_and_leaves_piped_output_alone(
    tmp_path: Path,
) -> None:
    terminal = io.StringIO()
    session = _session(tmp_path, Console(file=terminal, force_terminal=True))
    assert await session.command("/clear") is False  # the chat goes on
    assert "\x1b[2J" in terminal.getvalue()

    piped = io.StringIO()
    session = _session(tmp_path, Console(file=piped, force_terminal=False))
    assert await session.command("/CLEAR") is False
    assert piped.getvalue() == ""


async def test_chat_command_refuses_text_that_is_not_a_command(tmp_path: Path) -> None:
    session = _session(tmp_path, Console(file=io.StringIO()))
    with pytest.raises(ValueError, match="not a slash command"):
        await session.command("hello")
