"""The approvals shell reader on hostile input: no crash, no hang (#28.3's reader).

tree-sitter-bash is C: a crash in it would take lich down, and a line that holds
the reader would hold the call. Each batch is read in a child process, so a
segfault is a failed test rather than a dead test run, and bounded in time by
the child's own timeout (generous: a hang is hours, not seconds). The inputs: deep
nesting, here-documents within substitutions within here-documents (a few
hundred bytes used to keep the reader busy for hours: every level read again),
long lines, odd bytes, unterminated quotes, and Hypothesis' texts of bash tokens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

_CHILD = """\
import json, sys
from lich.approvals.rules import RuleSet, decide
from lich.approvals.shell import read_line
from lich.tools import Tool
from lich.types import ToolResult
terminal = Tool(name="terminal", description="t",
                parameters={"type": "object", "required": ["command"],
                            "properties": {"command": {"type": "string"}}},
                execute=lambda a, c: ToolResult.success(""), requires_approval=True)
rules = RuleSet.parse(["terminal(git status*)"], (), ["terminal(touch*)"])
out = []
for line in json.load(sys.stdin):
    read = read_line(line)
    out.append([read.plain, decide(rules, "ask", "terminal", {"command": line}, terminal,
                                   "/w").action])
print(json.dumps(out))
"""


def _read_in_child(lines: list[str]) -> list[list[object]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(lines),
                          capture_output=True, text=True, timeout=600, env=env, check=False)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    result: list[list[object]] = json.loads(done.stdout)
    return result


def _crafted() -> list[str]:
    lines = []
    for n in (10, 100, 1000):
        lines += [
            "$(cat <<E\n" * n + "E\n)" * n,  # nested here-documents: read at every level
            "git status $(cat <<E\n" * n + "touch pwned\nE\n)" * n,
            "eval " * n + "touch pwned",
            "bash -c '" * n + "touch pwned",
            "{ " * n + "x", "${x:-" * n + "}" * n, "$((" * n, "[[ " * n, "a[" * n,
            "`" * n, "<(" * n, "((" * n + "1" + "))" * n, "x=(" * n, "f() { " * n,
            "cat " + "<<E " * n + "\n" + "E\n" * n, "cat <<" + "E" * n + "\n",
            "echo $'" + "\\" * n, "'" * n, '"' * n, "\r\n" * n, "a\\\n" * n,
            "git status {\U0010cc2f" * n, "{\U00085075" * n,
        ]
    lines += ["git status " + "a" * 70_000, "git status " + "$(" * 30_000]
    return lines


def test_crafted_lines_neither_crash_nor_hold_the_reader() -> None:
    lines = _crafted()
    results = _read_in_child(lines)
    assert len(results) == len(lines)
    for line, (_plain, action) in zip(lines, results, strict=True):
        assert action in ("ask", "deny"), line[:80]
        if line.startswith("eval eval"):  # bash runs `touch pwned` at the end
            assert action == "deny", line[:80]


_TOKENS = ["<<", "<<-", "<<<", "E", "'E'", "\\E", "\n", "\t", " ", "$(", ")", "`", "${",
           "}", "{", "(", "'", '"', "$'", "\\", ";", "|", "&", "#", "x", "$", "\nE\n",
           "$((", "))", "[[", "]]", "case", "in", "esac", "\r", "=", "[", "]", "<(",
           "git", "status", "touch", "\x1b", "\x7f", "é", "\U0001f600", "\u202e"]


@settings(max_examples=25)
@given(st.lists(st.lists(st.sampled_from(_TOKENS), max_size=80).map("".join),
                min_size=50, max_size=200))
def test_token_soup_neither_crashes_nor_is_allowed_when_unplain(lines: list[str]) -> None:
    results = _read_in_child(lines)
    for line, (plain, action) in zip(lines, results, strict=True):
        if action == "allow":
            assert plain, line
