"""#28.8 attacked again: escape sequences in other things lich prints.

A chat user's (or a prompt's) first message becomes the session's title; the fix's
tests look at the answer, tool errors and ``lich sessions show``. Here the title
carries OSC 52, a title change, line erasing and a bidi override, and the
operator lists, removes and prunes sessions: every line written for a person
spells the sequences out; ``--json`` keeps them byte for byte.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from cli.conftest import run_lich, scripted, work, write_config

from lich.testing import Reply

__all__ = ["scripted", "work"]  # the fixtures, imported to be used here

ATTACK = "hi \x1b]52;c;ZWNobyBwd25lZA==\x07\x1b]0;t\x07\x1b[2K\r\x9b31m \u202egnp.exe \u200bx"
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b\u200c\u200e\u200f"
                    "\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\U000e0000-\U000e007f]")


@pytest.mark.parametrize("command", [("sessions", "list"), ("sessions", "rm", "--dry-run"),
                                     ("sessions", "rm"),
                                     ("sessions", "prune", "--older-than", "0s", "--dry-run"),
                                     ("sessions", "prune", "--older-than", "0s")],
                         ids=" ".join)
def test_a_session_title_reaches_the_terminal_inert(work: Path, scripted: Any,
                                                    command: tuple[str, ...]) -> None:
    server = scripted([Reply("ok")])
    write_config(work, server.base_url)
    done = run_lich("run", "--json", ATTACK, cwd=work)
    assert done.returncode == 0, done.stderr
    listed = json.loads(run_lich("sessions", "list", "--json", cwd=work).stdout)
    (session,) = listed
    assert ATTACK.split()[1] in session["title"]  # --json: the bytes as they are
    args = list(command)
    if command[1] == "rm":
        args.append(session["id"] if "id" in session else session["session_id"])
    proc = run_lich(*args, cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert "\\x1b]52" in proc.stdout + proc.stderr  # the title was printed, spelled out
    for name, text in (("stdout", proc.stdout), ("stderr", proc.stderr)):
        assert not UNSAFE.search(text), f"{name}: {UNSAFE.findall(text)!r}"
