"""File tools: ``read_file``, ``write_file``, ``edit_file``, ``list_dir``.

Every path resolves with symlinks followed and must stay inside the work dir
(:func:`lich.guards.resolve_in_root`). The bodies are plain functions: the
executor runs them in a worker thread, off the event loop.
"""

from __future__ import annotations

import codecs
import os
import stat
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lich.guards import (
    ToolError,
    is_within,
    optional_bool_arg,
    optional_int_arg,
    optional_number_arg,
    optional_string_arg,
    require_string_arg,
    truncate_text,
)
from lich.settings import ToolSettings
from lich.tools import Tool, ToolContext
from lich.types import ToolResult
from lich_builtin_tools._common import (
    SKIP_NAMES,
    hidden,
    os_error,
    output_cap,
    real_root,
    refuse_protected_write,
    resolve_path,
    schema,
)
from lich_builtin_tools._settings import tool_settings

__all__ = ["edit_file_tool", "list_dir_tool", "read_file_tool", "write_file_tool"]

READ_MAX_CHARS = 256_000
EDIT_MAX_BYTES = 10_000_000
LIST_MAX_LINES = 500
LIST_MAX_DEPTH = 4
_CHUNK = 65_536


def _require_regular(path: Path, target: str, *, missing_ok: bool = False) -> None:
    """Refuse directories and special files (a FIFO would block the worker forever)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if missing_ok:
            return
        raise ToolError(f"not_found: {target}") from None
    except OSError as exc:
        raise os_error(exc, target) from exc
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(f"is_a_directory: {target}")
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(f"not_a_regular_file: {target}")


# ---------------------------------------------------------------- read_file


def _read_window(path: Path, start: int, count: int | None, cap: int) -> str:
    """Lines ``[start, start+count)`` of ``path`` (split on ``\\n``), at most ``cap + 1`` chars.

    Streams the file so that a window deep inside a huge log costs memory for
    the window only; invalid UTF-8 is replaced, not fatal.
    """
    end = None if count is None else start + count
    out: list[str] = []
    size = 0
    line = 0  # index of the line the decoder is currently in
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as fh:
        while True:
            chunk = fh.read(_CHUNK)
            text = decoder.decode(chunk, final=not chunk)
            pieces = text.split("\n")
            for i, piece in enumerate(pieces):
                if i > 0:
                    line += 1
                    if start < line and (end is None or line < end):
                        out.append("\n")
                        size += 1
                if start <= line and (end is None or line < end) and piece:
                    out.append(piece)
                    size += len(piece)
                if size > cap or (end is not None and line >= end):
                    return "".join(out)
            if not chunk:
                return "".join(out)


def _read_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    target = require_string_arg(args, "path")
    path = resolve_path(ctx, target)
    offset = optional_number_arg(args, "offset", 1)
    limit = optional_number_arg(args, "limit", float("inf"))
    start = max(0, int(offset) - 1)
    count = None if limit == float("inf") else max(0, int(limit))
    cap = output_cap(tool_settings(ctx, "read_file", ToolSettings), READ_MAX_CHARS)
    _require_regular(path, target)
    try:
        text = _read_window(path, start, count, cap)
    except OSError as exc:
        raise os_error(exc, target) from exc
    return ToolResult.success(truncate_text(text, cap))


read_file_tool = Tool(
    name="read_file",
    description=(
        "Read a UTF-8 text file inside the work directory, optionally a window of lines "
        "(offset is the 1-based first line, limit the number of lines)."
    ),
    parameters=schema(
        {
            "path": {"type": "string", "description": "File path relative to the work dir."},
            "offset": {"type": "number", "description": "1-based line to start at (default 1)."},
            "limit": {"type": "number", "description": "Maximum number of lines (default all)."},
        },
        ["path"],
    ),
    execute=_read_file,
    timeout_s=30.0,
    max_output_chars=READ_MAX_CHARS,
)


# ---------------------------------------------------------------- write_file


def _write_text(path: Path, content: str) -> None:
    # O_NOFOLLOW: the path was resolved already; refuse a link swapped in since.
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o666)
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
        fh.write(content)


def _write_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    target = require_string_arg(args, "path")
    content = args.get("content")
    if not isinstance(content, str):
        raise ToolError("missing_arg: content")
    path = resolve_path(ctx, target)
    refuse_protected_write(ctx, path, target)
    _require_regular(path, target, missing_ok=True)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_text(path, content)
    except OSError as exc:
        raise os_error(exc, target) from exc
    return ToolResult.success(f"wrote {len(content)} chars to {target}")


write_file_tool = Tool(
    name="write_file",
    description=(
        "Write (or overwrite) a UTF-8 text file inside the work directory, creating parent "
        "directories. Writes into .lich/ and to .env files are refused."
    ),
    parameters=schema(
        {
            "path": {"type": "string", "description": "File path relative to the work dir."},
            "content": {"type": "string", "description": "The full new content (may be empty)."},
        },
        ["path", "content"],
    ),
    execute=_write_file,
    timeout_s=30.0,
)


# ---------------------------------------------------------------- edit_file


def _edit_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    target = require_string_arg(args, "path")
    old = require_string_arg(args, "old_string")
    new = args.get("new_string")
    if not isinstance(new, str):  # empty is fine: it deletes old_string
        raise ToolError("missing_arg: new_string")
    replace_all = optional_bool_arg(args, "replace_all", False)
    path = resolve_path(ctx, target)
    refuse_protected_write(ctx, path, target)
    _require_regular(path, target)
    try:
        if path.stat().st_size > EDIT_MAX_BYTES:
            raise ToolError(f"file_too_large: {target} is over {EDIT_MAX_BYTES} bytes")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise os_error(exc, target) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        # Writing back a lossy decode would corrupt the file.
        raise ToolError(f"invalid_encoding: {target} is not valid UTF-8 text") from exc
    occurrences = text.count(old)
    if occurrences == 0:
        raise ToolError("old_string_not_found")
    if occurrences > 1 and not replace_all:
        raise ToolError(f"old_string_not_unique ({occurrences} occurrences)")
    # str.replace is literal: no pattern or "$&"-style characters are special.
    updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    replaced = occurrences if replace_all else 1
    try:
        _write_text(path, updated)
    except OSError as exc:
        raise os_error(exc, target) from exc
    return ToolResult.success(f"edited {target} (replaced {replaced} occurrence(s))")


edit_file_tool = Tool(
    name="edit_file",
    description=(
        "Replace an exact string in a file (literally, no patterns). old_string must occur "
        "exactly once unless replace_all is true; an empty new_string deletes it."
    ),
    parameters=schema(
        {
            "path": {"type": "string", "description": "File path relative to the work dir."},
            "old_string": {"type": "string", "description": "The exact text to replace."},
            "new_string": {"type": "string", "description": "The replacement (may be empty)."},
            "replace_all": {
                "type": "boolean",
                "description": "Replace every occurrence (default false).",
            },
        },
        ["path", "old_string", "new_string"],
    ),
    execute=_edit_file,
    timeout_s=30.0,
)


# ---------------------------------------------------------------- list_dir


def _sorted_entries(path: str, ctx: ToolContext, root: str) -> list[os.DirEntry[str]]:
    with os.scandir(path) as it:
        # Protected entries are left out as if absent: the listing does not confirm them.
        entries = [e for e in it if e.name not in SKIP_NAMES and not hidden(ctx, e.path, root)]

    def key(e: os.DirEntry[str]) -> tuple[int, str, str]:
        try:
            is_dir = e.is_dir(follow_symlinks=False)
        except OSError:
            is_dir = False
        return (0 if is_dir else 1, e.name.casefold(), e.name)

    return sorted(entries, key=key)


def _describe(entry: os.DirEntry[str], root: str) -> tuple[str, str | None]:
    """The listing line for ``entry`` and the directory to descend into (if any).

    Symlinks are described by their target only when it stays inside the
    root, and never descended (no cycles, no escapes).
    """
    try:
        if entry.is_symlink():
            real = os.path.realpath(entry.path)
            if not is_within(root, real):
                return f"- {entry.name} (symlink outside the work dir)", None
            if not os.path.exists(real):
                return f"- {entry.name} (broken symlink)", None
            if os.path.isdir(real):
                return f"d {entry.name}/", None
            return f"- {entry.name} ({os.stat(real).st_size} bytes)", None
        st = entry.stat(follow_symlinks=False)
    except OSError:
        return f"- {entry.name} (0 bytes)", None
    if stat.S_ISDIR(st.st_mode):
        return f"d {entry.name}/", entry.path
    return f"- {entry.name} ({st.st_size} bytes)", None


def _walk_listing(start: str, depth: int, root: str, ctx: ToolContext) -> Iterator[str]:
    queue: deque[tuple[str, int]] = deque([(start, 1)])
    while queue:
        if ctx.cancel.cancelled:
            return
        current, level = queue.popleft()
        try:
            entries = _sorted_entries(current, ctx, root)
        except OSError:
            continue  # unreadable directories are skipped, as in the reference
        for entry in entries:
            line, descend = _describe(entry, root)
            yield line
            if descend is not None and level < depth:
                queue.append((descend, level + 1))


def _list_dir(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    target = optional_string_arg(args, "path", ".")
    depth = optional_int_arg(args, "depth", 1, lo=1, hi=LIST_MAX_DEPTH)
    path = resolve_path(ctx, target)
    if not path.exists():
        raise ToolError(f"not_found: {target}")
    if not path.is_dir():
        raise ToolError(f"not_a_directory: {target}")
    lines: list[str] = []
    for line in _walk_listing(str(path), depth, real_root(ctx), ctx):
        if len(lines) >= LIST_MAX_LINES:
            lines.append(f"(... truncated at {LIST_MAX_LINES} entries)")
            break
        lines.append(line)
    return ToolResult.success("\n".join(lines))


list_dir_tool = Tool(
    name="list_dir",
    description=(
        "List a directory breadth-first (depth 1-4): 'd name/' for directories, "
        "'- name (N bytes)' for files. Skips node_modules, .git, dist, .lich, .cursor."
    ),
    parameters=schema(
        {
            "path": {"type": "string", "description": "Directory (default '.')."},
            "depth": {"type": "number", "description": "Levels to descend, 1-4 (default 1)."},
        }
    ),
    execute=_list_dir,
    timeout_s=30.0,
)
