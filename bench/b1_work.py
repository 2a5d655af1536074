"""B1-work — the work of one more tool turn of B1-cli's commands, counted, not timed.

The same commands as B1-cli (``bench/b1_cli.py``: the ``lich`` command with its config,
the single-file tool plugin and transcripts, and the raw loops as scripts), each run once
at two sizes; per turn is (count at the larger N − count at the smaller) ÷ the turns
between (each measure taken twice, the smaller kept). Counted:

* **function calls** — every call of a Python function (and resumption of a generator
  or coroutine) and of a builtin, by :mod:`bench._count_calls` (``sys.setprofile`` in
  the child, threads included);
* **system calls** — by ``strace -f -c`` where strace is installed and may trace (left
  out, and said so, where it is not).

Counts do not move with the machine's load the way B1-cli's times do on a shared host:
they show what each process does per turn, so that a time ratio near its limit can be
read against the work behind it. Nothing here has a target.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench._common import fmt_ratio, markdown_table
from bench._model_server import ModelServer
from bench._tool_plugin import TOOL
from bench.b1_cli import CLI_VARIANTS, check, commands, workspace

__all__ = ["run", "tables"]

BENCH = Path(__file__).resolve().parent
COUNTER = BENCH / "_count_calls.py"
# A line of strace -c's table: % time, seconds, usecs/call, calls, [errors], name.
_STRACE_ROW = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$")
# The system calls the table names on their own (the rest are summed as "other").
SHOWN_SYSCALLS = ("write", "sendto", "recvfrom", "epoll_wait", "poll", "getpid")


def _counted(argv: list[str], out: Path) -> list[str]:
    """``argv`` run under the call counter (a console script or ``python …`` alike)."""
    rest = argv[1:] if argv[0] == sys.executable else argv
    return [sys.executable, str(COUNTER), str(out), *rest]


def _strace_table(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in text.splitlines():
        m = _STRACE_ROW.match(line)
        if m and m.group(2) != "total":
            counts[m.group(2)] = counts.get(m.group(2), 0) + int(m.group(1))
    return counts


def _can_strace() -> str:
    """'' when ``strace -f -c`` works here, else why it is left out."""
    if shutil.which("strace") is None:
        return "strace is not installed"
    probe = subprocess.run(["strace", "-f", "-c", "-o", "/dev/null", sys.executable, "-c", "0"],
                           capture_output=True, text=True, timeout=60, check=False)
    if probe.returncode != 0:
        return f"strace cannot trace here: {probe.stderr.strip()[-200:]}"
    return ""


def run(turns: Sequence[int] = (20, 100), variants: Sequence[str] = tuple(CLI_VARIANTS),
        repeat: int = 2) -> dict[str, Any]:
    """Count the work per turn of each B1-cli variant between ``turns[0]`` and ``turns[1]``,
    each measure taken ``repeat`` times and the smallest kept."""
    a, b = turns
    if not 0 < a < b:
        raise ValueError(f"turns must be two sizes 0 < a < b, got {turns}")
    if repeat < 2:  # the first run of a command may do work once that is no turn's
        raise ValueError(f"repeat must be at least 2, got {repeat}")
    checks: list[str] = []
    no_strace = _can_strace()
    calls: dict[str, dict[int, dict[str, int]]] = {v: {} for v in variants}
    syscalls: dict[str, dict[int, dict[str, int]]] = {v: {} for v in variants}
    with ModelServer(TOOL, [a, b]) as server, \
            tempfile.TemporaryDirectory(prefix="lich-bench-work-") as tmp:
        root = Path(tmp)
        work, env = workspace(root)
        argv = commands(root, work, server, (a, b), variants)

        def once(n: int, name: str, command: list[str]) -> bool:
            proc = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL, timeout=600, check=False)
            server.take_times(n)
            problem = check(name, CLI_VARIANTS[name], n, proc)
            if problem:
                checks.append(f"{name} N={n}: {problem}")
            return not problem

        for name in variants:
            for n in (a, b):
                # Each measure twice, the smaller kept: a first run does some work once
                # (byte-compiling, rebuilding lich's entry-point cache) that is not a
                # turn's, and it only ever adds. Otherwise the counts repeat exactly.
                out = root / f"calls-{n}.json"
                for _ in range(repeat):
                    if once(n, name, _counted(argv[n, name], out)):
                        got = json.loads(out.read_text(encoding="utf-8"))
                        kept = calls[name].get(n)
                        if kept is None or got["python"] < kept["python"]:
                            calls[name][n] = got
                if no_strace:
                    continue
                table = root / f"strace-{n}.txt"
                for _ in range(repeat):
                    if once(n, name, ["strace", "-f", "-c", "-o", str(table), *argv[n, name]]):
                        got = _strace_table(table.read_text(encoding="utf-8"))
                        kept = syscalls[name].get(n)
                        if kept is None or sum(got.values()) < sum(kept.values()):
                            syscalls[name][n] = got
    per_turn: dict[str, dict[str, Any]] = {}
    for name in variants:
        entry: dict[str, Any] = {}
        if len(calls[name]) == 2:
            entry.update({key: (calls[name][b][key] - calls[name][a][key]) / (b - a)
                          for key in ("python", "builtin")})
        if len(syscalls[name]) == 2:
            names = set(syscalls[name][a]) | set(syscalls[name][b])
            by_name = {s: (syscalls[name][b].get(s, 0) - syscalls[name][a].get(s, 0)) / (b - a)
                       for s in sorted(names)}
            entry["syscalls"] = sum(by_name.values())
            entry["by_syscall"] = by_name
        per_turn[name] = entry
    return {"params": {"turns": [a, b], "variants": list(variants), "repeat": repeat},
            "strace": no_strace or "used", "per_turn": per_turn, "checks": checks,
            "targets": []}


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.1f}"


def _ratio(e: dict[str, Any], base: dict[str, Any], key: str) -> str:
    if key not in e or not base.get(key):
        return "—"
    return fmt_ratio(e[key] / base[key])


def tables(result: dict[str, Any]) -> list[tuple[str, str]]:
    """(title, Markdown table) pairs for the report."""
    a, b = result["params"]["turns"]
    rows = result["per_turn"]
    sync = rows.get("raw sync", {})
    sync_stream = rows.get("raw sync stream", sync)
    head = ["variant", "Python calls", "builtin calls", "÷ sync raw (Python)", "system calls",
            "÷ sync raw (system)", *SHOWN_SYSCALLS, "other"]
    body = []
    for name, e in rows.items():
        base = sync_stream if CLI_VARIANTS[name].stream else sync
        by = e.get("by_syscall")
        shown = [_num(by.get(s, 0.0)) if by is not None else "—" for s in SHOWN_SYSCALLS]
        other = (_num(sum(v for s, v in by.items() if s not in SHOWN_SYSCALLS))
                 if by is not None else "—")
        body.append([name, _num(e.get("python")), _num(e.get("builtin")),
                     _ratio(e, base, "python"), _num(e.get("syscalls")),
                     _ratio(e, base, "syscalls"), *shown, other])
    strace = result["strace"]
    note = "" if strace == "used" else f" (no system calls: {strace})"
    return [(f"B1-work — per tool turn, counted: (run at N={b} − run at N={a}) ÷ {b - a}, "
             f"the smaller of {result['params']['repeat']} runs each; ratios against the sync raw "
             f"loop of the same streaming mode{note}",
             markdown_table(head, body))]
