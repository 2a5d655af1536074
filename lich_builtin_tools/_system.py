"""System tools: ``process_list``, ``disk_usage``, ``env_get``."""

from __future__ import annotations

import asyncio
import os
import subprocess
from typing import Any

from lich.guards import (
    ToolError,
    optional_bool_arg,
    optional_int_arg,
    optional_string_arg,
    truncate_text,
)
from lich.processes import DIRECT, Launch, ProcessRunner, launched
from lich.secrets import is_secret_entry
from lich.settings import ToolSettings
from lich.tools import Tool, ToolContext
from lich.types import ToolResult
from lich_builtin_tools._common import (
    Deadline,
    call_deadline,
    child_env,
    hidden,
    open_in_work_dir,
    output_cap,
    real_root,
    reap,
    schema,
)
from lich_builtin_tools._settings import tool_settings

__all__ = ["disk_usage_tool", "make_env_get_tool", "process_list_tool"]

PROC = "/proc"
CMDLINE_CAP = 200
DU_TIMEOUT_S = 30.0
ENV_VALUE_CAP = 2000
ENV_MAX_KEYS = 50


# ---------------------------------------------------------------- process_list


def _read_proc(pid: str) -> tuple[str, str] | None:
    try:
        with open(f"{PROC}/{pid}/comm", "rb") as fh:
            comm = fh.read().decode("utf-8", "replace").strip()
        with open(f"{PROC}/{pid}/cmdline", "rb") as fh:
            raw = fh.read(64 * 1024)
    except OSError:
        return None  # the process went away (or is not ours to read)
    cmdline = raw.replace(b"\x00", b" ").decode("utf-8", "replace").strip()[:CMDLINE_CAP]
    return comm, cmdline


def _process_list(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    needle = optional_string_arg(args, "filter", "").lower()
    max_results = optional_int_arg(args, "max_results", 50, lo=1, hi=500)
    cap = output_cap(tool_settings(ctx, "process_list", ToolSettings), 20_000)
    try:
        pids = sorted((name for name in os.listdir(PROC) if name.isdigit()), key=int)
    except OSError as exc:
        raise ToolError("proc_unavailable") from exc
    rows: list[str] = []
    for pid in pids:
        info = _read_proc(pid)
        if info is None:
            continue
        comm, cmdline = info
        if needle and needle not in (cmdline or comm).lower():
            continue
        rows.append(f"{pid}\t{comm}\t{cmdline}")
    if not rows:
        return ToolResult.success("no matching processes")
    shown = rows[:max_results]
    if len(rows) > max_results:
        shown.append(f"(... {len(rows) - max_results} more processes suppressed)")
    return ToolResult.success(truncate_text("\n".join(shown), cap))


process_list_tool = Tool(
    name="process_list",
    description=(
        "List running processes from /proc as '<pid>\\t<comm>\\t<cmdline>', optionally "
        "filtered by a case-insensitive substring of the command line."
    ),
    parameters=schema(
        {
            "filter": {"type": "string", "description": "Case-insensitive substring to match."},
            "max_results": {"type": "integer",
                            "description": "Rows to show (default 50, max 500)."},
        }
    ),
    execute=_process_list,
    timeout_s=30.0,
    read_only=True,
)


# ---------------------------------------------------------------- disk_usage


def _fd_dir(fd: int) -> str:
    """A path that names the directory open as ``fd`` in a child that inherits it.

    ``/proc/self/fd/N`` is resolved by the kernel to the open directory itself,
    not by name, so ``du`` starts in the directory that was checked even if its
    path has been swapped for a symlink since.
    """
    return f"/proc/self/fd/{fd}"


def _protected_globs(ctx: ToolContext) -> tuple[str, ...]:
    """What ``du`` must not count: protected names, and the protected dirs' own names
    (a relocated session dir below the measured one would otherwise show its growth)."""
    policy = ctx.protected
    if not policy:
        return ()
    # du matches globs case-sensitively; the policy's are lower case (common spellings).
    names = (*policy.names, *(os.path.basename(d) for d in policy.dirs))
    return tuple(dict.fromkeys((*names, *(n.upper() for n in names))))


async def _du(
    dir_fd: int, names: list[str], deadline: Deadline, env: dict[str, str],
    exclude: tuple[str, ...] = (), runner: ProcessRunner = DIRECT,
) -> dict[str, int]:
    """Apparent sizes (``du -sbl``) of ``names`` inside the directory open as
    ``dir_fd``, in one ``du`` run, in ``env`` (scrubbed of secrets).

    ``-l`` counts hard links each time, as separate runs would; symlinks are
    measured, not followed (``du`` walks with ``fts`` relative to directory
    descriptors). NUL-separated output survives any file name. ``exclude`` are
    name globs left out of every size (protected files: a size would show them).
    Started through ``runner``; stopped at ``deadline.stop``, reaped by its end.
    """
    launch = Launch(
        argv=("du", "-sbl0", *(f"--exclude={glob}" for glob in exclude), "--", *names),
        env=env, cwd=_fd_dir(dir_fd), kind="helper", owner="disk_usage", pass_fds=(dir_fd,))
    async with launched(runner, launch) as run:
        proc = await asyncio.create_subprocess_exec(
            *run.argv, cwd=run.cwd, pass_fds=run.pass_fds, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=dict(run.env),
        )
        try:
            async with asyncio.timeout_at(deadline.stop):
                out, _ = await proc.communicate()
        finally:
            if proc.returncode is None:
                await reap(proc, grace_s=deadline.grace())
    sizes: dict[str, int] = {}
    for record in out.split(b"\x00"):
        size, sep, name = record.partition(b"\t")
        if sep and size.isdigit():
            sizes[os.fsdecode(name)] = int(size)
    return sizes


async def _disk_usage(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    target = optional_string_arg(args, "path", ".")
    max_entries = optional_int_arg(args, "max_entries", 25, lo=1, hi=200)
    deadline = call_deadline(tool_settings(ctx, "disk_usage", ToolSettings),
                             disk_usage_tool.timeout_s, DU_TIMEOUT_S)
    # Opened and listed in the event loop's thread (a few system calls): a worker thread
    # cancelled mid-way would leave the descriptor open, or see it closed under it.
    opened = open_in_work_dir(ctx, target, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    dir_fd = opened.fd
    try:
        try:
            names = os.listdir(dir_fd)
        except OSError as exc:
            raise ToolError(f"du_unavailable: {exc.strerror or exc}") from exc
        # Protected children are left out, as if absent (their sizes would say they exist).
        root = real_root(ctx)
        names = [n for n in names if not hidden(ctx, os.path.join(root, opened.rel, n), root)]
        sizes: dict[str, int] = {}
        if names:
            try:
                sizes = await _du(dir_fd, names, deadline, child_env(ctx),
                                  _protected_globs(ctx), ctx.process_runner)
            except (OSError, TimeoutError) as exc:
                raise ToolError("du_unavailable") from exc
    finally:
        os.close(dir_fd)
    # A child du could not size at all (it vanished, or is unreadable) fails the whole
    # answer, as in the reference; du's partial sizes for unreadable subtrees are kept.
    if set(names) - set(sizes):
        raise ToolError("du_unavailable")
    ranked = sorted(names, key=lambda n: (-sizes[n], n))
    lines = [f"{sizes[n]}\t{n}" for n in ranked[:max_entries]]
    if len(ranked) > max_entries:
        lines.append(f"(... {len(ranked) - max_entries} more entries suppressed)")
    lines.append(f"TOTAL\t{sum(sizes.values())}")
    return ToolResult.success("\n".join(lines))


disk_usage_tool = Tool(
    name="disk_usage",
    description=(
        "Sizes in bytes of a directory's direct children (du -sb), largest first, then TOTAL."
    ),
    parameters=schema(
        {
            "path": {"type": "string", "description": "Directory (default '.')."},
            "max_entries": {"type": "integer",
                            "description": "Rows to show (default 25, max 200)."},
        }
    ),
    execute=_disk_usage,
    timeout_s=DU_TIMEOUT_S + 10,
    read_only=True,
    primary_arg="path",
    primary_kind="path",
)


# ---------------------------------------------------------------- env_get


def make_env_get_tool() -> Tool:
    """The ``env_get`` tool; provider key variables (``ctx.secret_env_names``) stay redacted."""

    def env_get(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        env = {**os.environ, **ctx.env}
        secret_names = ctx.secret_env_names
        raw_keys = args.get("keys")
        keys = (
            [k for k in raw_keys if isinstance(k, str) and k][:ENV_MAX_KEYS]
            if isinstance(raw_keys, list)
            else []
        )
        prefix = optional_string_arg(args, "prefix", "")
        reveal = optional_bool_arg(args, "reveal", False)
        if not keys and not prefix:
            names = sorted(env)
            return ToolResult.success(f"{len(names)} variables: {', '.join(names)}")
        if not keys:
            keys = sorted(n for n in env if n.startswith(prefix))
            if not keys:
                return ToolResult.success(f"no variables start with {prefix}")
        lines = []
        for name in keys:
            value = env.get(name)
            if value is None:
                lines.append(f"{name}=<unset>")
            elif not reveal:
                lines.append(f"{name}=set ({len(value)} chars)")
            elif is_secret_entry(name, value) or name in secret_names:
                lines.append(f"{name}=<redacted: {len(value)} chars>")
            else:
                lines.append(f"{name}={value[:ENV_VALUE_CAP]}")
        return ToolResult.success("\n".join(lines))

    return Tool(
        name="env_get",
        description=(
            "Inspect environment variables: with no arguments, list their names; with keys "
            "or a prefix, say whether each is set and its length. reveal=true shows values, "
            "except secret-looking names, which stay redacted."
        ),
        parameters=schema(
            {
                "keys": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Variable names (at most 50).",
                },
                "prefix": {"type": "string", "description": "List variables with this prefix."},
                "reveal": {"type": "boolean", "description": "Show values (default false)."},
            }
        ),
        execute=env_get,
        timeout_s=30.0,
        read_only=True,
    )
