"""File tools: ``read_file``, ``write_file``, ``edit_file``, ``list_dir``.

Every path is opened with :func:`lich_builtin_tools._common.open_in_work_dir`
(:func:`lich.guards.open_beneath`): component by component from directory
descriptors, symlinks followed only while they stay inside the work dir, and
every later check (file type, hard links, size) made on the descriptor, so a
tree changed mid-call cannot redirect a read or a write outside. The bodies
are plain functions: the executor runs them in a worker thread, off the event
loop.
"""

from __future__ import annotations

import codecs
import os
import stat
from collections import deque
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

from lich.guards import (
    ToolError,
    optional_bool_arg,
    optional_int_arg,
    optional_number_arg,
    optional_string_arg,
    require_string_arg,
    truncate_text,
)
from lich.tools import Tool, ToolContext
from lich.types import ToolResult
from lich_builtin_tools._common import (
    SKIP_NAMES,
    hidden,
    open_in_work_dir,
    os_error,
    output_cap,
    real_root,
    refuse_git_dir,
    refuse_hard_link,
    refuse_private_key,
    refuse_protected_write,
    schema,
)
from lich_builtin_tools._preview import edit_file_preview, write_file_preview
from lich_builtin_tools._settings import ReadFileSettings, WriteFileSettings, tool_settings

__all__ = ["edit_file_tool", "list_dir_tool", "read_file_tool", "write_file_tool"]

READ_MAX_CHARS = 256_000
EDIT_MAX_BYTES = 10_000_000
LIST_MAX_LINES = 500
LIST_MAX_DEPTH = 4
_CHUNK = 65_536
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_PATH = getattr(os, "O_PATH", os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))


_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO opens at once, then is refused


def _regular_fd(fd: int, target: str) -> os.stat_result:
    """The stat of an opened ``fd``: a directory or special file is refused (a FIFO
    would block the worker forever); checked on the descriptor, so on the file opened."""
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        raise ToolError(f"is_a_directory: {target}")
    if not stat.S_ISREG(st.st_mode):
        raise ToolError(f"not_a_regular_file: {target}")
    os.set_blocking(fd, True)
    return st


def _open_file(ctx: ToolContext, target: str, flags: int, **kwargs: Any) -> int:
    """An opened regular file inside the work dir (see :func:`open_in_work_dir`)."""
    opened = open_in_work_dir(ctx, target, flags | _O_NONBLOCK, **kwargs)
    try:
        _regular_fd(opened.fd, target)
    except BaseException:
        os.close(opened.fd)
        raise
    return opened.fd


# ---------------------------------------------------------------- read_file


def _read_window(fd: int, start: int, count: int | None, cap: int) -> str:
    """Lines ``[start, start+count)`` of the file open as ``fd`` (split on ``\\n``), at
    most ``cap + 1`` chars; closes ``fd``.

    Streams the file so that a window deep inside a huge log costs memory for
    the window only; invalid UTF-8 is replaced, not fatal.
    """
    end = None if count is None else start + count
    out: list[str] = []
    size = 0
    line = 0  # index of the line the decoder is currently in
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
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
    offset = optional_number_arg(args, "offset", 1)
    limit = optional_number_arg(args, "limit", float("inf"))
    start = max(0, int(offset) - 1)
    count = None if limit == float("inf") else max(0, int(limit))
    settings = tool_settings(ctx, "read_file", ReadFileSettings)
    cap = output_cap(settings, READ_MAX_CHARS)
    fd = _open_file(ctx, target, os.O_RDONLY)
    try:
        if not settings.allow_hard_links:
            refuse_hard_link(os.fstat(fd), target, "read_file")
        # The whole file, not the window asked for: lines 2.. of a key are the key.
        refuse_private_key(ctx, fd, target)
    except BaseException:
        os.close(fd)
        raise
    try:
        text = _read_window(fd, start, count, cap)
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
            "offset": {"type": "integer", "description": "1-based line to start at (default 1)."},
            "limit": {"type": "integer", "description": "Maximum number of lines (default all)."},
        },
        ["path"],
    ),
    execute=_read_file,
    timeout_s=30.0,
    max_output_chars=READ_MAX_CHARS,
    read_only=True,
)


# ---------------------------------------------------------------- write_file


def _write_check(ctx: ToolContext, target: str, table: str,
                 settings: WriteFileSettings) -> Callable[[str], None]:
    """The policy a write's resolved path must pass, before anything is created."""
    root = Path(real_root(ctx))

    def check(rel: str) -> None:
        refuse_protected_write(ctx, root / rel, target)
        if not settings.allow_git_dir:
            refuse_git_dir(rel, target, table)
        if ctx.check_path is not None:
            # The path as it resolves now, with its directories held: judged again by
            # the run's checks (a rule judged it before a link may have been swapped in).
            ctx.check_path(rel)

    return check


def _open_for_write(ctx: ToolContext, target: str, table: str, *, create: bool) -> int:
    """The file to write, opened without truncating it: the hard-link check needs
    its stat before anything changes."""
    settings = tool_settings(ctx, table, WriteFileSettings)
    # write_file only writes (a write-only file is fine); edit_file reads it back too.
    flags = (os.O_WRONLY | os.O_CREAT) if create else os.O_RDWR
    fd = _open_file(ctx, target, flags, check=_write_check(ctx, target, table, settings),
                    make_parents=create)
    try:
        if not settings.allow_hard_links:
            refuse_hard_link(os.fstat(fd), target, table)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _encode(text: str, arg: str) -> bytes:
    """``text`` as UTF-8, encoded before the file is touched: a lone surrogate must
    fail the call, not leave the file truncated."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(f"invalid_arg: {arg}: {exc.reason}") from None


def _replace_content(fd: int, data: bytes) -> None:
    """Make the file open as ``fd`` hold exactly ``data``; closes ``fd``."""
    with os.fdopen(fd, "wb") as fh:
        fh.seek(0)
        fh.truncate(0)
        fh.write(data)


def _write_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    target = require_string_arg(args, "path")
    content = args.get("content")
    if not isinstance(content, str):
        raise ToolError("missing_arg: content")
    data = _encode(content, "content")
    fd = _open_for_write(ctx, target, "write_file", create=True)
    try:
        _replace_content(fd, data)
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
    requires_approval=True,
    primary_arg="path",
    primary_kind="path",
    preview=write_file_preview,
    # The whole content each time: a second write of it leaves the file as the first did.
    idempotent=True,
)


# ---------------------------------------------------------------- edit_file


def _edit_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    target = require_string_arg(args, "path")
    old = require_string_arg(args, "old_string")
    new = args.get("new_string")
    if not isinstance(new, str):  # empty is fine: it deletes old_string
        raise ToolError("missing_arg: new_string")
    replace_all = optional_bool_arg(args, "replace_all", False)
    # One descriptor for the read and the write back: the file edited is the file read.
    fd = _open_for_write(ctx, target, "edit_file", create=False)
    try:
        # An edit shows the file's text back (previews, errors): not a key's.
        refuse_private_key(ctx, fd, target)
        if os.fstat(fd).st_size > EDIT_MAX_BYTES:
            raise ToolError(f"file_too_large: {target} is over {EDIT_MAX_BYTES} bytes")
        chunks = []
        while chunk := os.read(fd, _CHUNK):
            chunks.append(chunk)
        raw = b"".join(chunks)
    except BaseException as exc:
        os.close(fd)
        if isinstance(exc, OSError):
            raise os_error(exc, target) from exc
        raise
    try:
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
    except BaseException:
        os.close(fd)
        raise
    # str.replace is literal: no pattern or "$&"-style characters are special.
    updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
    replaced = occurrences if replace_all else 1
    try:
        data = _encode(updated, "new_string")
    except ToolError:
        os.close(fd)
        raise
    try:
        _replace_content(fd, data)
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
    requires_approval=True,
    primary_arg="path",
    primary_kind="path",
    preview=edit_file_preview,
)


# ---------------------------------------------------------------- list_dir


def _sorted_entries(
    fd: int, skipped: list[str] | None = None
) -> list[tuple[str, os.stat_result | None]]:
    """The entries of the directory open as ``fd``, each with its own stat (links not
    followed; ``None`` if it could not be read), directories first, then by name. The
    names left out (:data:`SKIP_NAMES`) are appended to ``skipped``."""
    entries: list[tuple[str, os.stat_result | None]] = []
    with os.scandir(fd) as it:
        # A DirEntry of a descriptor stats through it, so while the scan is open.
        for entry in it:
            if entry.name in SKIP_NAMES:
                if skipped is not None:
                    skipped.append(entry.name)
                continue
            try:
                entries.append((entry.name, entry.stat(follow_symlinks=False)))
            except OSError:
                entries.append((entry.name, None))

    def key(item: tuple[str, os.stat_result | None]) -> tuple[int, str, str]:
        name, st = item
        is_dir = st is not None and stat.S_ISDIR(st.st_mode)
        return (0 if is_dir else 1, name.casefold(), name)

    return sorted(entries, key=key)


def _join(rel: str, name: str) -> str:
    return name if rel == "." else f"{rel}/{name}"


def _describe_link(ctx: ToolContext, rel: str, name: str) -> str:
    """The listing line of a symlink: its target's, when that stays inside the work dir.

    The link is resolved with :func:`open_in_work_dir` like any path argument,
    so what is shown is what a tool given this path would open.
    """
    try:
        # O_PATH (Linux): stat the target without opening it for reading (no side
        # effects, and a file without read permission is still described).
        opened = open_in_work_dir(ctx, _join(rel, name), _O_PATH)
    except ToolError as exc:
        if str(exc).startswith("path_escape:"):
            return f"- {name} (symlink outside the work dir)"
        return f"- {name} (broken symlink)"
    try:
        st = os.fstat(opened.fd)
    finally:
        os.close(opened.fd)
    if stat.S_ISDIR(st.st_mode):
        return f"d {name}/"
    return f"- {name} ({st.st_size} bytes)"


def _walk_listing(
    fd: int, rel: str, depth: int, ctx: ToolContext, skipped: list[str] | None = None
) -> Generator[str, None, None]:
    """The listing lines, breadth-first from the directory open as ``fd`` (closed here);
    the paths of the entries left out by name (:data:`SKIP_NAMES`) go to ``skipped``.

    Each deeper directory is opened again from the work dir by its resolved path
    with no symlink followed, so one swapped for a link since it was listed is
    skipped, never entered; links are described, never descended (no cycles).
    """
    queue: deque[tuple[str, int]] = deque([(rel, 1)])
    first: int | None = fd
    root = real_root(ctx)
    while queue:
        if ctx.cancel.cancelled:
            break
        current, level = queue.popleft()
        if first is None:
            try:
                dir_fd = open_in_work_dir(ctx, current, os.O_RDONLY | _O_DIRECTORY,
                                          follow_links=False).fd
            except ToolError:
                continue  # gone, unreadable or swapped for a link: skipped
        else:
            dir_fd, first = first, None
        try:
            names: list[str] = []
            entries = _sorted_entries(dir_fd, names)
            if skipped is not None:
                skipped.extend(_join(current, name) for name in sorted(names))
        except OSError:
            continue  # unreadable directories are skipped, as in the reference
        finally:
            os.close(dir_fd)
        for name, st in entries:
            if hidden(ctx, os.path.join(root, current, name), root):
                # Left out as if absent: the listing does not confirm a protected file.
                continue
            if st is None:
                yield f"- {name} (0 bytes)"
            elif stat.S_ISLNK(st.st_mode):
                yield _describe_link(ctx, current, name)
            elif stat.S_ISDIR(st.st_mode):
                yield f"d {name}/"
                if level < depth:
                    queue.append((_join(current, name), level + 1))
            else:
                yield f"- {name} ({st.st_size} bytes)"
    if first is not None:
        os.close(first)


def _list_dir(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    target = optional_string_arg(args, "path", ".")
    depth = optional_int_arg(args, "depth", 1, lo=1, hi=LIST_MAX_DEPTH)
    opened = open_in_work_dir(ctx, target, os.O_RDONLY | _O_DIRECTORY)
    lines: list[str] = []
    skipped: list[str] = []
    listing = _walk_listing(opened.fd, opened.rel, depth, ctx, skipped)
    try:
        for line in listing:
            if len(lines) >= LIST_MAX_LINES:
                lines.append(f"(... truncated at {LIST_MAX_LINES} entries)")
                break
            lines.append(line)
    finally:
        listing.close()  # closes the directory descriptor of an unfinished walk
    if not lines:
        # Never an empty answer, which reads as a failed call: say why there is nothing.
        if skipped:
            return ToolResult.success("(nothing listed: every entry is one that list_dir "
                                      "skips: " + ", ".join(skipped) + ")")
        return ToolResult.success("(empty directory)")
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
            "depth": {"type": "integer", "description": "Levels to descend, 1-4 (default 1)."},
        }
    ),
    execute=_list_dir,
    timeout_s=30.0,
    read_only=True,
    primary_arg="path",
    primary_kind="path",
)
