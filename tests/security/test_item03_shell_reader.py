"""#28.3 attacked again: lines the fix's table does not spell, run under real bash.

Each row hides ``touch pwned`` behind a program that runs its later words (a
wrapper the reader did not list, ``ssh host 'cmd'``, ssh's command options) or
behind bash constructs (arithmetic, ``${x@P}``, ``printf -v``, ``mapfile -C``,
``trap``, ``coproc``, ``exec``, ``time``, backslash-newline, CRLF). Real bash runs
the line in a fresh directory whose PATH holds stand-ins for the remote or
privileged programs (``ssh`` runs its command through ``sh -c`` as sshd would,
``sudo``-likes run their arguments); the test checks that bash did make
``pwned`` (the row is an attack), that ``allow = ["terminal(git status*)"]``
never allows it, and that ``deny = ["terminal(touch*)"]`` denies it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bash_probe import bash_made_pwned, rule_action

from lich.approvals.rules import RuleSet, decide
from lich.tools import Tool
from lich.types import ToolResult

# Stand-ins: (name, shell script). `run-rest N`: drop N words (options are not
# parsed: each stand-in below is only called the way its row calls it).
_RUN_AFTER = '#!/bin/sh\nshift {n}\nexec "$@"\n'
_SSH = ('#!/bin/sh\n'
        '# as ssh: options (with their values), the host, then the remote command line\n'
        'while [ $# -gt 0 ]; do\n'
        '  case "$1" in\n'
        '    -o) case "$2" in ProxyCommand=*) sh -c "${2#ProxyCommand=}";; esac; shift 2;;\n'
        '    -o*) case "$1" in -oProxyCommand=*) sh -c "${1#-oProxyCommand=}";; esac; shift;;\n'
        '    -p|-i|-l) shift 2;;\n'
        '    -*) shift;;\n'
        '    *) break;;\n'
        '  esac\n'
        'done\n'
        'shift\n'
        '[ $# -gt 0 ] && exec sh -c "$*"\n'
        'exit 0\n')
_SG = '#!/bin/sh\nshift\n[ "$1" = -c ] && shift\nexec sh -c "$*"\n'
STAND_INS = {
    "git": "#!/bin/sh\nexit 0\n",
    "ssh": _SSH, "scp": _SSH, "sg": _SG,
    "sshpass": _RUN_AFTER.format(n=2),
    "pkexec": _RUN_AFTER.format(n=0), "unbuffer": _RUN_AFTER.format(n=0),
    "faketime": _RUN_AFTER.format(n=1), "eatmydata": _RUN_AFTER.format(n=0),
    "proxychains4": _RUN_AFTER.format(n=0), "torsocks": _RUN_AFTER.format(n=0),
    "firejail": _RUN_AFTER.format(n=1), "fakeroot": _RUN_AFTER.format(n=0),
    "cpulimit": _RUN_AFTER.format(n=1), "systemd-run": _RUN_AFTER.format(n=1),
    "doas": _RUN_AFTER.format(n=0), "sudo": _RUN_AFTER.format(n=2),
}

# Each line makes `pwned` under bash.
ATTACKS = [
    "ssh host touch pwned",
    "ssh host 'touch pwned'",
    "ssh host 'echo hi; touch pwned'",
    "ssh -p 2222 -i key host 'true && touch pwned'",
    "ssh -o ProxyCommand='touch pwned' host",
    "ssh -oProxyCommand='touch pwned' host",
    "scp -o ProxyCommand='touch pwned' a host:b",
    "sg root 'true; touch pwned'",
    "sg root -c 'touch pwned'",
    "sshpass -p pw ssh host touch pwned",
    "pkexec touch pwned",
    "unbuffer touch pwned",
    "faketime now touch pwned",
    "eatmydata touch pwned",
    "proxychains4 touch pwned",
    "torsocks touch pwned",
    "firejail --quiet touch pwned",
    "fakeroot touch pwned",
    "cpulimit -l5 touch pwned",
    "systemd-run --user touch pwned",
    "doas touch pwned",
    "sudo -u root touch pwned",
    "nohup touch pwned >/dev/null 2>&1",
    "stdbuf -o0 touch pwned",
    "ionice -c3 touch pwned",
    "flock lockfile -c 'touch pwned'",
    "time touch pwned",
    "time -p touch pwned",
    "exec touch pwned",
    "coproc touch pwned",
    "trap 'touch pwned' EXIT",
    "mapfile -C 'touch pwned #' -c 1 x <<< a",
    "printf -v 'x[$(touch pwned)]' %s a",
    "declare -a 'x=([0]=$(touch pwned))'",
    "x=$(touch pwned) git status",
    "git status $(( $(touch pwned) ))",
    "git status $((x[$(touch pwned)]))",
    "p='$(touch pwned)'; git status ${p@P}",
    "p=$(echo '$(touch pwned)'); git status ${p@P}",
    "x='a[$(touch pwned)]'; git status $((x))",
    "x='a[`touch pwned`]'; y=$((x)) git status",
    "export x='a[$(touch pwned)]'; git status $((x + 1))",
    "for x in 'a[$(touch pwned)]'; do git status $((x)); done",
    "declare -A m; k='$(touch pwned)'; git status ${m[$k]}; (( y = x )) ; p=$k; : ${p@P}",
    "git status \\\n; touch pwned",
    "git status\r\ntouch pwned",
    "git status;\\\ntouch pwned",
    "env -S 'touch pwned'",
    "git status | xargs -0 touch pwned",
    "git status && find . -maxdepth 0 -exec touch pwned \\;",
]


@pytest.mark.parametrize("line", ATTACKS, ids=repr)
def test_an_attack_is_never_allowed_and_a_deny_rule_meets_it(line: str, tmp_path: Path) -> None:
    assert bash_made_pwned(line, tmp_path, STAND_INS), "not an attack: bash did not make pwned"
    assert rule_action(line, allow=("terminal(git status*)",)) == "ask"
    assert rule_action(line, allow=("terminal",), deny=("terminal(touch*)",)) == "deny"


@pytest.mark.parametrize("line", ["ssh host uptime", "msg='touch me'; echo $msg",
                                  "ssh -p 22 host 'ls -l'", "sg staff 'id'",
                                  "faketime now date"])
def test_a_wrapper_running_something_else_is_not_denied(line: str) -> None:
    # The deny rule reads through wrappers; it does not meet every line naming one.
    assert rule_action(line, allow=("terminal",), deny=("terminal(touch*)",)) == "allow"


UNREQUIRED = Tool(
    name="mcp__box__run", description="an MCP server's shell tool that marks nothing required",
    parameters={"type": "object", "properties": {"command": {"type": "string"}}},
    execute=lambda args, ctx: ToolResult.success(""))


@pytest.mark.parametrize("line", ["touch pwned", "git status; touch pwned"])
def test_a_deny_rule_meets_a_tool_that_marks_nothing_required(line: str) -> None:
    rules = RuleSet.parse(["mcp__box__run"], (), ["mcp__box__run(touch*)"])
    verdict = decide(rules, "ask", UNREQUIRED.name, {"command": line}, UNREQUIRED, "/w")
    assert verdict.action == "deny"
    rules = RuleSet.parse(["mcp__box__run(git status*)"])
    verdict = decide(rules, "ask", UNREQUIRED.name, {"command": line}, UNREQUIRED, "/w")
    assert verdict.action != "allow"
