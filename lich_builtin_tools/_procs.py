"""Finding and killing every process one tool call started, wherever it went.

Killing the call's process group is not enough: a child may call ``setsid``
(a new session and group) and, once its parent exits, be adopted by init,
out of both the group and the process tree. Three ways find such a process,
from ``/proc`` (Linux; elsewhere only the process group is killed):

* the tree: every process whose parent chain leads to the call's shell;
* the mark: every process whose environment holds the call's own
  :data:`MARK_ENV` token, inherited by everything the shell starts;
* the record: every process seen by either way while the call was running
  (:class:`CallProcesses` is polled), so one that has since left the tree
  and dropped the mark is still known.

A recorded process is identified by its pid *and* start time, so a pid the
system has reused for an unrelated process is never signalled.

On Linux the call's shell is also made a *child subreaper*
(``PR_SET_CHILD_SUBREAPER``, :func:`subreaper_preexec`): a process that
double-forks or calls ``setsid`` is re-parented to the shell, not to init, when
its parent exits, so it stays in the tree for as long as the shell runs, however
fast it detached and whatever it did to its environment. A timed-out or cancelled
call is one whose shell is still running, so the kill finds it.

What escapes: a process left behind by a shell that has exited (a ``server &``
job, kept on purpose), and elsewhere than Linux anything outside the process
group. The OS sandbox (a PID namespace per call) closes that structurally.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import sys
from collections.abc import Callable, Iterable

__all__ = ["MARK_ENV", "POLL_S", "CallProcesses", "subreaper_preexec"]

MARK_ENV = "LICH_TOOL_CALL"
"""The environment variable holding the call's token (inherited by its processes)."""

POLL_S = 0.2
"""How often a running call's processes are recorded."""

# Stop-then-kill passes: a process that forks while we scan is caught by the
# next pass; stopped processes cannot fork, so a few passes suffice.
_KILL_ROUNDS = 8
_PROC = "/proc"


def _stat(pid: int) -> tuple[int, int] | None:
    """``(ppid, start time)`` of ``pid``, or ``None`` when it is gone."""
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ")".
    fields = raw[raw.rfind(b")") + 2:].split()
    try:
        return int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _has_mark(pid: int, mark: bytes) -> bool:
    try:
        with open(f"{_PROC}/{pid}/environ", "rb") as fh:
            return mark in fh.read().split(b"\0")
    except OSError:
        return False


def _children(pid: int) -> list[int] | None:
    """The children of ``pid`` from ``/proc/<pid>/task/*/children``; ``None`` when
    the kernel has no such files (``CONFIG_PROC_CHILDREN``) or ``pid`` is gone."""
    try:
        tids = os.listdir(f"{_PROC}/{pid}/task")
    except OSError:
        return None
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"{_PROC}/{pid}/task/{tid}/children", "rb") as fh:
                out.extend(int(n) for n in fh.read().split())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            continue  # that thread just exited
    return out


def _pids() -> list[int]:
    try:
        return [int(n) for n in os.listdir(_PROC) if n.isdigit()]
    except OSError:
        return []


class CallProcesses:
    """The processes of one tool call: its shell ``root`` and all it started."""

    def __init__(self) -> None:
        self.token = secrets.token_hex(16)
        self._mark = f"{MARK_ENV}={self.token}".encode()
        self.root: int | None = None
        # pid -> start time of every process seen belonging to the call
        self.seen: dict[int, int] = {}
        self.available = os.path.isdir(f"{_PROC}/self")

    def env(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with the call's mark added."""
        return {**env, MARK_ENV: self.token}

    def scan(self, *, marked: bool = True) -> dict[int, int]:
        """Record and return every live process of the call (the root excluded).

        ``marked=False`` skips reading every process's environment for the mark
        (the cheap scan a poll does: the tree and the record only).
        """
        if not self.available or self.root is None:
            return {}
        if not marked:
            walked = self._walk()
            if walked is not None:
                self.seen.update(walked)
                return walked
        me = os.getpid()
        table: dict[int, tuple[int, int]] = {}
        for pid in _pids():
            info = _stat(pid)
            if info is not None:
                table[pid] = info
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        found: set[int] = set()
        # Known ones still alive as the same process, and whatever hangs below them.
        stack = [self.root] + [
            p for p, start in self.seen.items() if p in table and table[p][1] == start
        ]
        if marked:
            stack.extend(p for p in table if p != me and _has_mark(p, self._mark))
        while stack:
            pid = stack.pop()
            if pid in found or pid not in table or pid == me:
                continue
            found.add(pid)
            stack.extend(children.get(pid, ()))
        found.discard(self.root)
        live = {pid: table[pid][1] for pid in found}
        self.seen.update(live)
        return live

    def _walk(self) -> dict[int, int] | None:
        """The tree below the root and the recorded processes, read from their
        ``children`` files only (a few reads, not all of ``/proc``); ``None``
        when the kernel does not provide them."""
        assert self.root is not None
        stack = [self.root] + [
            p for p, start in self.seen.items() if (_stat(p) or (0, -1))[1] == start
        ]
        found: dict[int, int] = {}
        while stack:
            pid = stack.pop()
            if pid in found:
                continue
            info = _stat(pid)
            kids = _children(pid)
            if info is None:
                continue  # gone: nothing below it is reachable through it any more
            if kids is None:
                return None
            found[pid] = info[1]
            stack.extend(kids)
        found.pop(self.root, None)
        return found

    def kill_all(self) -> int:
        """Stop, then ``SIGKILL``, every process of the call (the root's group too);
        how many were signalled. Bounded: a few scan passes, no waiting."""
        if self.root is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.root, signal.SIGSTOP)
        stopped: dict[int, int] = {}
        try:
            for _ in range(_KILL_ROUNDS):
                fresh = {p: s for p, s in self.scan().items() if p not in stopped}
                if not fresh:
                    break
                _signal(fresh, signal.SIGSTOP)
                stopped.update(fresh)
        finally:
            # Whatever happened while looking, nothing stopped may be left stopped.
            _signal(stopped, signal.SIGKILL)
            if self.root is not None:
                # SIGKILL ends a stopped process too: no SIGCONT is needed.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.root, signal.SIGKILL)
        return len(stopped)


# prctl(2) option: orphaned descendants are re-parented to this process, not to init.
_PR_SET_CHILD_SUBREAPER = 36
_preexec: list[Callable[[], None] | None] = []


def subreaper_preexec() -> Callable[[], None] | None:
    """A ``preexec_fn`` making the started process a child subreaper (Linux), or
    ``None`` where that is unavailable.

    Why a ``preexec_fn`` is safe here: it is one foreign call, bound before the fork,
    with constant arguments; it takes no Python-level lock (CPython holds the import
    lock across the fork for ``preexec_fn`` anyway) and allocates nothing a thread
    lost in the fork could be holding. The attribute survives ``execve``, so the
    shell (or the command bash ``exec``-s into) keeps it; it is not inherited by
    the shell's own children.
    """
    if not _preexec:
        _preexec.append(_make_preexec())
    return _preexec[0]


def _make_preexec() -> Callable[[], None] | None:
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                      ctypes.c_ulong]
    prctl.restype = ctypes.c_int

    def become_subreaper() -> None:
        prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    return become_subreaper


def _signal(procs: Iterable[int], sig: int) -> None:
    for pid in procs:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
