"""The project's ``.lich/`` directory: where it is, and the one way it is created.

``.lich/`` holds a project's config and its session transcripts. Transcripts hold
whatever the model and the tools saw, so they must never end up in a commit: every
``.lich/`` lich creates gets a ``.gitignore`` that ignores its contents. To commit
the config, edit that file (``!config.toml``); an edited one is never overwritten.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from lich.private_files import PRIVATE_FILE_MODE, make_private_dirs

__all__ = ["GITIGNORE_TEXT", "LICH_DIR", "ensure_gitignore", "make_dirs"]

LICH_DIR = ".lich"

GITIGNORE_TEXT = (
    "# Written by lich: sessions here hold whatever the model and the tools saw.\n"
    "# To commit the config, add a line: !config.toml\n"
    "*\n"
)


def ensure_gitignore(lich_dir: Path) -> None:
    """Write ``lich_dir/.gitignore`` unless one is there: created once, never
    overwritten (the user may have edited it). A failure to write it is not an error
    of the command that needed the directory."""
    path = lich_dir / ".gitignore"
    try:
        # O_EXCL: an existing file (or link) is the user's, whatever it says.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    except OSError:
        return  # there already, or a read-only project (which still runs)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(GITIGNORE_TEXT)
    except OSError:
        with contextlib.suppress(OSError):
            path.unlink()  # half a file would be taken for the user's own next time


def make_dirs(path: str | os.PathLike[str]) -> Path:
    """``mkdir -p path`` (new directories ``0700``); every ``.lich`` directory on the
    way gets its ``.gitignore``.

    Every place that creates something under ``.lich/`` (session transcripts,
    ``lich config init``) goes through this, so no ``.lich/`` is ever left without one.

    :raises OSError: the directory cannot be created.
    """
    target = Path(path)
    make_private_dirs(target)  # 0700: what lich keeps here is its user's alone
    for directory in (target, *target.parents):
        if directory.name == LICH_DIR:
            ensure_gitignore(directory)
    return target
