"""The gateway's per-install secret: the key of its conversation session ids.

One file of 32 random bytes, ``.gateway-id.key`` in the session directory
(beside the transcripts it names, so the two move and get backed up
together). Created once, ``0600``, atomically: the bytes are written to a
private temporary file that is then hard-linked into place, so two gateways
starting at the same moment agree on one key and nobody ever reads a
half-written one. Losing the file makes every conversation start afresh
(the old transcripts stay, under names nothing computes any more).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from lich.private_files import PRIVATE_FILE_MODE, make_private_dirs

__all__ = ["KEY_BYTES", "KEY_FILE_NAME", "load_or_create_key"]

KEY_BYTES = 32
KEY_FILE_NAME = ".gateway-id.key"


def _read_key(path: Path) -> bytes:
    data = path.read_bytes()
    if len(data) != KEY_BYTES:
        raise ValueError(
            f"{path}: expected {KEY_BYTES} bytes of key, found {len(data)}; "
            "remove it to make a new one (conversations then start afresh)"
        )
    return data


def load_or_create_key(directory: str | os.PathLike[str]) -> bytes:
    """The key stored in ``directory``, made (and the directory, ``0700``) on first use.

    :raises OSError: the directory or the file cannot be created or read.
    :raises ValueError: the file exists but is not a key (wrong size).
    """
    path = Path(directory) / KEY_FILE_NAME
    try:
        return _read_key(path)
    except FileNotFoundError:
        pass
    make_private_dirs(directory)
    tmp = Path(directory) / f"{KEY_FILE_NAME}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(KEY_BYTES))
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(FileExistsError):  # another process won: use its key
            os.link(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return _read_key(path)
