"""The ``grep_files`` tool: regex search over the lines of the files under a path.

Bound on pathological patterns: the pattern is capped at 1000 characters and
the search runs in a worker process killed at a deadline (the time budget,
``[tools.grep_files] time_budget_s``, default 10 s) — see :func:`_grep_files`.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from lich import guards, secret_files
from lich.guards import ToolError, optional_int_arg, optional_string_arg, require_string_arg
from lich.processes import Launch, ProcessRunner, launched
from lich.tools import Tool, ToolContext
from lich.types import ToolResult
from lich_builtin_tools._common import (
    SKIP_NAMES,
    Deadline,
    call_deadline,
    child_env,
    open_in_work_dir,
    real_root,
    reap,
    schema,
    time_cap_s,
)
from lich_builtin_tools._settings import DEFAULT_TIME_BUDGET_S, GrepFilesSettings, tool_settings

__all__ = ["DEFAULT_TIME_BUDGET_S", "MAX_PATTERN_CHARS", "grep_files_tool"]

MAX_PATTERN_CHARS = 1000
DEFAULT_MAX_RESULTS = 200
MAX_RESULTS_CAP = 1000
_WORKER = Path(__file__).with_name("_grep_worker.py")


async def _grep_files(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Search files for a regex.

    **How the work is bounded.** Python's ``re`` backtracks, and a single
    match of a pattern such as ``(a+)+$`` against a long line can run for
    hours without ever returning to Python code, so a time check between lines
    cannot stop it. Instead the search runs in a separate worker process
    (``python -I -S _grep_worker.py``) that is killed at the deadline: the
    time budget (``[tools.grep_files] time_budget_s``, default 10 s) bounds
    every search, whatever the pattern. Patterns longer than
    ``MAX_PATTERN_CHARS`` (1000) are refused up front. Matches the worker
    found before the deadline are returned with a ``search_timeout:`` error.
    """
    pattern = require_string_arg(args, "pattern")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolError(f"pattern_too_long: {len(pattern)} chars (max {MAX_PATTERN_CHARS})")
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        raise ToolError(f"invalid_regex: {pattern}") from exc
    target = optional_string_arg(args, "path", ".")
    glob = optional_string_arg(args, "glob", "")
    max_results = optional_int_arg(
        args, "max_results", DEFAULT_MAX_RESULTS, lo=1, hi=MAX_RESULTS_CAP
    )
    settings = tool_settings(ctx, "grep_files", GrepFilesSettings)
    # The search stops at its budget (or the configured limit, less the time kept back
    # for killing the worker), and the call returns its matches before the executor's limit.
    deadline = call_deadline(settings, grep_files_tool.timeout_s, settings.time_budget_s)
    budget = min(settings.time_budget_s, time_cap_s(settings, grep_files_tool.timeout_s))
    # The worker searches the very file or directory checked here: it inherits the
    # descriptor, and walks below it from descriptors too (see _grep_worker).
    opened = open_in_work_dir(ctx, target, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        spec = {
            "pattern": pattern,
            "root": real_root(ctx),
            "fd": opened.fd,
            "rel": opened.rel,
            "name": os.path.basename(opened.rel),
            "guards": guards.__file__,
            "allow_hard_links": settings.allow_hard_links,
            "glob": glob,
            "limit": max_results + 1,
            "skip": sorted(SKIP_NAMES),
            # The worker runs without lich (python -I -S): it gets the policy as data and
            # applies the same rule as lich.protected.ProtectedPaths.blocks.
            "protected_dirs": list(ctx.protected.dirs),
            "protected_names": list(ctx.protected.names),
            "protected_content": bool(ctx.protected),
            "secret_files": secret_files.__file__,
        }
        hits, finished = await _run_worker(spec, deadline, opened.fd, child_env(ctx),
                                           ctx.process_runner, real_root(ctx))
    finally:
        os.close(opened.fd)
    lines = hits[:max_results]
    if len(hits) > max_results:
        lines.append(f"(... {len(hits) - max_results} more matches suppressed)")
    output = "\n".join(lines)
    if not finished:
        return ToolResult.failure(
            f"search_timeout: grep_files stopped after its {budget:g}s time budget "
            f"({len(hits)} matches found before that are in the output); "
            "simplify the pattern or narrow the path",
            output,
        )
    return ToolResult.success(output)


async def _run_worker(
    spec: dict[str, Any], deadline: Deadline, fd: int, env: dict[str, str],
    runner: ProcessRunner, cwd: str,
) -> tuple[list[str], bool]:
    """Run the worker through ``runner`` on the file or directory open as ``fd``
    (passed down to it), in ``env`` (scrubbed of secrets); returns the hits and
    whether it finished by ``deadline.stop``."""
    launch = Launch(argv=(sys.executable, "-I", "-S", str(_WORKER)), env=env, cwd=cwd,
                    kind="helper", owner="grep_files", pass_fds=(fd,))
    async with launched(runner, launch) as run:
        return await _search(spec, deadline, run)


async def _search(spec: dict[str, Any], deadline: Deadline, run: Launch
                  ) -> tuple[list[str], bool]:
    proc = await asyncio.create_subprocess_exec(
        *run.argv,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        limit=1 << 20, pass_fds=run.pass_fds, env=dict(run.env), cwd=run.cwd,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stderr is not None
    hits: list[str] = []
    finished = False
    try:
        proc.stdin.write(json.dumps(spec).encode())
        proc.stdin.close()
        async with asyncio.timeout_at(deadline.stop):
            while line := await proc.stdout.readline():
                if line.endswith(b"\n"):  # a line cut short by a dying worker is dropped
                    hits.append(json.loads(line))
            code = await proc.wait()
            finished = True
        if code != 0:
            detail = (await proc.stderr.read(4000)).decode("utf-8", "replace").strip()
            last = detail.splitlines()[-1] if detail else f"exit {code}"
            raise ToolError(f"grep_failed: {last}")
    except TimeoutError:
        pass
    finally:
        if proc.returncode is None:
            # Bounded by the call's end (also when we are being cancelled): the matches
            # found so far are returned in time, the child watcher reaps the rest.
            await reap(proc, grace_s=deadline.grace())
    return hits, finished


grep_files_tool = Tool(
    name="grep_files",
    description=(
        "Search file contents for a regular expression (Python syntax). Lines come back as "
        "'<path>:<line>: <text>'. glob filters file names ('*.py', 'prefix*', exact name). "
        "Skips node_modules, .git, dist, .lich, .cursor, secret files (.env, keys), binary "
        "files, files of 1 MB or more and files with more than one hard link. "
        "Each search has a time budget (10 s by default)."
    ),
    parameters=schema(
        {
            "pattern": {"type": "string", "description": "Regular expression to search for."},
            "path": {"type": "string", "description": "File or directory (default '.')."},
            "glob": {"type": "string", "description": "File name filter, e.g. '*.py'."},
            "max_results": {"type": "integer", "description": "Maximum matches (default 200)."},
        },
        ["pattern"],
    ),
    execute=_grep_files,
    timeout_s=30.0,
    read_only=True,
    # The directory searched, not the regular expression: `grep_files(docs/*)`.
    primary_arg="path",
    primary_kind="path",
)
