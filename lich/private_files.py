"""Creating lich's own files private to their user: directories ``0700``, files ``0600``.

Transcripts, the chat history, audit logs and the gateway's key hold what was
said and done; on a shared machine nobody else should read them. The modes are
given at creation (``os.open`` / ``os.mkdir`` with a mode), so a permissive
umask such as ``022`` cannot widen them. A file or directory that already
exists keeps its mode: lich does not change the permissions of what it did
not create.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

__all__ = [
    "PRIVATE_DIR_MODE",
    "PRIVATE_FILE_MODE",
    "make_private_dirs",
    "open_private_append",
    "open_private_log",
    "replace_private",
    "touch_private",
    "write_private",
]

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def make_private_dirs(directory: str | os.PathLike[str]) -> None:
    """Create ``directory`` and its missing parents, each created one ``0700``.

    (``Path.mkdir(parents=True, mode=...)`` gives the parents the umask's
    default instead.) Existing directories are left as they are.
    """
    path = Path(directory)
    missing: list[Path] = []
    while not path.is_dir():
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for part in reversed(missing):
        try:
            os.mkdir(part, PRIVATE_DIR_MODE)
        except FileExistsError:  # made by someone else meanwhile (or not a directory:
            if not part.is_dir():  # then say so, as mkdir would)
                raise


def open_private_append(path: str | os.PathLike[str]) -> IO[bytes]:
    """``path`` opened for appending in binary, created ``0600`` when new."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE_MODE)
    return os.fdopen(fd, "ab")


def open_private_log(path: str | os.PathLike[str]) -> IO[str]:
    """A log of lich's own (an MCP server's stderr) opened for appending as text,
    its directories made ``0700``, the file ``0600`` — also one made before lich
    kept its logs private: a log is lich's, so its mode is lich's to set."""
    make_private_dirs(Path(path).parent)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _O_NOFOLLOW, PRIVATE_FILE_MODE)
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)
    except OSError:
        pass  # not ours to change (another user's file we may write): keep it
    return os.fdopen(fd, "a", encoding="utf-8")


def write_private(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to a new (or truncated) ``path``, ``0600`` in ``0700``
    directories; a symlink at ``path`` is refused, not followed. For the temporary
    file of an atomic replace (a cache)."""
    make_private_dirs(Path(path).parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_NOFOLLOW, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "wb") as fh:
        os.fchmod(fh.fileno(), PRIVATE_FILE_MODE)
        fh.write(data)


def touch_private(path: str | os.PathLike[str]) -> None:
    """Make sure ``path`` exists, created ``0600`` (in ``0700`` directories) when new.

    For files another library creates with its own default mode when they
    are missing (prompt_toolkit's and readline's history files).
    """
    make_private_dirs(Path(path).parent)
    os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE_MODE))


def replace_private(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data``, whole or not at all: written ``0600`` to a new
    file beside it (:func:`write_private`), then renamed over it, so a reader never
    sees half of it and a crash leaves the old one."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        write_private(tmp, data)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
