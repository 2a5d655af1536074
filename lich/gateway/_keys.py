"""The gateway's per-install secrets: the key of its conversation session ids, and the
webhook token made when none is configured (:func:`load_or_create_token`).

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

__all__ = ["KEY_BYTES", "KEY_FILE_NAME", "TOKEN_BYTES", "load_or_create_key",
           "load_or_create_token"]

KEY_BYTES = 32
KEY_FILE_NAME = ".gateway-id.key"
TOKEN_BYTES = 32
"""Random bytes in a generated webhook token (43 characters of URL-safe base64)."""


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
    _create_once(path, secrets.token_bytes(KEY_BYTES))
    return _read_key(path)


def load_or_create_token(path: str | os.PathLike[str]) -> str:
    """The webhook token kept in ``path`` (one line of URL-safe text), made ``0600`` on
    first use: what ``x-lich-token`` must carry when no token variable is set.

    :raises OSError: the file cannot be created or read.
    :raises ValueError: the file exists but holds no usable token (too short).
    """
    target = Path(path)
    try:
        return _read_token(target)
    except FileNotFoundError:
        pass
    _create_once(target, (secrets.token_urlsafe(TOKEN_BYTES) + "\n").encode())
    return _read_token(target)


def _read_token(path: Path) -> str:
    token = path.read_text(encoding="utf-8").strip()
    if len(token) < TOKEN_BYTES:
        raise ValueError(f"{path}: not a token ({len(token)} characters); remove it to "
                         "make a new one")
    return token


def _create_once(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` unless it exists: a private temporary file hard-linked
    into place, so two processes starting at once agree on one and nobody reads half."""
    make_private_dirs(path.parent)
    tmp = path.parent / f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(FileExistsError):  # another process won: use its own
            os.link(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
