"""The terminal approver's parts in process: the stdin line reader (cancellable, no
line lost or stolen) and the dialog on a scripted input."""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from lich import Approval, ApprovalRequest, ToolCall
from lich.cli.approve import FdLineInput, TerminalApprover
from lich.config import LoadedConfig
from lich.testing import async_wait_for, make_test_config


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read, write = os.pipe()
    os.set_blocking(read, False)
    yield read, write
    for fd in (read, write):
        try:
            os.close(fd)
        except OSError:
            pass


async def test_a_cancelled_read_leaves_the_next_line_to_the_next_reader(
    pipe: tuple[int, int]
) -> None:
    read, write = pipe
    reader = FdLineInput(read)
    asked = asyncio.ensure_future(reader.line("question? "))
    await asyncio.sleep(0)  # the read is waiting on the pipe
    asked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asked
    os.write(write, b"for the chat\n")
    assert await asyncio.wait_for(reader.line("> "), 30) == "for the chat"


async def test_lines_are_assembled_and_kept_apart(pipe: tuple[int, int]) -> None:
    read, write = pipe
    reader = FdLineInput(read)
    os.write(write, b"fir")
    first = asyncio.ensure_future(reader.line("? "))
    await asyncio.sleep(0)
    os.write(write, "st\r\nsecond ünï\n".encode())
    assert await asyncio.wait_for(first, 30) == "first"
    assert await asyncio.wait_for(reader.line("? "), 30) == "second ünï"
    os.close(write)
    with pytest.raises(EOFError):
        await asyncio.wait_for(reader.line("? "), 30)


class Scripted:
    """A :class:`lich.cli.approve.LineInput` answering from a list."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.prompts: list[tuple[str, str]] = []

    async def line(self, prompt: str, default: str = "") -> str:
        self.prompts.append((prompt, default))
        if not self.answers:
            raise EOFError
        return self.answers.pop(0)


def approver(tmp_path: Path, answers: Scripted) -> tuple[TerminalApprover, io.StringIO]:
    out = io.StringIO()
    loaded = LoadedConfig(config=make_test_config(tmp_path), file=None, sources={})
    return TerminalApprover(loaded, Console(file=out, width=200), input=answers), out


def request(rules: tuple[str, ...] = ()) -> ApprovalRequest:
    return ApprovalRequest(id="ab12", call=ToolCall("c1", "note", {"path": "a.txt"}),
                           reason="needs a human", rules=rules)


async def test_no_terminal_means_no_answer(tmp_path: Path) -> None:
    loaded = LoadedConfig(config=make_test_config(tmp_path), file=None, sources={})
    quiet = TerminalApprover(loaded, Console(file=io.StringIO()), input=None)
    quiet.input = None
    assert await quiet.lich_request_approval(request()) is None


async def test_an_unknown_answer_lists_the_choices_and_asks_again(tmp_path: Path) -> None:
    answers = Scripted("maybe", "", "yes")
    terminal, out = approver(tmp_path, answers)

    answer = await terminal.lich_request_approval(request())

    assert answer == Approval(True, approver="terminal")
    assert len(answers.prompts) == 3
    assert "s  yes, and for the rest of the session" in out.getvalue()


async def test_always_without_rules_goes_back_and_end_of_input_denies(tmp_path: Path) -> None:
    terminal, out = approver(tmp_path, Scripted("a"))

    answer = await terminal.lich_request_approval(request(rules=()))

    assert "this call has no allow rule to write" in out.getvalue()
    assert answer is not None
    assert answer.approved is False
    assert answer.message == "the user gave no answer (end of input)"


async def test_edit_back_out_with_an_empty_answer(tmp_path: Path) -> None:
    answers = Scripted("e", "", "n", "")
    terminal, out = approver(tmp_path, answers)

    answer = await terminal.lich_request_approval(request())

    assert answer == Approval(False, approver="terminal")
    # The inline editor starts from the call's arguments.
    assert answers.prompts[1][1] == '{"path": "a.txt"}'
    assert "not edited" in out.getvalue()


async def test_ctrl_c_denies_and_interrupts(tmp_path: Path) -> None:
    class CtrlC(Scripted):
        async def line(self, prompt: str, default: str = "") -> str:
            raise KeyboardInterrupt

    interrupted: list[bool] = []
    loaded = LoadedConfig(config=make_test_config(tmp_path), file=None, sources={})
    terminal = TerminalApprover(loaded, Console(file=io.StringIO()), input=CtrlC(),
                                interrupt=lambda: interrupted.append(True))

    answer: Any = await terminal.lich_request_approval(request())

    await async_wait_for(lambda: interrupted, 5)
    assert answer.approved is False
    assert "Ctrl-C" in answer.message


async def test_control_characters_in_what_is_approved_are_shown_inert(tmp_path: Path) -> None:
    """A file's content (the diff) or the model's arguments cannot move the cursor or
    erase lines of the request: their control characters are written out."""
    tricky = ApprovalRequest(
        id="ab12", call=ToolCall("c1", "note", {"path": "a.txt", "text": "ok\x9b2K"}),
        reason="needs a human", rules=("note(a\x1b[8m.txt)",),
        preview="--- a/a.txt\n+++ b/a.txt\n-rm -rf /\x1b[1A\x1b[2K\r+harmless\n")
    terminal, out = approver(tmp_path, Scripted("a", "", "y"))

    await terminal.lich_request_approval(tricky)

    shown = out.getvalue()
    assert "\x1b" not in shown
    assert "\x9b" not in shown
    assert "\r" not in shown
    assert "-rm -rf /\\x1b[1A\\x1b[2K" in shown
    assert "ok\\x9b2K" in shown
    assert "always allow: note(a\\x1b[8m.txt)" in shown
