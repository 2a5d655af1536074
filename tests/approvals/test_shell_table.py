"""The shell reader against bash itself: a table of lines, each run under real bash.

Each line hides (or seems to hide) ``touch pwned``. For every row the test runs
the line with ``bash -c`` in a fresh directory (a ``git`` on the PATH that does
nothing, so that the table does not depend on git) and checks what bash really
did — whether the file ``pwned`` appeared — against the table; then what the
rules decide:

* with ``allow = ["terminal(git status*)"]`` the line is allowed exactly when the
  table says so, and never when bash made ``pwned``;
* with ``allow = ["terminal"]`` and ``deny = ["terminal(touch*)"]`` every line in
  which bash ran ``touch`` is denied.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from bash_probe import bash_made_pwned, rule_action

# (line, whether bash makes the file `pwned`, whether `terminal(git status*)` allows it)
ROWS: list[tuple[str, bool, bool]] = [
    ("git status", False, True),
    ("git status -s", False, True),
    ("git status 'a b'", False, True),
    ('git status "a; touch pwned"', False, True),
    ("git status 'touch pwned'", False, True),
    ("git status \\; touch pwned", False, True),
    ("git status 2>&1", False, True),
    ("git status >/dev/null 2>&1", False, True),
    ("git status 2>&-", False, True),
    ("git status </dev/null", False, True),
    ("git status && git status", False, True),
    ("git status | git status", False, True),
    ("git status |& git status", False, True),
    ("  git   status   --short ", False, True),
    ('git status "it\'s"', False, True),
    ("git status a\\ b", False, True),
    ("git status ';touch pwned'", False, True),
    ('git status "#"', False, True),
    ("git status 'a'\"b\"c", False, True),
    ("git status --x=y,z@w:1%2+3", False, True),
    ("git status 'a'\\''b'", False, True),
    ('git status ""', False, True),
    ("git status &", False, True),
    ("git status;", False, True),
    ("git status\ngit status", False, True),
    ("git status;touch pwned", True, False),
    ("git status; touch pwned", True, False),
    ("git status\ntouch pwned", True, False),
    ("git status & touch pwned", True, False),
    ("git status && touch pwned", True, False),
    ("git status || touch pwned", False, False),
    ("git status | touch pwned", True, False),
    ("git status |& touch pwned", True, False),
    ("git status $(touch pwned)", True, False),
    ('git status "$(touch pwned)"', True, False),
    ("git status `touch pwned`", True, False),
    ('git status "x`touch pwned`y"', True, False),
    ("git status <(touch pwned)", True, False),
    ("git status >(touch pwned)", True, False),
    ("git status $'\\x3b' touch pwned", False, False),
    ("git status $'\\'';touch pwned", True, False),
    ("git status $'\\n'touch pwned", False, False),
    ('git status $"x"', False, False),
    ("git status #'\ntouch pwned #'", True, False),
    ("git status; #\ntouch pwned", True, False),
    ("git status a#b", False, False),
    ("git status <<EOF\n$(touch pwned)\nEOF", True, False),
    ("git status <<'EOF'\n$(touch pwned)\nEOF", False, False),
    ("git status <<EOF\nEOF\ntouch pwned", True, False),
    ('git status <<< "$(touch pwned)"', True, False),
    ("git status ${x[$(touch pwned)]}", True, False),
    ("git status ${x:-$(touch pwned)}", True, False),
    ('git status "${x:=$(touch pwned)}"', True, False),
    ("a=$(touch pwned) git status", True, False),
    ("x[$(touch pwned)]=1 git status", False, False),
    ("git status $((1 + $(touch pwned)))", True, False),
    ("git status $(( $(touch pwned) ))", True, False),
    ("git status $[$(touch pwned)]", True, False),
    ("eval 'touch pwned'", True, False),
    ('git status; eval "touch pwned"', True, False),
    ("source /dev/stdin <<< 'touch pwned'", True, False),
    (". /dev/stdin <<< 'touch pwned'", True, False),
    ("command touch pwned", True, False),
    ("builtin eval 'touch pwned'", True, False),
    ("exec touch pwned", True, False),
    ("trap 'touch pwned' EXIT", True, False),
    ("bash -c 'touch pwned'", True, False),
    ('sh -c "touch pwned"', True, False),
    ("env touch pwned", True, False),
    ("timeout 5 touch pwned", True, False),
    ("xargs touch <<< pwned", True, False),
    ("find . -maxdepth 0 -exec touch pwned \\;", True, False),
    ("git status {a,b};touch pwned", True, False),
    ("git status *", False, False),
    ("git status ~", False, False),
    ("git status \\\n;touch pwned", True, False),
    ("git status \\\ntouch pwned", False, False),
    ("(touch pwned)", True, False),
    ("{ touch pwned; }", True, False),
    ("if git status; then touch pwned; fi", True, False),
    ("for i in 1; do touch pwned; done", True, False),
    ("f() { touch pwned; }; f", True, False),
    ("alias git='touch pwned'\ngit status", False, False),
    ("git status >pwned", True, False),
    ("git status 1>pwned", True, False),
    ("git status &>pwned", True, False),
    ("git status >&pwned", True, False),
    ("PAGER='touch pwned' git status", False, False),
    ('git status -- "$HOME"', False, False),
    ("git status $HOME", False, False),
    ("test -v 'x[$(touch pwned)]'", True, False),
    ("[ -v 'x[$(touch pwned)]' ]", True, False),
    ("printf -v 'x[$(touch pwned)]' 1", True, False),
    ("read 'x[$(touch pwned)]' <<< 1", True, False),
    ("let 'x[$(touch pwned)]=1'", True, False),
    ("x='a[$(touch pwned)]'; test -v \"$x\"", True, False),
    ("c='touch pwned'; $c", True, False),
    ("git status\r;touch pwned", True, False),
    ("git status\u00a0;touch pwned", True, False),
    ("git status 'unclosed", False, False),
    ('git status "$(touch pwned"', False, False),
    ("coproc touch pwned", True, False),
    ("time touch pwned", True, False),
    ("! touch pwned", True, False),
    ("git status && (touch pwned)", True, False),
    ("git status <pwned", False, False),
    ("GIT_DIR=x git status", False, False),
    ("git -C . status", False, False),
    ("nice -n 1 touch pwned", True, False),
    ("git status $(: )", False, False),
    ("case x in x) touch pwned;; esac", True, False),
    ("while touch pwned; do break; done", True, False),
    ("[[ -v x[$(touch pwned)] ]]", True, False),
    ("((x[$(touch pwned)]))", True, False),
    ("declare -a 'x=([0]=$(touch pwned))'", True, False),
    ("export x=$(touch pwned)", True, False),
    ("mapfile -C 'touch pwned' -c 1 x <<< a", True, False),
    ("git status ${!x}", False, False),
    ("git status ?", False, False),
    ("git status [a]", False, False),
    ("git status !x", False, False),
    # The grammar reads `-x>&1` as a descriptor; bash, as a word and `>&1`.
    ("git status &&-2>&1", False, False),
    ("git status\n-touch>&1", False, False),
    ("git status && touch -- pwned -2>&1", True, False),
    # Here-documents the grammar cannot read (bash takes them to the end of the line),
    # then a quoted command name: found by fuzzing against bash -x.
    ("<>f <<-\\a<<-x 'tou'ch pwned", True, False),
    # A carriage return is a word character to bash, blank to the grammar.
    ("\rgit status", False, False),
    ("git status\r", False, False),
]


def test_the_table_is_big_enough_and_has_both_kinds() -> None:
    assert len(ROWS) >= 60
    assert len({line for line, _, _ in ROWS}) == len(ROWS)
    assert sum(ran for _, ran, _ in ROWS) >= 30
    assert sum(allowed for _, _, allowed in ROWS) >= 15


@pytest.mark.parametrize(("line", "ran", "allowed"), ROWS, ids=[repr(r[0]) for r in ROWS])
def test_what_bash_does_and_what_the_rules_decide(line: str, ran: bool, allowed: bool,
                                                  tmp_path: Path) -> None:
    assert bash_made_pwned(line, tmp_path) is ran, "the table is wrong about what bash does"
    action = rule_action(line, allow=("terminal(git status*)",))
    assert action == ("allow" if allowed else "ask")
    assert not (ran and action == "allow")
    if ran and "touch" in line:
        assert rule_action(line, allow=("terminal",), deny=("terminal(touch*)",)) == "deny"


# Lines on which the grammar's own scanner corrupts memory (a segfault within a few
# parses): `{` before characters outside the BMP, as a fuzzer found them.
_CRASHERS = [
    "git status 昘{\U0010cc2fp#\U0001c20b{\U0009204f搨𮪆譼",
    "{\U00085075",
    "git status {\U001073ffƤ\x16\U000d4752'\r2\"R\x1cî",
    "echo {\U00010000,{\U0010ffff}} ${x:-{\U0001f600}",
]


def test_characters_that_crash_the_grammar_never_reach_it() -> None:
    """Read in child processes, again and again: a crash would kill lich's process (on
    the grammar itself about half of such children die, so eight tell)."""
    script = (
        "import sys\n"
        "from lich.approvals.shell import _read\n"
        "lines = [l for l in sys.stdin.read().split('\\x00') if l]\n"
        "for _ in range(100):\n"
        "    for line in lines:\n"
        "        read = _read(line, 0)\n"
        "print(read.problem)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for _ in range(8):
        done = subprocess.run([sys.executable, "-c", script], input="\x00".join(_CRASHERS),
                              capture_output=True, text=True, timeout=300, check=False,
                              env=env)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "a parameter expansion" in done.stdout  # the last line was read
