"""Helpers shared by the builtin tools: schemas, limits, secrets, paths, child processes.

Nothing here imports anything heavier than the standard library and the lich
core, so importing a tool module stays cheap.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import stat
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from attrs import frozen

from lich.guards import Opened, ToolError, check_path_arg, open_beneath, resolve_in_root
from lich.protected import is_protected
from lich.secret_files import fd_holds_private_key
from lich.secrets import is_secret_entry
from lich.settings import ToolSettings
from lich.tools import ToolContext

# Directory names every walking tool skips (list_dir, grep_files), as the reference does.
SKIP_NAMES = frozenset({"node_modules", ".git", "dist", ".lich", ".cursor"})

# Browser-like user agent used by fetch_url and web_search (the reference's).
USER_AGENT = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36"

_NAME_MAX = 255  # bytes in one path component on every common file system


def schema(properties: Mapping[str, Any], required: Iterable[str] = ()) -> dict[str, Any]:
    """A JSON Schema object with ``additionalProperties: false`` (as every builtin has)."""
    out: dict[str, Any] = {
        "type": "object",
        "properties": dict(properties),
        "additionalProperties": False,
    }
    req = list(required)
    if req:
        out["required"] = req
    return out


# What a tool keeps back from the executor's limit for stopping its work and
# returning: a share of the limit, within bounds. Half of it is for clean-up (killing,
# reaping, closing pipes: each bounded by :attr:`Deadline.end`), half is slack for an
# event loop woken late on a loaded machine.
_RESERVE_SHARE = 0.2
_RESERVE_MIN_S = 0.4
_RESERVE_MAX_S = 5.0


def _reserve_s(limit_s: float) -> float:
    return min(limit_s / 2, _RESERVE_MAX_S, max(_RESERVE_MIN_S, limit_s * _RESERVE_SHARE))


def time_cap_s(settings: ToolSettings, own_cap_s: float) -> float:
    """How long the tool may work: its own cap, tightened by ``[tools.<name>] timeout_s``.

    The executor enforces the same ``timeout_s``; a tool that stops itself
    earlier can still report what it got (partial output, exit code). A tool that
    also cleans up after stopping (a child to kill) uses :func:`call_deadline`,
    which bounds the clean-up too.
    """
    configured = settings.timeout_s
    if configured is None or configured >= own_cap_s:
        return own_cap_s
    return max(0.001, configured - _reserve_s(configured))


@frozen
class Deadline:
    """The two moments of one tool call, on the event loop's clock.

    ``stop``: when its work must stop (the command is killed, the search ends).
    ``end``: by when it must have returned, clean-up included, a little before the
    executor gives up on it (which would drop the partial output).
    """

    stop: float
    end: float

    def left(self) -> float:
        """Seconds until :attr:`end` (0 when past): the bound of every clean-up wait."""
        return max(0.0, self.end - asyncio.get_running_loop().time())

    def grace(self) -> float:
        """The bound of one clean-up wait: :meth:`left`, and never more than a reap's
        grace (a short timeout far below the limit must not make a stuck kill a long
        wait)."""
        return min(REAP_GRACE_S, self.left())

    def work_left(self) -> float:
        """Seconds until :attr:`stop` (0 when past)."""
        return max(0.0, self.stop - asyncio.get_running_loop().time())


def call_deadline(settings: ToolSettings, limit_s: float, work_s: float) -> Deadline:
    """The :class:`Deadline` of a call starting now.

    :param settings: the tool's table; its ``timeout_s`` is the executor's limit
        when set.
    :param limit_s: the tool's own ``timeout_s`` (the executor's limit otherwise).
    :param work_s: how long the tool means to work (the model's ``timeout_ms``,
        its own budget); shortened to leave the clean-up its time before the limit.
    """
    limit = limit_s if settings.timeout_s is None else settings.timeout_s
    reserve = _reserve_s(limit)
    now = asyncio.get_running_loop().time()
    return Deadline(stop=now + max(0.001, min(work_s, limit - reserve)),
                    end=now + limit - reserve / 2)


def output_cap(settings: ToolSettings, own_cap: int) -> int:
    """The output limit the executor will apply: ``[tools.<name>] max_output_chars`` or ours."""
    return own_cap if settings.max_output_chars is None else settings.max_output_chars


def scrub_env(
    env: Mapping[str, str], provider_keys: Iterable[str], pass_env: Iterable[str]
) -> dict[str, str]:
    """``env`` without provider key variables and secret-looking names
    (:func:`lich.secrets.is_secret_name`), except ``pass_env``."""
    keep = set(pass_env)
    drop = set(provider_keys)
    return {
        k: v for k, v in env.items()
        if k in keep or (k not in drop and not is_secret_entry(k, v))
    }


# What a command needs to find programs, its home and its locale: the base of a
# terminal's environment with `[tools.terminal] inherit_env = false`.
MINIMAL_ENV_NAMES = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE",
                     "TERM", "TMPDIR", "TZ")


def minimal_env(also: Iterable[str] = ()) -> dict[str, str]:
    """The few variables of lich's environment a command needs (:data:`MINIMAL_ENV_NAMES`
    and ``LC_*``), and the names in ``also``: none of the rest its launcher set."""
    wanted = set(MINIMAL_ENV_NAMES) | set(also)
    return {k: v for k, v in os.environ.items() if k in wanted or k.startswith("LC_")}


def child_env(ctx: ToolContext) -> dict[str, str]:
    """The environment of a helper process a tool starts (the grep worker, ``du``).

    Scrubbed as the ``terminal``'s is: a child's ``/proc/<pid>/environ`` is readable
    by every process of the same user (``PR_SET_DUMPABLE`` covers lich, not what it
    execs), so a command left running by ``terminal`` could harvest the keys from it.
    """
    return scrub_env(os.environ, ctx.secret_env_names, ())


PROTECTED_TEXT = "lich's own files and secret files are off limits to tools"

def resolve_path(ctx: ToolContext, target: str) -> Path:
    """``target`` resolved (realpath) inside the work dir, and not protected.

    A checked name, not an open file: the builtin tools open paths with
    :func:`open_in_work_dir` instead, which a symlink swapped in mid-call cannot
    redirect.

    :raises ToolError: ``path_escape:`` outside the work dir, ``invalid_path:`` for NUL or
        length, ``forbidden_path:`` for a path ``ctx.protected`` covers (checked on the
        resolved path, before anything is known about whether it exists).
    """
    resolved = resolve_in_root(ctx.work_dir, target)
    # A component longer than the file system allows would only fail later, with a raw
    # OSError from whichever call touches it first; say so up front.
    if any(len(os.fsencode(part)) > _NAME_MAX for part in resolved.parts):
        raise ToolError(f"invalid_path: name too long: {target[:200]}")
    refuse_protected(ctx, resolved, target)
    return resolved


def _refuse_protected_on_the_way(ctx: ToolContext, target: str, root: str) -> None:
    """Refuse a path that passes through a protected entry as written (``.env/..``,
    ``.lich/sessions/x.jsonl/..``): the walk would otherwise step into it, and whether
    it failed there (not a directory, not found) would tell that the file exists."""
    current = "/" if os.path.isabs(target) else root
    for part in target.split("/"):
        if part in ("", "."):
            continue
        current = os.path.dirname(current) if part == ".." else os.path.join(current, part)
        if part != ".." and is_protected(ctx.protected, current, root):
            raise ToolError(f"forbidden_path: {target[:200]} ({PROTECTED_TEXT})")


def refuse_protected(ctx: ToolContext, resolved: str | os.PathLike[str], target: str) -> None:
    """Raise ``forbidden_path:`` when ``ctx.protected`` covers the resolved path."""
    if is_protected(ctx.protected, resolved, real_root(ctx)):
        raise ToolError(f"forbidden_path: {target[:200]} ({PROTECTED_TEXT})")


def hidden(ctx: ToolContext, path: str | os.PathLike[str], root: str | None = None) -> bool:
    """Whether a walking tool must leave ``path`` out (``ctx.protected`` covers it).

    ``path`` is what the walk met; a symlink is judged by where it leads too,
    so neither a link named like a secret nor a link to one shows. ``root`` is
    :func:`real_root` when the caller has it already (one ``realpath`` per walk,
    not per entry).
    """
    policy = ctx.protected
    if not policy:
        return False
    if root is None:
        root = real_root(ctx)
    return is_protected(policy, path, root) or is_protected(
        policy, os.path.realpath(path), root
    )


def open_in_work_dir(
    ctx: ToolContext,
    target: str,
    flags: int = os.O_RDONLY,
    *,
    check: Callable[[str], None] | None = None,
    make_parents: bool = False,
    follow_links: bool = True,
) -> Opened:
    """Open ``target`` inside the work dir with :func:`lich.guards.open_beneath`.

    The one way the builtin tools open a path: a symlink is followed only while
    it stays inside, and a directory swapped for a link mid-call cannot send the
    open outside. ``check(rel)`` gets the resolved path relative to the work dir
    (``/``-joined) before the file is opened or created; path policies
    (``.git/``) go there. ``ctx.protected`` (lich's own files, secret files) is
    always applied first, on that same resolved path, so no builtin tool opens a
    protected file whatever it was called with. Refuses a component longer than
    the file system allows up front, as :func:`resolve_path` does.

    :raises ToolError: the confinement errors, ``forbidden_path:`` for a protected
        path, what ``check`` raises, and :func:`os_error`'s coded errors for a
        failed open.
    """
    check_path_arg(target)  # NUL, length, encoding: before the names are measured
    if any(len(os.fsencode(part)) > _NAME_MAX for part in target.split("/")):
        raise ToolError(f"invalid_path: name too long: {target[:200]}")
    policy_check = check
    if ctx.protected:
        root = real_root(ctx)
        _refuse_protected_on_the_way(ctx, target, root)

        def policy_check(rel: str) -> None:
            # Before anything is known about whether the file exists: the answer
            # must not confirm that a protected file is there.
            refuse_protected(ctx, os.path.join(root, rel) if rel not in ("", ".") else root,
                             target)
            if check is not None:
                check(rel)

    try:
        return open_beneath(ctx.work_dir, target, flags, check=policy_check,
                            make_parents=make_parents, follow_links=follow_links)
    except OSError as exc:
        raise os_error(exc, target) from exc


KEY_TEXT = "it holds a private key; files holding one are off limits to tools"


def refuse_private_key(ctx: ToolContext, fd: int, target: str) -> None:
    """Refuse the file open as ``fd`` when it holds a private key and ``ctx.protected``
    is on: whatever its name, its content is a secret file's
    (:func:`lich.secret_files.fd_holds_private_key`)."""
    if ctx.protected and fd_holds_private_key(fd):
        raise ToolError(f"forbidden_path: {target[:200]} ({KEY_TEXT})")


def refuse_hard_link(st: os.stat_result, target: str, table: str) -> None:
    """Refuse a regular file with more than one hard link.

    A hard link made inside the work dir to a file outside it (``ln ~/.ssh/id_rsa
    x``) is the same file: no path check can tell. ``table`` is the settings
    table whose ``allow_hard_links = true`` lifts the refusal.
    """
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        raise ToolError(
            f"hard_link_refused: {target} has {st.st_nlink} hard links and may be a file "
            f"outside the work dir; set [tools.{table}] allow_hard_links = true to allow it"
        )


def refuse_git_dir(rel: str, target: str, table: str) -> None:
    """Refuse a write into ``.git/`` (or to a ``.git`` file) on a resolved path.

    ``.git/config`` can set ``core.fsmonitor`` and ``.git/hooks/`` holds scripts:
    git runs both at the user's next ``git status`` or commit. Any case, for
    case-insensitive file systems. ``[tools.<table>] allow_git_dir = true`` lifts it.
    """
    if any(part.casefold() == ".git" for part in rel.split("/")):
        raise ToolError(
            f"forbidden_path: {target} (writes into .git/ are refused: git runs commands "
            f"from its config and hooks; set [tools.{table}] allow_git_dir = true to allow it)"
        )


def real_root(ctx: ToolContext) -> str:
    """The work dir with symlinks resolved."""
    return os.path.realpath(ctx.work_dir)


def refuse_protected_write(ctx: ToolContext, resolved: Path, target: str) -> None:
    """Refuse writes into ``.lich/`` (config, sessions) and to ``.env*`` files.

    Checked on the resolved path, so a link named ``notes`` pointing at
    ``.env`` is refused too.
    """
    rel = os.path.relpath(resolved, real_root(ctx))
    parts = [] if rel == "." else rel.split(os.sep)
    if ".lich" in parts or (parts and parts[-1].startswith(".env")):
        raise ToolError(
            f"forbidden_path: {target} (writes to .lich/ and .env files are refused)"
        )


def os_error(exc: OSError, target: str) -> ToolError:
    """A coded error for a failed file operation on ``target``."""
    import errno

    code = exc.errno
    if code == errno.ENOENT:
        return ToolError(f"not_found: {target}")
    if code == errno.EISDIR:
        return ToolError(f"is_a_directory: {target}")
    if code == errno.ENOTDIR:
        return ToolError(f"not_a_directory: {target}")
    if code in (errno.EACCES, errno.EPERM):
        return ToolError(f"permission_denied: {target}")
    if code == errno.ENAMETOOLONG:
        return ToolError(f"invalid_path: name too long: {target[:200]}")
    if code == errno.ENXIO:  # a FIFO opened for writing with no reader (O_NONBLOCK)
        return ToolError(f"not_a_regular_file: {target}")
    if code == errno.ELOOP:
        return ToolError(f"invalid_path: too many levels of symbolic links: {target}")
    return ToolError(f"io_error: {exc.strerror or exc}: {target}")


def parse_charset(content_type: str) -> str:
    """The ``charset=`` of a content type, if Python knows it; else ``utf-8``."""
    import codecs

    m = re.search(r"charset=[\"']?([\w.:-]+)", content_type, re.I)
    if m:
        try:
            return codecs.lookup(m.group(1)).name
        except LookupError:
            pass
    return "utf-8"


# prctl(2) option: whether the process may be dumped, and ptraced or read
# through /proc/<pid>/{environ,mem} by other processes of the same user.
_PR_SET_DUMPABLE = 4
_protected = False


def protect_process() -> bool:
    """Make this (lich's) process non-dumpable, once: ``prctl(PR_SET_DUMPABLE, 0)``.

    Its ``/proc/<pid>/environ``, ``mem``, ``maps`` and ``fd/`` then belong to
    root, and ``ptrace`` by a process of the same user is refused, so a command
    a tool starts cannot read the provider keys out of lich's environment or
    memory. ``cmdline`` stays readable by everyone (``ps`` shows it), and root
    is not stopped by any of this. Side effects: no core dump of lich, and a
    debugger (``gdb -p``, ``py-spy``) cannot attach unless it runs as root.

    Whether it was done (false off Linux or when ``prctl`` fails); done at most once.
    """
    global _protected
    if _protected:
        return True
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    _protected = True
    return True


# How long a killed child may take to exit before we stop waiting for it.
REAP_GRACE_S = 5.0


def kill_process(proc: asyncio.subprocess.Process, *, group: bool = False) -> None:
    """``SIGKILL`` ``proc``, or with ``group`` its whole process group (``proc`` must
    lead one: ``start_new_session=True``). One that is already gone is no error.

    The group is killed even when its leader has exited: what it left running
    in the background is still in the group.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        elif proc.returncode is None:
            proc.kill()


async def reap(
    proc: asyncio.subprocess.Process, *, group: bool = False, grace_s: float = REAP_GRACE_S
) -> int | None:
    """Kill ``proc`` (see :func:`kill_process`) and wait, at most ``grace_s``, for it
    to exit, so no zombie or open transport is left behind; its exit code, or
    ``None`` when it did not exit in time (stuck in the kernel: the signal lands
    when it can).

    Safe in a ``finally`` or an ``except CancelledError`` of a cancelled task: the
    wait is shielded, so reaping is not cut short by the cancellation already
    under way; a further cancellation ends the wait and is raised.
    """
    kill_process(proc, group=group)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(proc.wait()), grace_s)
    return proc.returncode
