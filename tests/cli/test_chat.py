"""`lich chat`: memory across lines, slash commands, sessions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lich.sessions import SessionStore
from lich.testing import Fail, Reply, ScriptRequest

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
    sessions = SessionStore(work / ".lich" / "sessions").list()
    assert len(sessions) == 1
    history = SessionStore(work / ".lich" / "sessions").history(sessions[0].session_id)
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
    assert "this chat: 1 runs" in err  # /usage
    assert "model: scripted-model (provider scripted, kind openai_compat)" in err
    assert "new session" in err
    assert "unknown command /bogus" in err
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
    sid = SessionStore(work / ".lich" / "sessions").list()[0].session_id

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
