"""A throw-away PostgreSQL cluster for tests: the machine's ``initdb`` / ``pg_ctl``
on a temporary directory, listening on 127.0.0.1 and a free port.

>>> cluster = PostgresCluster.start()       # doctest: +SKIP
>>> dsn = cluster.create_database("t1")     # a fresh database per test
>>> cluster.stop()                          # pg_ctl stop -m immediate, then the pid is gone

PostgreSQL refuses to run as root, so under root (CI, containers) the cluster
runs as an unprivileged user (``postgres`` when the Debian package made one,
else ``nobody``) that owns the temporary directory; the unix socket lives in
that directory too, never in ``/var/run``. The superuser has a password, so
the DSN a test gets holds one, as a real deployment's does (and tests can
check that it is never shown). :func:`find_binaries` says whether the
machine has the server at all; the ``lich_postgres`` fixture skips without it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from attrs import frozen

from lich.testing.ports import ReservedPort, reserve_port
from lich.testing.wait import wait_for

__all__ = ["PostgresBinaries", "PostgresCluster", "PostgresUnavailable", "find_binaries"]

SUPERUSER = "lich"


class PostgresUnavailable(RuntimeError):
    """The machine has no PostgreSQL server binaries (``initdb`` and ``pg_ctl``)."""


@frozen
class PostgresBinaries:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``, and its major version."""

    bin_dir: Path
    version: int

    def tool(self, name: str) -> str:
        return str(self.bin_dir / name)


def find_binaries(prefer: int = 15) -> PostgresBinaries:
    """The server binaries: ``/usr/lib/postgresql/<major>/bin`` (``prefer`` first, else
    the newest), else ``initdb`` on ``PATH``.

    :raises PostgresUnavailable: none found (install ``postgresql-15``).
    """
    found: dict[int, Path] = {}
    for initdb in glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        bin_dir = Path(initdb).parent
        major = bin_dir.parent.name
        if major.isdigit() and (bin_dir / "pg_ctl").is_file():
            found[int(major)] = bin_dir
    if prefer in found:
        return PostgresBinaries(found[prefer], prefer)
    if found:
        newest = max(found)
        return PostgresBinaries(found[newest], newest)
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        out = subprocess.run([on_path, "--version"], capture_output=True, text=True,
                             check=False).stdout
        match = re.search(r"(\d+)", out)
        return PostgresBinaries(Path(on_path).parent, int(match.group(1)) if match else 0)
    raise PostgresUnavailable(
        "no PostgreSQL server binaries (initdb, pg_ctl) under /usr/lib/postgresql/*/bin "
        "or on PATH: install the Debian package postgresql-15 (or postgresql)")


def _temp_parent(user: pwd.struct_passwd | None) -> str:
    """Where the cluster's directory goes: the temp dir, unless another user (the
    server's) could not reach into it; then ``/tmp``."""
    parent = tempfile.gettempdir()
    if user is None:
        return parent
    path = Path(parent).resolve()
    reachable = all(os.stat(p).st_mode & 0o001 for p in (path, *path.parents))
    return parent if reachable else "/tmp"


def _unprivileged_user() -> pwd.struct_passwd | None:
    """Who runs the server: ``None`` (this process's user) unless that is root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise PostgresUnavailable("running as root and there is no unprivileged user "
                              "(postgres or nobody) to run PostgreSQL as")


class PostgresCluster:
    """One running throw-away cluster; :meth:`start` makes it, :meth:`stop` ends it."""

    def __init__(self, binaries: PostgresBinaries, root: Path, port: int, password: str,
                 user: pwd.struct_passwd | None) -> None:
        self.binaries = binaries
        self.root = root
        self.data = root / "data"
        self.log = root / "server.log"
        self.port = port
        self.password = password
        self.host = "127.0.0.1"
        self._user = user
        self.pid: int | None = None
        #: The port's reservation (lich.testing.ports): held until stop(), restarts included.
        self._reserved: ReservedPort | None = None

    # ---------------------------------------------------------------- running

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        kwargs: dict[str, Any] = {}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "TZ": "UTC"}
        if self._user is not None:
            kwargs.update(user=self._user.pw_uid, group=self._user.pw_gid, extra_groups=[])
            env["HOME"] = str(self.root)
        proc = subprocess.run(list(args), capture_output=True, text=True, env=env,
                              cwd=self.root, timeout=120, check=False, **kwargs)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{Path(args[0]).name} failed ({proc.returncode}): "
                               f"{proc.stderr.strip() or proc.stdout.strip()}\n"
                               f"{self._log_tail()}")
        return proc

    def _log_tail(self) -> str:
        try:
            return "server log: " + self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    @classmethod
    def start(cls, *, binaries: PostgresBinaries | None = None) -> PostgresCluster:
        """``initdb`` a new cluster in a temporary directory and start it.

        :raises PostgresUnavailable: the machine has no PostgreSQL.
        """
        binaries = binaries or find_binaries()
        user = _unprivileged_user()
        # Not under pytest's basetemp: that is 0700 root's, which the server's user cannot
        # enter. mkdtemp makes a 0700 directory, given to that user whole.
        root = Path(tempfile.mkdtemp(prefix="lich-pg-", dir=_temp_parent(user)))
        if user is not None:
            os.chown(root, user.pw_uid, user.pw_gid)
        password = secrets.token_hex(12)
        reserved = reserve_port()
        cluster = cls(binaries, root, reserved.port, password, user)
        cluster._reserved = reserved
        pwfile = root / "pwfile"
        pwfile.write_text(password + "\n", encoding="utf-8")
        if user is not None:
            os.chown(pwfile, user.pw_uid, user.pw_gid)
        try:
            # TCP connections need the password (scram); the unix socket, reachable only
            # through the 0700 directory, trusts its owner.
            cluster._run(binaries.tool("initdb"), "-D", str(cluster.data), "-U", SUPERUSER,
                         f"--pwfile={pwfile}", "--auth-host=scram-sha-256",
                         "--auth-local=trust", "-E", "UTF8", "--no-instructions")
            pwfile.unlink()
            cluster.start_server()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def start_server(self) -> None:
        """Start the server on the cluster's data and port (after :meth:`kill_server`)."""
        # fsync off: only an OS crash loses what the page cache holds, and a test cluster
        # outlives no OS crash. Commits stay synchronous: a killed server (restart())
        # must keep every commit it acknowledged, as a real one does.
        options = (f"-p {self.port} -k {self.root} -c listen_addresses={self.host} "
                   "-c fsync=off -c full_page_writes=off -c max_connections=100")
        for attempt in range(3):
            proc = self._run(self.binaries.tool("pg_ctl"), "-D", str(self.data), "-l",
                             str(self.log), "-o", options, "-w", "-t", "60", "start",
                             check=False)
            if proc.returncode == 0:
                break
            if attempt == 2 or "could not bind" not in self._log_tail():
                raise RuntimeError(f"pg_ctl start failed: {proc.stderr.strip()}\n"
                                   f"{self._log_tail()}")
            # A program outside the tests took the port (reserved ports are only kept
            # from the kernel's own choices and from other tests): take another.
            if self._reserved is not None:
                self._reserved.release()
            self._reserved = reserve_port()
            self.port = self._reserved.port
            options = re.sub(r"-p \d+", f"-p {self.port}", options)
        self.pid = int((self.data / "postmaster.pid").read_text().split()[0])

    def stop(self) -> None:
        """``pg_ctl stop -m immediate``, wait for the server's pid to be gone, remove
        the directory. Safe to call twice."""
        if self.pid is not None:
            self.kill_server()
        shutil.rmtree(self.root, ignore_errors=True)
        if self._reserved is not None:
            self._reserved.release()

    def kill_server(self) -> None:
        """``pg_ctl stop -m immediate`` (as a crash would), and wait for the pid to be gone;
        the data stays, for :meth:`start_server`."""
        pid, self.pid = self.pid, None
        if pid is None:
            return
        self._run(self.binaries.tool("pg_ctl"), "-D", str(self.data), "stop", "-m",
                  "immediate", "-w", check=False)
        if not _gone(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_for(lambda: _gone(pid), timeout=30, what=f"postgres pid {pid} to exit")

    def restart(self) -> None:
        """Kill the server (``-m immediate``: as a crash would) and start it again on
        the same port and data; connections open before are broken."""
        self.kill_server()
        self.start_server()

    # ---------------------------------------------------------------- databases

    def dsn(self, database: str = "postgres") -> str:
        """A libpq URI for ``database`` over TCP, with the superuser's password."""
        return (f"postgresql://{SUPERUSER}:{self.password}@{self.host}:{self.port}/"
                f"{database}?connect_timeout=10")

    def create_database(self, name: str) -> str:
        """Create an empty database ``name`` (letters, digits, ``_``); its DSN."""
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", name):
            raise ValueError(f"not a plain database name: {name!r}")
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited. A zombie counts as gone: the server is not our child
    (pg_ctl started it and exited), and the init of a container may reap it late."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # it exists, as another user's
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False  # no /proc: it exists
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"
