"""Loopback ports for tests, without the race of "bind port 0, close, hand it on".

A port found free by binding port 0 and closing the socket is free only until
someone else binds it: another test's server, another xdist worker's, any
program's outgoing connection (the kernel hands out the same ephemeral range).
Two helpers replace that pattern:

* :func:`refused_port` — a port nothing listens on, for "connection refused"
  tests: the socket stays bound (without ``listen``) while the test runs, so a
  connect is refused and nobody else can take the port.
* :func:`reserve_port` — a port for a child process that must be told its port
  before it starts (``nats-server -p``, PostgreSQL's ``-p``), and keep it across
  restarts: chosen below the kernel's ephemeral range (so no ``bind(0)`` and no
  outgoing connection is ever given it) and locked with ``flock`` in a per-user
  directory (so no other test process here picks it) for as long as the
  :class:`ReservedPort` lives.

A child that can bind port 0 itself and report the port should do that instead.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import random
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["ReservedPort", "refused_port", "reserve_port"]

HOST = "127.0.0.1"
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


@contextlib.contextmanager
def refused_port(host: str = HOST) -> Iterator[int]:
    """A TCP port on ``host`` where a connection is refused, for the whole ``with``
    block: bound, never listening, so nothing else can listen there meanwhile."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        yield int(sock.getsockname()[1])


class ReservedPort:
    """A port held for this process (see :func:`reserve_port`); :meth:`release` (or
    the end of the process) gives it back."""

    def __init__(self, port: int, lock_fd: int) -> None:
        self.port = port
        self._fd: int | None = lock_fd

    def release(self) -> None:
        """Give the port back (safe to call twice)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor drops the flock

    def __del__(self) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"ReservedPort({self.port})"


def _candidates() -> range:
    """Ports below the ephemeral range (where the kernel never picks one on its own),
    else above it, never below 1024."""
    low, high = 32768, 60999
    with contextlib.suppress(OSError, ValueError):
        low, high = (int(x) for x in _RANGE_FILE.read_text().split())
    if low - 10000 >= 2000:
        return range(10000, low)
    if 65535 - high >= 2000:
        return range(high + 1, 65536)
    return range(1024, 65536)  # the whole range is ephemeral: the lock still helps


def _lock_dir() -> Path:
    path = Path(tempfile.gettempdir()) / f"lich-test-ports-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    info = path.lstat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise RuntimeError(f"{path} is not a private directory of this user")
    return path


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def reserve_port(host: str = HOST, *, attempts: int = 500) -> ReservedPort:
    """A TCP port on ``host`` that nothing uses now, held for this process until
    :meth:`ReservedPort.release`.

    :raises RuntimeError: no such port was found in ``attempts`` tries.
    """
    directory = _lock_dir()
    candidates = _candidates()
    chooser = random.Random()
    for _ in range(attempts):
        port = chooser.choice(candidates)
        fd = os.open(directory / f"{port}.lock", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)  # another test process holds it
            continue
        if _bindable(host, port):
            return ReservedPort(port, fd)
        os.close(fd)  # a program outside the tests uses it
    raise RuntimeError(f"no free port on {host} in {attempts} tries "
                       f"(from {candidates.start}-{candidates.stop - 1})")
