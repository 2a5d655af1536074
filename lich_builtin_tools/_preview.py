"""What ``write_file`` and ``edit_file`` would change, for the person approving them.

A :data:`lich.tools.PreviewFn` gets the call's arguments and the work dir, not a
tool context, so it applies lich's private-file policy itself: lich's own
``.lich`` directory and the secret files (:data:`lich.protected.SECRET_FILE_GLOBS`)
are never read, whatever the config says, and the file is opened beneath the
work dir (:func:`lich.guards.open_beneath`) so that a symlink cannot point the
preview elsewhere. Nothing is written; the diff is capped.
"""

from __future__ import annotations

import difflib
import errno
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lich.guards import ToolError, open_beneath, truncate_text
from lich.protected import SECRET_FILE_GLOBS, ProtectedPaths, is_protected
from lich.secret_files import holds_private_key

__all__ = ["PREVIEW_MAX_CHARS", "edit_file_preview", "write_file_preview"]

PREVIEW_MAX_CHARS = 20_000
"""The longest diff shown; a longer one is cut with a note."""
_READ_MAX_BYTES = 2_000_000  # a larger file gets a note, not a diff


class _NoPreview(Exception):
    """Why there is no diff to show (the message is shown instead)."""


def _policy(root: str) -> ProtectedPaths:
    return ProtectedPaths((os.path.join(root, ".lich"),), (".lich", *SECRET_FILE_GLOBS))


def _current_text(work_dir: Path, target: str) -> str | None:
    """The file's text now, ``None`` when it does not exist."""
    root = os.path.realpath(work_dir)
    policy = _policy(root)

    def refuse(rel: str) -> None:
        if is_protected(policy, os.path.join(root, rel), root):
            raise _NoPreview(f"(no preview: {target} is a protected path)")

    try:
        opened = open_beneath(root, target, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0),
                              check=refuse)
    except ToolError as exc:
        raise _NoPreview(f"(no preview: {exc})") from None
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return None
        raise _NoPreview(f"(no preview: {exc.strerror or exc})") from None
    fd = opened.fd
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _NoPreview(f"(no preview: {target} is not a regular file)")
        if st.st_size > _READ_MAX_BYTES:
            raise _NoPreview(f"(no preview: {target} is {st.st_size} bytes)")
        os.set_blocking(fd, True)
        data = os.read(fd, _READ_MAX_BYTES + 1)
    finally:
        os.close(fd)
    if holds_private_key(data):
        raise _NoPreview(f"(no preview: {target} holds a private key)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _NoPreview(f"(no preview: {target} is not UTF-8 text)") from None


def _diff(target: str, old: str | None, new: str) -> str:
    before = [] if old is None else old.splitlines(keepends=True)
    after = new.splitlines(keepends=True)
    lines = difflib.unified_diff(before, after, "/dev/null" if old is None else f"a/{target}",
                                 f"b/{target}")
    text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
                   for line in lines)
    if not text:
        return f"(no change: {target} already has this content)"
    return truncate_text(text, PREVIEW_MAX_CHARS)


def write_file_preview(args: Mapping[str, Any], work_dir: Path) -> str | None:
    """A unified diff of ``write_file``: against the file as it is, or a new file."""
    target, content = args.get("path"), args.get("content")
    if not isinstance(target, str) or not isinstance(content, str):
        return None
    try:
        return _diff(target, _current_text(work_dir, target), content)
    except _NoPreview as exc:
        return str(exc)


def edit_file_preview(args: Mapping[str, Any], work_dir: Path) -> str | None:
    """A unified diff of ``edit_file``, made as the edit would be (a literal
    replacement), or why the edit would fail."""
    target, old, new = args.get("path"), args.get("old_string"), args.get("new_string")
    if not isinstance(target, str) or not isinstance(old, str) or not isinstance(new, str):
        return None
    try:
        text = _current_text(work_dir, target)
    except _NoPreview as exc:
        return str(exc)
    if text is None:
        return f"(no preview: {target} does not exist; the edit would fail)"
    count = text.count(old) if old else 0
    if count == 0:
        return f"(no preview: old_string is not in {target}; the edit would fail)"
    replace_all = args.get("replace_all") is True
    if count > 1 and not replace_all:
        return (f"(no preview: old_string occurs {count} times in {target}; the edit would "
                "fail without replace_all)")
    return _diff(target, text, text.replace(old, new) if replace_all else text.replace(old, new, 1))
