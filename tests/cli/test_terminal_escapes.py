"""Escape sequences from a model never reach the terminal raw (issue 28, item 8).

A model (or the chat user it quotes) can put terminal control sequences in its
answer and in a tool call's arguments: OSC 52 writes the clipboard, OSC 0 sets
the window title, CSI sequences erase lines, a bidi override or a zero-width
character makes the screen show other text than there is. A real ``lich``
process against the scripted model on loopback: what it writes for a person
(the answer on stdout, progress and tool errors on stderr, ``lich sessions
show``) spells each out; ``--json`` and the transcript keep the bytes exactly.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from lich.testing import Reply
from lich.types import ToolCall
from lich.visible import visible

from .conftest import json_lines, run_lich, write_config

OSC52 = "\x1b]52;c;ZWNobyBwd25lZA==\x07"  # put "echo pwned" on the clipboard
TITLE = "\x1b]0;innocent\x07"
ERASE = "\x1b[2K\r\x1b[1A"  # erase the line, go back up
CSI_C1 = "\x9b31m"  # an 8-bit CSI
BIDI = "\u202egnp.exe"  # shows as "exe.png"
HIDDEN = "a\u200bb\u2060c\ufeffd" + "".join(chr(0xE0000 + ord(c)) for c in "rm -rf")
ATTACK = f"Done.{OSC52}{TITLE}{ERASE}{CSI_C1} file {BIDI} {HIDDEN} bell\x07 del\x7f end"

# Anything a terminal acts on, or that hides or reorders text on screen.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b\u200c\u200e\u200f"
                    "\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\U000e0000-\U000e007f]")


def _steps() -> list[Reply]:
    # The tool call's path carries the sequences too: its error comes back on stderr.
    bad_path = f"missing{OSC52}{ERASE}.txt"
    return [
        Reply(tool_calls=(ToolCall("c1", "read_file", {"path": bad_path}),)),
        Reply(ATTACK),
    ]


def _transcript(work: Path) -> Path:
    (path,) = (work / ".lich" / "sessions").glob("*.jsonl")
    return path


@pytest.mark.parametrize("stream", [True, False])
def test_the_answer_progress_and_tool_errors_are_shown_inert(
    work: Path, scripted: Any, stream: bool
) -> None:
    server = scripted(_steps())
    write_config(work, server.base_url, extra=f"stream = {'true' if stream else 'false'}")
    proc = run_lich("run", "read it", cwd=work)
    assert proc.returncode == 0, proc.stderr
    for stream_name, text in (("stdout", proc.stdout), ("stderr", proc.stderr)):
        assert not UNSAFE.search(text), f"{stream_name}: {UNSAFE.findall(text)!r}"
    assert visible(ATTACK) in proc.stdout
    assert "\\x1b]52;c;ZWNobyBwd25lZA==\\x07" in proc.stdout
    assert "\\u202egnp.exe" in proc.stdout
    assert "\\U000e0072" in proc.stdout  # the hidden "r" of the tag characters
    assert "missing\\x1b]52" in proc.stderr  # the failed call's arguments, inert

    # The transcript keeps the answer byte for byte.
    records = [json.loads(line) for line in _transcript(work).read_text("utf-8").splitlines()]
    answers = [r["message"]["content"] for r in records
               if r.get("kind") == "message" and r["message"].get("role") == "assistant"]
    assert ATTACK in answers


def test_json_keeps_the_bytes_exactly(work: Path, scripted: Any) -> None:
    server = scripted(_steps())
    write_config(work, server.base_url)
    proc = run_lich("run", "--json", "read it", cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout  # JSON escapes it (\u001b): the line itself is inert
    events = json_lines(proc.stdout)
    replies = [e["result"]["message"]["content"] for e in events if e["type"] == "llm_end"]
    assert replies[-1] == ATTACK


def test_sessions_show_renders_a_transcript_inert(work: Path, scripted: Any) -> None:
    server = scripted(_steps())
    write_config(work, server.base_url)
    assert run_lich("run", "read it", cwd=work).returncode == 0
    shown = run_lich("sessions", "show", "latest", cwd=work)
    assert shown.returncode == 0, shown.stderr
    assert not UNSAFE.search(shown.stdout), UNSAFE.findall(shown.stdout)
    assert visible(ATTACK) in shown.stdout
    as_json = run_lich("sessions", "show", "latest", "--json", cwd=work)
    messages = json.loads(as_json.stdout)["messages"]
    assert any(m.get("content") == ATTACK for m in messages)


@pytest.mark.parametrize(("raw", "shown"), [
    ("\x1b[2J", "\\x1b[2J"),
    ("a\rb", "a\\x0db"),
    ("\x00\x07\x08\x7f", "\\x00\\x07\\x08\\x7f"),
    ("\x9b", "\\x9b"),
    ("\u202e\u2066\u200f", "\\u202e\\u2066\\u200f"),
    ("\u200b\ufeff", "\\u200b\\ufeff"),
    ("\U000e0041", "\\U000e0041"),
    # Left alone: lines, tabs, ordinary non-ASCII text, an emoji's zero-width joiner.
    ("two\nlines\tand tabs", "two\nlines\tand tabs"),
    ("naïve café 日本語 👩\u200d💻", "naïve café 日本語 👩\u200d💻"),
])
def test_visible_spells_out_exactly_what_a_terminal_would_act_on(raw: str, shown: str) -> None:
    assert visible(raw) == shown
    assert visible(visible(raw)) == shown  # applying it twice changes nothing more


def test_the_tui_s_text_is_inert() -> None:
    from lich.tui.widgets.text import plain

    assert plain(f"x{OSC52}y").plain == f"x{visible(OSC52)}y"
