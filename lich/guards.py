"""Guard helpers for tool authors: argument checks, path confinement, output clamps.

Tools raise :class:`ToolError` with a coded message (``missing_arg: path``,
``path_escape: ../x escapes /work``); the executor turns it into a failed
:class:`lich.ToolResult` for the model. The module uses the standard library
only (the ``grep_files`` worker loads it by file path, outside the package).

Two ways to confine a path: :func:`resolve_in_root` checks a path and returns
it (enough when nothing else changes the tree meanwhile);
:func:`open_beneath` opens it component by component from directory
descriptors, so a directory swapped for a symlink between the check and the
open cannot send it outside (what the builtin file tools use).
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeAlias

__all__ = [
    "DEFAULT_MAX_OUTPUT_CHARS",
    "DEFAULT_TOOL_TIMEOUT_S",
    "MAX_PATH_CHARS",
    "MAX_SYMLINKS",
    "Opened",
    "ToolError",
    "TruncateStyle",
    "check_path_arg",
    "is_within",
    "open_beneath",
    "optional_bool_arg",
    "optional_int_arg",
    "optional_number_arg",
    "optional_string_arg",
    "require_string_arg",
    "resolve_in_root",
    "truncate_text",
]

DEFAULT_MAX_OUTPUT_CHARS = 20_000
DEFAULT_TOOL_TIMEOUT_S = 30.0
MAX_PATH_CHARS = 4096


class ToolError(Exception):
    """A tool failure the model should read: its message starts with a code."""


TruncateStyle: TypeAlias = Literal["block", "inline", "ellipsis"]


def truncate_text(text: str, max_chars: int, *, style: TruncateStyle = "block") -> str:
    """``text`` cut to ``max_chars`` characters, marked when anything was cut.

    The one truncation of lich and its plugins; the style says for what:

    * ``"block"`` (output a model reads): the first ``max_chars`` characters,
      then ``[... truncated, N chars omitted ...]`` on a line of its own;
    * ``"inline"`` (one-line messages: error bodies, previews): the first
      ``max_chars`` characters, then ``… [N chars omitted]``;
    * ``"ellipsis"`` (a column on a screen): at most ``max_chars`` characters
      in all (but at least the mark), the last one ``…``.
    """
    limit = max(0, max_chars)
    if len(text) <= limit:
        return text
    if style == "ellipsis":
        return text[: max(0, limit - 1)] + "…"
    omitted = len(text) - limit
    if style == "inline":
        return f"{text[:limit]}… [{omitted} chars omitted]"
    return f"{text[:limit]}\n[... truncated, {omitted} chars omitted ...]"


def require_string_arg(args: Mapping[str, Any], key: str) -> str:
    """A non-empty string argument, or ``missing_arg: <key>``."""
    value = args.get(key)
    if not isinstance(value, str) or value == "":
        raise ToolError(f"missing_arg: {key}")
    return value


def optional_string_arg(args: Mapping[str, Any], key: str, fallback: str) -> str:
    """A non-empty string argument, else ``fallback``."""
    value = args.get(key)
    return value if isinstance(value, str) and value != "" else fallback


def optional_number_arg(args: Mapping[str, Any], key: str, fallback: float) -> float:
    """A finite number (not a bool, not a numeric string), else ``fallback``."""
    value = args.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return fallback
    if not math.isfinite(value):
        return fallback
    return float(value)


def optional_int_arg(
    args: Mapping[str, Any],
    key: str,
    fallback: int,
    *,
    lo: int | None = None,
    hi: int | None = None,
) -> int:
    """A number floored to an int and clamped to ``[lo, hi]``, else ``fallback``."""
    value = optional_number_arg(args, key, float("nan"))
    result = fallback if math.isnan(value) else math.floor(value)
    if lo is not None:
        result = max(lo, result)
    if hi is not None:
        result = min(hi, result)
    return result


def optional_bool_arg(args: Mapping[str, Any], key: str, fallback: bool) -> bool:
    """A real bool, else ``fallback``."""
    value = args.get(key)
    return value if isinstance(value, bool) else fallback


def is_within(root: str, path: str) -> bool:
    """Whether ``path`` is ``root`` or below it (both already resolved)."""
    try:
        return os.path.commonpath((root, path)) == root
    except ValueError:  # different drives, or a mix of absolute and relative
        return False


def resolve_in_root(root: str | os.PathLike[str], target: str) -> Path:
    """Resolve ``target`` against ``root`` and refuse anything that lands outside.

    Symlinks are followed (``realpath``) for the parts of the path that exist,
    so a link inside the root that points outside is refused; the parts that
    do not exist yet (a file about to be written) are resolved lexically
    beneath their deepest existing parent.

    The answer is a name, checked once: a directory swapped for a symlink
    before the caller opens it sends the open elsewhere. Where the tree can
    change meanwhile (a background job, a second agent), open with
    :func:`open_beneath` instead.

    :raises ToolError: ``invalid_path: …`` for a NUL byte or an over-long path,
        ``path_escape: <target> escapes <root>`` for anything outside.
    """
    check_path_arg(target)
    real_root = os.path.realpath(root)
    try:
        resolved = os.path.realpath(os.path.join(real_root, target))
    except (OSError, ValueError) as exc:
        raise ToolError(f"invalid_path: {exc}") from exc
    if not is_within(real_root, resolved):
        raise ToolError(f"path_escape: {target} escapes {real_root}")
    return Path(resolved)


# ---------------------------------------------------------------- opening beneath a root
#
# resolve_in_root checks a path and hands back a name: whoever opens that name later can
# be sent elsewhere by a directory swapped for a symlink in between. open_beneath closes
# that gap: it walks the path one component at a time, each opened relative to the
# directory descriptor of the one before with O_NOFOLLOW, so nothing is ever resolved by
# name twice and the descriptor it returns is the file that was checked.

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
# O_PATH (Linux) opens a directory for walking even when it cannot be listed.
_O_WALK = getattr(os, "O_PATH", os.O_RDONLY) | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
MAX_SYMLINKS = 40
"""Symlinks one path may pass through (the kernel's limit), then ``invalid_path:``."""
_MAX_RACE_RETRIES = 64  # an entry seen flipping between a link and a non-link


class Opened(NamedTuple):
    """What :func:`open_beneath` opened."""

    fd: int
    """The open descriptor; the caller closes it."""
    rel: str
    """The resolved path relative to the root (``/``-joined, ``.`` for the root)."""


def check_path_arg(target: str) -> None:
    """Refuse a path argument no file system accepts: a NUL byte, over 4096 characters,
    a character with no file-name encoding (a lone surrogate such as ``"\\ud800"``).

    :raises ToolError: ``invalid_path: …``.
    """
    if "\x00" in target:
        raise ToolError("invalid_path: path contains a NUL byte")
    if len(target) > MAX_PATH_CHARS:
        raise ToolError(f"invalid_path: path longer than {MAX_PATH_CHARS} characters")
    try:
        os.fsencode(target)
    except UnicodeEncodeError as exc:
        raise ToolError(f"invalid_path: {exc.reason} in the path") from None


def _under(prefix: str, path: str) -> list[str] | None:
    """The components of absolute ``path`` below ``prefix``, or ``None`` if not below."""
    if path == prefix:
        return []
    if path.startswith(prefix.rstrip("/") + "/"):
        return path[len(prefix.rstrip("/")) + 1 :].split("/")
    return None


def _lexical(base: list[str], rest: list[str]) -> str | None:
    """``base`` (resolved components) joined with ``rest`` lexically, ``/``-joined, or
    ``None`` when a ``..`` climbs above the root."""
    out = list(base)
    for part in rest:
        if part in ("", "."):
            continue
        if part == "..":
            if not out:
                return None
            out.pop()
        else:
            out.append(part)
    return "/".join(out) or "."


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False  # missing (about to be created) or unreadable: the open will tell


def open_beneath(
    root: str | os.PathLike[str],
    target: str,
    flags: int = os.O_RDONLY,
    *,
    mode: int = 0o666,
    check: Callable[[str], None] | None = None,
    make_parents: bool = False,
    follow_links: bool = True,
) -> Opened:
    """Open ``target`` (relative to ``root``, or absolute below it) without leaving ``root``.

    Every component is opened relative to its parent's descriptor with
    ``O_NOFOLLOW``, starting from a descriptor of ``root`` (symlinks in ``root``
    itself are resolved once, up front: the root is trusted). A symlink met on
    the way is read (``readlink``) and its target walked the same way, from
    the directory holding it (or from the root, for an absolute target inside
    it), so a link is followed only while it stays inside; ``..`` climbs the
    descriptors already held and never above ``root``. A directory swapped for
    a symlink at any moment therefore cannot send the walk outside: the
    descriptor returned is the file whose resolved path was checked.

    ``flags`` are those of the final :func:`os.open` (``O_NOFOLLOW`` and
    ``O_CLOEXEC`` are added). ``check(rel)`` runs on the resolved relative path
    just before that open, so a policy on resolved paths sees what will be
    opened, and refuses before ``O_CREAT`` (or ``make_parents``) creates
    anything; a last component that is a link is checked by where it leads
    (should it become a link only after the check, the open fails, the link is
    followed and its target checked too: the check may see both names, never
    only the wrong one). ``make_parents`` creates missing directories on the
    way (mode ``0o777`` less the umask); ``follow_links=False`` refuses every
    symlink (``symlink_refused:``).

    :raises ToolError: ``invalid_path:`` (NUL, length, too many links),
        ``path_escape: <target> escapes <root>``, ``symlink_refused: <target>``,
        or what ``check`` raises.
    :raises OSError: from the file system (``ENOENT``, ``ENOTDIR``, ``EISDIR``,
        ``EACCES``, …) for the caller to report.
    """
    check_path_arg(target)
    given = os.path.abspath(root)
    real = os.path.realpath(root)
    escape = ToolError(f"path_escape: {target} escapes {real}")
    if os.path.isabs(target):
        rest = _under(real, target)
        if rest is None:
            rest = _under(given, target)
        if rest is None:
            raise escape
        pending = rest
    else:
        pending = target.split("/")
    root_fd = os.open(real, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
    held: list[tuple[int, str]] = []  # the directories below the root, outermost first
    links = retries = 0
    created = False  # whether make_parents has made a directory yet
    made: tuple[int, str] | None = None  # the directory it made last (depth, name)
    try:
        pending.reverse()  # a stack: the next component is last
        while True:
            while pending and pending[-1] in ("", "."):
                pending.pop()
            parent = held[-1][0] if held else root_fd
            if not pending:  # the path names a directory already held
                rel = "/".join(name for _, name in held) or "."
                if check is not None:
                    check(rel)
                return Opened(os.open(".", flags | _O_CLOEXEC, mode, dir_fd=parent), rel)
            part = pending.pop()
            if part == "..":
                if not held:
                    raise escape
                os.close(held.pop()[0])
                continue
            last = all(p in ("", ".") for p in pending)
            if last and pending:  # a trailing slash: only a directory will do
                flags |= _O_DIRECTORY
            try:
                if last:
                    rel = "/".join([*(name for _, name in held), part])
                    if check is not None:
                        if _is_link(part, parent):
                            # Checked by where it leads, not by its own name (the open
                            # below would refuse it anyway: O_NOFOLLOW).
                            raise OSError(errno.ELOOP, "symlink")
                        check(rel)
                    fd = os.open(part, flags | _O_NOFOLLOW | _O_CLOEXEC, mode, dir_fd=parent)
                    if flags & getattr(os, "O_PATH", 0) and stat.S_ISLNK(os.fstat(fd).st_mode):
                        # O_PATH | O_NOFOLLOW opens a link itself instead of failing.
                        os.close(fd)
                        raise OSError(errno.ELOOP, "symlink")
                    return Opened(fd, rel)
                held.append((os.open(part, _O_WALK, dir_fd=parent), part))
                continue
            except FileNotFoundError:
                if last or not make_parents:
                    raise
                if check is not None and not created:
                    # Below a missing directory nothing exists, so no link can intervene:
                    # the final path is known now, and checked before anything is made.
                    final = _lexical([name for _, name in held], [part, *reversed(pending)])
                    if final is None:
                        raise escape from None
                    check(final)
                created = True
                if made == (len(held), part):  # made a moment ago, and gone again: a race
                    retries += 1
                    if retries > _MAX_RACE_RETRIES:
                        raise
                made = (len(held), part)
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=parent)
                pending.append(part)  # and open it on the next turn
                continue
            except OSError as exc:
                # O_NOFOLLOW says ELOOP for a link, O_DIRECTORY | O_NOFOLLOW says ENOTDIR.
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EEXIST):
                    raise
                try:
                    dest = os.readlink(part, dir_fd=parent)
                except OSError as not_link:
                    # Not a link (now): a real file where a directory was wanted, or an
                    # entry swapped back since the open; look again, a bounded number of
                    # times.
                    retries += 1
                    if not_link.errno not in (errno.EINVAL, errno.ENOENT):
                        raise exc from None
                    if not_link.errno == errno.EINVAL:
                        try:
                            now = os.stat(part, dir_fd=parent, follow_symlinks=False)
                        except FileNotFoundError:
                            now = None
                        if now is not None and not (
                            stat.S_ISDIR(now.st_mode) or (last and exc.errno == errno.ELOOP)
                        ):
                            raise exc from None
                    if retries > _MAX_RACE_RETRIES:
                        raise exc from None
                    pending.append(part)
                    continue
            if not follow_links:
                raise ToolError(f"symlink_refused: {target}")
            links += 1
            if links > MAX_SYMLINKS:
                raise ToolError(f"invalid_path: too many levels of symbolic links: {target}")
            check_path_arg(dest)
            if os.path.isabs(dest):
                rest = _under(real, dest)
                if rest is None:
                    rest = _under(given, dest)
                if rest is None:
                    raise escape
                for fd, _ in held:
                    os.close(fd)
                held.clear()
                pending.extend(reversed(rest))
            else:
                pending.extend(reversed(dest.split("/")))
    finally:
        for fd, _ in held:
            os.close(fd)
        os.close(root_fd)
