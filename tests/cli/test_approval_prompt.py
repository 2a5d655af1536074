"""The terminal approval prompt of ``lich TASK`` and ``lich chat``, driven for real: a
``lich`` subprocess on a pseudo-terminal (stdin, stdout and stderr), keys typed into
it, against the scripted model server on 127.0.0.1. What the model was told is read
from the server's recorded requests; what was recorded, from the transcript.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lich.sessions import JsonlSessionStore
from lich.testing import Reply, ScriptRequest, calls_responder, wait_for
from lich.types import ToolCall

from .approval_terminal import (
    Terminal,
    terminal_env,
    tool_results,
    write_plugin,
)
from .conftest import write_config

PROMPT = "[y]es / [n]o / [s]ession / [a]lways / [e]dit?"
CTRL_U = "\x15"  # prompt_toolkit: delete the line before the cursor


@pytest.fixture
def terminals() -> Iterator[Any]:
    """Factory: ``terminals(*args, cwd=..., **env)`` → a :class:`Terminal`, stopped after."""
    opened: list[Terminal] = []

    def start(*args: str, cwd: Path, **env: str) -> Terminal:
        term = Terminal(args, cwd, terminal_env(**env))
        opened.append(term)
        return term

    yield start
    for term in opened:
        term.close()


def setup(work: Path, scripted: Any, *calls: tuple[str, dict[str, Any]],
          extra: str = "", answer: str = "all done") -> Any:
    plugin = write_plugin(work)
    server = scripted(responder=calls_responder(*calls, final=answer))
    # The approvals plugin too: the rules a session/always answer grants, and the grants
    # themselves, are its own (the test plugin's Ask offers none).
    write_config(work, server.base_url, plugins=["openai_compat", "approvals", str(plugin)],
                 extra=extra)
    return server


def resolutions(work: Path) -> list[dict[str, Any]]:
    """The approval_resolved events of the only session's transcript."""
    store = JsonlSessionStore(work / ".lich" / "sessions")
    (info,) = store.list()
    records = store.read(info.session_id).records
    return [r["event"] for r in records
            if r.get("kind") == "event" and r["event"].get("type") == "approval_resolved"]


NOTE_A = ("note", {"path": "a.txt", "text": "new line"})


def chat_prompt(term: Terminal, *, after_run: bool = True) -> None:
    """Wait for the chat's prompt (drawn once prompt_toolkit reads keys): after the
    banner, or after a run's ``[turns · tokens]`` line."""
    term.expect("tokens" if after_run else "Ctrl-D leaves")
    term.expect(">")


def test_one_shot_yes_runs_the_call_after_showing_the_diff(
    work: Path, scripted: Any, terminals: Any
) -> None:
    (work / "a.txt").write_text("old line\n", encoding="utf-8")
    server = setup(work, scripted, NOTE_A)

    term = terminals("write the note", cwd=work)
    shown = term.expect(PROMPT)
    term.send("y\r")
    term.expect("all done")

    assert term.wait() == 0, term.text
    assert "note wants to run — notes need a human" in shown
    assert '"text": "new line"' in shown
    assert "-old line" in shown  # the tool's preview
    assert "+new line" in shown
    assert "a session or always answer allows exactly: note(a.txt)" in shown
    assert (work / "a.txt").read_text(encoding="utf-8") == "new line\n"
    assert tool_results(server.requests) == ["wrote a.txt"]
    (resolved,) = resolutions(work)
    assert (resolved["approved"], resolved["approver"], resolved["scope"]) == (
        True, "terminal", "once")


def test_one_shot_no_tells_the_model_the_message(
    work: Path, scripted: Any, terminals: Any
) -> None:
    server = setup(work, scripted, NOTE_A, answer="understood")

    term = terminals("write the note", cwd=work)
    term.expect(PROMPT)
    term.send("n\r")
    term.expect("message for the model")
    term.send("write it to b.txt instead\r")
    term.expect("understood")

    assert term.wait() == 0, term.text
    assert not (work / "a.txt").exists()
    (result,) = tool_results(server.requests)
    assert json.loads(result)["error"] == "approval_denied: write it to b.txt instead"
    (resolved,) = resolutions(work)
    assert resolved["approved"] is False
    assert resolved["approver"] == "terminal"


def test_chat_session_answer_is_not_asked_again(
    work: Path, scripted: Any, terminals: Any
) -> None:
    server = setup(work, scripted, NOTE_A, ("note", {"path": "a.txt", "text": "newer"}))

    term = terminals("chat", cwd=work)
    chat_prompt(term, after_run=False)
    term.send("write twice\r")
    term.expect(PROMPT)
    term.send("s\r")
    term.expect("all done")
    shown = term.text
    chat_prompt(term)
    term.send("/exit\r")

    assert term.wait() == 0, term.text
    assert "allowed by an earlier approval in this session" in shown
    # Asked once: prompt_toolkit may draw the prompt twice, never a second request.
    assert shown.count("note wants to run") == 1
    assert tool_results(server.requests) == ["wrote a.txt", "wrote a.txt"]
    assert (work / "a.txt").read_text(encoding="utf-8") == "newer\n"
    first, second = resolutions(work)
    assert (first["approver"], first["scope"]) == ("terminal", "session")
    assert (second["approver"], second["scope"]) == ("session", "session")


def test_edit_inline_re_asks_on_bad_json_then_runs_the_edited_call(
    work: Path, scripted: Any, terminals: Any
) -> None:
    server = setup(work, scripted, NOTE_A)

    term = terminals("write the note", cwd=work)
    term.expect(PROMPT)
    term.send("e\r")
    term.expect("arguments as JSON")
    term.send(CTRL_U + "{not json\r")
    term.expect("not valid JSON")
    term.expect("arguments as JSON")
    term.send(CTRL_U + '{"path": "b.txt", "text": "edited"}\r')
    term.expect("all done")

    assert term.wait() == 0, term.text
    assert not (work / "a.txt").exists()
    assert (work / "b.txt").read_text(encoding="utf-8") == "edited\n"
    assert tool_results(server.requests) == ["wrote b.txt"]
    (resolved,) = resolutions(work)
    assert resolved["approved"] is True
    assert resolved["args"] == {"path": "b.txt", "text": "edited"}


def test_edit_in_the_editor_checks_the_schema_again(
    work: Path, scripted: Any, terminals: Any, tmp_path: Path
) -> None:
    server = setup(work, scripted, NOTE_A)
    # A scripted $VISUAL: the first time it leaves out "text" (the tool's schema requires
    # it, so the person is asked again), the second time it writes c.txt.
    editor = tmp_path / "editor.py"
    count = tmp_path / "editor-runs"
    editor.write_text(
        "import json, pathlib, sys\n"
        f"count = pathlib.Path({str(count)!r})\n"
        "runs = int(count.read_text()) if count.exists() else 0\n"
        "count.write_text(str(runs + 1))\n"
        "path = pathlib.Path(sys.argv[1])\n"
        "args = json.loads(path.read_text())\n"
        "args['path'] = 'c.txt'\n"
        "if runs == 0:\n"
        "    del args['text']\n"
        "else:\n"
        "    args['text'] = 'from the editor'\n"
        "path.write_text(json.dumps(args))\n",
        encoding="utf-8",
    )

    term = terminals("write the note", cwd=work, VISUAL=f"{sys.executable} {editor}")
    term.expect(PROMPT)
    term.send("e\r")
    term.expect("the tool does not accept these arguments")
    term.expect("all done")

    assert term.wait() == 0, term.text
    assert count.read_text() == "2"
    assert (work / "c.txt").read_text(encoding="utf-8") == "from the editor\n"
    assert tool_results(server.requests) == ["wrote c.txt"]


def test_one_shot_ctrl_c_at_the_prompt_denies_and_aborts(
    work: Path, scripted: Any, terminals: Any
) -> None:
    server = setup(work, scripted, NOTE_A)

    term = terminals("write the note", cwd=work)
    term.expect(PROMPT)
    term.send("\x03")
    term.expect("the call is denied and the run cancelled")
    term.expect("run aborted")

    assert term.wait() == 130, term.text  # as Ctrl-C anywhere in a run
    assert not (work / "a.txt").exists()
    assert len(server.requests) == 1  # the model is not called again
    (resolved,) = resolutions(work)
    assert resolved["approved"] is False
    store = JsonlSessionStore(work / ".lich" / "sessions")
    assert store.list()[0].status == "aborted"


def test_chat_ctrl_c_at_the_prompt_cancels_the_run_not_the_chat(
    work: Path, scripted: Any, terminals: Any
) -> None:
    server = setup(work, scripted, NOTE_A)

    term = terminals("chat", cwd=work)
    chat_prompt(term, after_run=False)
    term.send("write the note\r")
    term.expect(PROMPT)
    term.send("\x03")
    term.expect("the call is denied and the run cancelled")
    term.expect("aborted")
    asked = len(server.requests)
    chat_prompt(term)
    term.send("/exit\r")

    assert term.wait() == 0, term.text
    assert asked == 1
    assert not (work / "a.txt").exists()


def test_chat_after_an_approval_timeout_the_next_line_goes_to_the_chat(
    work: Path, scripted: Any, terminals: Any
) -> None:
    server = setup(work, scripted, NOTE_A, extra="approval_timeout_s = 1")

    term = terminals("chat", cwd=work)
    chat_prompt(term, after_run=False)
    term.send("write the note\r")
    term.expect(PROMPT)
    term.expect("approval_timeout")  # nobody answered: the core denied the call
    term.expect("all done")
    chat_prompt(term)
    term.send("and now this\r")
    term.expect("all done")
    chat_prompt(term)
    term.send("/exit\r")

    assert term.wait() == 0, term.text
    # The line typed after the timeout reached the chat (no forgotten question ate it).
    last_users = [m.content for m in server.requests[-1].messages if m.role == "user"]
    assert last_users == ["write the note", "and now this"]
    result = tool_results(server.requests[:2])[0]
    assert json.loads(result)["error"].startswith("approval_timeout")


CONFIG_COMMENT = "# keep this comment: the person's own words"


def test_always_writes_the_rule_to_the_chosen_config_keeping_its_comments(
    work: Path, scripted: Any, terminals: Any
) -> None:
    server = setup(work, scripted, NOTE_A, ("note", {"path": "a.txt", "text": "again"}),
                   extra=CONFIG_COMMENT)
    config = work / ".lich" / "config.toml"

    term = terminals("write twice", cwd=work)
    term.expect(PROMPT)
    term.send("a\r")
    listed = term.expect("which file?")
    term.send("1\r")
    term.expect("all done")

    assert term.wait() == 0, term.text
    assert "always allow: note(a.txt)" in listed
    assert f"1) this project: {config}" in listed
    text = config.read_text(encoding="utf-8")
    assert CONFIG_COMMENT in text
    assert 'kind = "openai_compat"' in text
    assert tomllib.loads(text)["approvals"]["allow"] == ["note(a.txt)"]
    assert term.text.count("note wants to run") == 1  # the second call is covered
    assert tool_results(server.requests) == ["wrote a.txt", "wrote a.txt"]
    first, second = resolutions(work)
    assert (first["scope"], first["message"]) == ("always", f"allow rules written to {config}")
    assert second["approver"] == "session"


def test_always_that_cannot_write_says_so_and_approves_for_the_session(
    work: Path, scripted: Any, terminals: Any, tmp_path: Path
) -> None:
    setup(work, scripted, NOTE_A)
    # The user config's path is a directory: it cannot be written.
    user_config = tmp_path / "home" / ".config" / "lich" / "config.toml"
    user_config.mkdir(parents=True)

    term = terminals("write the note", cwd=work)
    term.expect(PROMPT)
    term.send("a\r")
    listed = term.expect("which file?")
    term.send("2\r")
    term.expect("approved for this session only")
    term.expect("all done")

    assert term.wait() == 0, term.text
    assert f"2) your user config: {user_config}" in listed
    assert f"could not write {user_config}" in term.text
    project = tomllib.loads((work / ".lich" / "config.toml").read_text(encoding="utf-8"))
    assert "approvals" not in project  # no [approvals] table: nothing was written
    (resolved,) = resolutions(work)
    assert (resolved["approved"], resolved["scope"]) == (True, "session")
    assert resolved["message"].startswith(f"always: writing {user_config} failed")


def test_ctrl_c_still_cancels_the_run_after_an_approval(
    work: Path, scripted: Any, terminals: Any
) -> None:
    """The prompt leaves the run's SIGINT handler in place: a later Ctrl-C cancels."""
    plugin = write_plugin(work)

    def respond(request: ScriptRequest) -> Reply:
        if not request.tool_results_since_user():
            return Reply(tool_calls=(ToolCall("c1", *NOTE_A),))
        return Reply("too late", delay_s=60)  # the run waits here until cancelled

    server = scripted(responder=respond)
    write_config(work, server.base_url, plugins=["openai_compat", str(plugin)])

    term = terminals("write the note", cwd=work)
    term.expect(PROMPT)
    term.send("y\r")
    term.expect("approved by terminal")
    wait_for(lambda: len(server.requests) == 2, 60, "the model call after the tool")
    os.kill(term.proc.pid, signal.SIGINT)
    term.expect("cancelling the run")

    assert term.wait() == 130, term.text
    assert (work / "a.txt").exists()


def test_the_default_plugins_ask_before_write_file_and_show_its_diff(
    work: Path, scripted: Any, terminals: Any
) -> None:
    """No test plugin: the builtin approvals plugin asks, the builtin tool previews."""
    (work / "notes.md").write_text("first\nsecond\n", encoding="utf-8")
    server = scripted(responder=calls_responder(
        ("write_file", {"path": "notes.md", "content": "first\nchanged\n"}), final="all done"))
    write_config(work, server.base_url)  # the default plugins

    term = terminals("edit the notes", cwd=work)
    shown = term.expect(PROMPT)
    term.send("y\r")
    term.expect("all done")

    assert term.wait() == 0, term.text
    assert "write_file wants to run" in shown
    assert "-second" in shown
    assert "+changed" in shown
    assert (work / "notes.md").read_text(encoding="utf-8") == "first\nchanged\n"
    assert tool_results(server.requests)[0].startswith("wrote ")


def test_a_session_answer_to_a_command_grants_that_command_and_says_so(
    work: Path, scripted: Any, terminals: Any
) -> None:
    """``cat README.md`` approved for the session covers itself, not
    ``cat README.md secret.txt``; a line no exact rule can cover says so."""
    (work / "README.md").write_text("read me\n", encoding="utf-8")
    (work / "secret.txt").write_text("the secret\n", encoding="utf-8")
    server = scripted(responder=calls_responder(
        ("terminal", {"command": "cat README.md"}),
        ("terminal", {"command": "cat README.md"}),
        ("terminal", {"command": "cat README.md secret.txt"}),
        ("terminal", {"command": "cat $(echo README.md)"}),
        final="all done"))
    write_config(work, server.base_url)  # the default plugins

    term = terminals("read the readme", cwd=work)
    shown = term.expect(PROMPT)
    assert "a session or always answer allows exactly: terminal(cat README.md)" in shown
    assert "*" not in shown.split("answer allows exactly:")[1].splitlines()[0]
    term.send("s\r")
    # The second call is the same line: it runs unasked. The third is wider: asked.
    term.expect("allows exactly: terminal(cat README.md secret.txt)")
    term.expect(PROMPT)
    term.send("n\r")
    term.expect("message for the model")
    term.send("\r")
    term.expect('"command": "cat $(echo README.md)"')
    term.expect("a session or always answer allows only this call")
    term.expect(PROMPT)
    term.send("n\r")
    term.expect("message for the model")
    term.send("\r")
    term.expect("all done")

    assert term.wait() == 0, term.text
    results = tool_results(server.requests)
    assert results[0].count("read me") == 1
    assert results[1].count("read me") == 1
    assert "the secret" not in " ".join(results)
    approvers = [(r["approved"], r["approver"], r["scope"]) for r in resolutions(work)]
    assert approvers[:2] == [(True, "terminal", "session"), (True, "session", "session")]
    assert [a[0] for a in approvers[2:]] == [False, False]


def test_with_stderr_redirected_the_question_is_asked_on_the_terminal(
    work: Path, scripted: Any, tmp_path: Path
) -> None:
    """stdin a terminal, stderr a file (``lich TASK 2>log``): the question goes to the
    controlling terminal (/dev/tty), in plain lines, and is answered there; the log
    says where it was asked and does not hold the question nobody would see."""
    server = setup(work, scripted, NOTE_A)
    log = tmp_path / "stderr.log"
    with log.open("wb") as err:
        term = Terminal(("write the note",), work, terminal_env(), stderr=err)
        try:
            shown = term.expect(PROMPT)
            term.send("s\r")
            term.expect("all done")
            assert term.wait() == 0, log.read_text(encoding="utf-8")
        finally:
            term.close()

    assert "note wants to run — notes need a human" in shown
    text = log.read_text(encoding="utf-8")
    assert PROMPT not in text
    assert "approval questions are asked on the terminal (/dev/tty)" in text
    assert tool_results(server.requests) == ["wrote a.txt"]
    (resolved,) = resolutions(work)
    assert (resolved["approver"], resolved["scope"]) == ("terminal", "session")


def test_with_stderr_redirected_and_no_controlling_terminal_the_call_is_denied_at_once(
    work: Path, scripted: Any, tmp_path: Path
) -> None:
    """No /dev/tty to ask on: lich says so before the run and denies the call that asks
    at once, instead of waiting silently (here for ever: approval_timeout_s = 0, so a
    wait would end only at the bound of term.wait and fail the test)."""
    server = setup(work, scripted, NOTE_A, extra="approval_timeout_s = 0")
    log = tmp_path / "stderr.log"
    with log.open("wb") as err:
        term = Terminal(("write the note",), work, terminal_env(), stderr=err,
                        controlling=False)
        try:
            assert term.wait() == 0, log.read_text(encoding="utf-8")
        finally:
            term.close()
    text = log.read_text(encoding="utf-8")
    assert "/dev/tty cannot be opened" in text
    assert PROMPT not in text
    assert PROMPT not in term.text
    assert json.loads(tool_results(server.requests)[0])["error"].startswith(
        "approval_unavailable: ")
