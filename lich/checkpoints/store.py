"""The shadow store: a bare git repository under the project's ``.lich/checkpoints/``.

Driven by the ``git`` binary with its own ``GIT_DIR``, ``GIT_WORK_TREE`` and
index, and with no system or global git config, so the user's ``.git`` (in any
state: mid-rebase, detached, with submodules) is never read for state nor
written, and the user's hooks, filters and aliases never run. A snapshot is a
commit of the work dir's files as they are: what ``.gitignore`` files ignore,
the protected set (:class:`lich.protected.ProtectedPaths`: ``.lich/``, secret
files by name) and nested repositories are left out; a file over the size cap
is left out and reported as *skipped*.

Each session's snapshots are a chain of commits under ``refs/lich/s/<hash of
the session id>``, which keeps them reachable.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from attrs import frozen

from lich.dotlich import LICH_DIR, make_dirs
from lich.private_files import PRIVATE_FILE_MODE, make_private_dirs, replace_private
from lich.protected import ProtectedPaths
from lich.secret_files import name_matches

__all__ = ["STORE_DIR", "Chain", "Entry", "ShadowStore", "Snapshot", "SnapshotError"]

log = logging.getLogger(__name__)

#: Where the store lives, below the work dir.
STORE_DIR = Path(LICH_DIR) / "checkpoints" / "store.git"
_GIT_TIMEOUT_S = 120.0


class SnapshotError(RuntimeError):
    """A snapshot or a restore could not be made (no git, a git failure, a refused dir)."""


@frozen
class Snapshot:
    """One commit of the work dir: its id (the first 12 hex digits of the commit), the
    paths changed since the session's previous snapshot, the files left out for size."""

    commit: str
    tree: str
    changed: tuple[str, ...]
    skipped: tuple[Mapping[str, Any], ...]

    @property
    def id(self) -> str:
        return self.commit[:12]


@frozen
class Chain:
    """One session's chain of snapshots: its ref, the session id its snapshots name
    (``sid#dry-run`` for a dry run's scratch chain) and when its latest was taken."""

    ref: str
    session_id: str
    latest: float


@frozen
class Entry:
    """A file in a snapshot's tree: its git mode and blob id."""

    mode: str
    blob: str


def _refuse(work_dir: Path) -> str | None:
    """Why ``work_dir`` must not be snapshotted whole (the root, the home dir), or None."""
    if work_dir == Path(work_dir.anchor):
        return f"refusing to snapshot the filesystem root ({work_dir})"
    home = Path(os.path.expanduser("~")).resolve()
    if work_dir == home:
        return f"refusing to snapshot the home directory ({work_dir}); use a project directory"
    return None


class ShadowStore:
    """The checkpoint store of one work dir (see the module docstring)."""

    def __init__(self, work_dir: str | os.PathLike[str], *, max_file_bytes: int,
                 protected: ProtectedPaths | None = None) -> None:
        self.work_dir = Path(os.path.realpath(work_dir))
        self.git_dir = self.work_dir / STORE_DIR
        self.max_file_bytes = max_file_bytes
        # The protected set always includes our own state, whatever the config says.
        base = protected if protected is not None else ProtectedPaths()
        self.protected = ProtectedPaths(
            tuple(sorted({*base.dirs, str(self.work_dir / LICH_DIR)})),
            base.names if LICH_DIR in base.names else (LICH_DIR, *base.names))
        git = shutil.which("git")
        if git is None:
            raise SnapshotError("checkpoints need the git binary, and none is on PATH")
        self._git_bin = git

    # -- git plumbing --------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        # Nothing of the user's git environment or config: GIT_DIR and friends from the
        # caller's environment would point git at the user's repository.
        return {
            "PATH": os.environ.get("PATH", os.defpath),
            "LC_ALL": "C",
            "HOME": str(self.git_dir),
            "GIT_DIR": str(self.git_dir),
            "GIT_WORK_TREE": str(self.work_dir),
            "GIT_INDEX_FILE": str(self.git_dir / "lich-index"),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_LITERAL_PATHSPECS": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_AUTHOR_NAME": "lich checkpoints",
            "GIT_AUTHOR_EMAIL": "checkpoints@lich.invalid",
            "GIT_COMMITTER_NAME": "lich checkpoints",
            "GIT_COMMITTER_EMAIL": "checkpoints@lich.invalid",
        }

    def git(self, *args: str, input: bytes | None = None, check: bool = True) -> bytes:
        """Run ``git args`` on the store; its stdout. :raises SnapshotError: it failed."""
        try:
            done = subprocess.run(
                [self._git_bin, "-c", "core.autocrlf=false", "-c", "core.fsmonitor=false",
                 "-c", "core.hooksPath=/dev/null", "-c", "core.symlinks=true", *args],
                input=input, capture_output=True, env=self._env(), cwd=self.work_dir,
                timeout=_GIT_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SnapshotError(f"git {args[0]}: {exc}") from exc
        if check and done.returncode != 0:
            message = done.stderr.decode("utf-8", "replace").strip()
            raise SnapshotError(f"git {args[0]} failed: {message}")
        return done.stdout

    def _init(self) -> None:
        if (self.git_dir / "HEAD").is_file():
            self._check_ours()
            return
        make_dirs(self.git_dir.parent)  # .lich/ with its .gitignore
        self._check_ours()
        env = {k: v for k, v in self._env().items() if k not in ("GIT_DIR", "GIT_WORK_TREE")}
        # --shared=0600: every file git writes in it is the user's alone (0600, dirs
        # 0700), whatever the umask: the store holds copies of the work dir's files.
        subprocess.run([self._git_bin, "init", "--bare", "-q", "--template=", "--shared=0600",
                        str(self.git_dir)],
                       env=env, capture_output=True, check=True, timeout=_GIT_TIMEOUT_S)
        make_private_dirs(self.git_dir / "info")
        replace_private(self.git_dir / "info" / "exclude", f"/{LICH_DIR}/\n".encode())

    def _check_ours(self) -> None:
        """Refuse a store directory lich did not make: git runs what a store's own
        ``config`` says (a clean filter on every file, with ``info/attributes``), and a
        cloned repository can ship a ``.lich/checkpoints/store.git``. lich makes
        ``.lich/checkpoints`` itself, ``0700`` and its user's; a git checkout (or
        another user) makes it with the umask's group and other bits.

        :raises SnapshotError: it is a link, another user's, or open to others.
        """
        parent = self.git_dir.parent
        try:
            st = os.lstat(parent)
        except OSError as exc:
            raise SnapshotError(f"cannot check the checkpoint store {parent}: {exc}") from exc
        if (stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid()
                or stat.S_IMODE(st.st_mode) & 0o077):
            raise SnapshotError(
                f"{parent} is not a store lich made (lich makes it 0700 and its user's; a "
                "cloned repository may have shipped it, and git would run what its config "
                "says): remove it to start a new store")

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """One snapshot or restore at a time per store (two agents in one work dir)."""
        self._init()
        fd = os.open(self.git_dir / "lich.lock", os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                     PRIVATE_FILE_MODE)
        with os.fdopen(fd, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                self._clear_stale_locks()
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _clear_stale_locks(self) -> None:
        """Remove the lock files of a git process killed mid-write (SIGKILL, a power cut).

        Only this class writes to the store, always under :meth:`_locked`: a git lock
        file found while we hold that lock is a dead process's, and left in place it
        would fail every later snapshot. What the dead process wrote before its lock
        was renamed into place is not in use (git writes the new file beside the old
        and renames), so the store stays as its last complete write left it.
        """
        candidates = [self.git_dir / "lich-index.lock", self.git_dir / "packed-refs.lock"]
        refs = self.git_dir / "refs" / "lich" / "s"
        if refs.is_dir():
            candidates += refs.glob("*.lock")
        for lock in candidates:
            try:
                lock.unlink()
                log.warning("checkpoints: removed the stale lock %s", lock)
            except FileNotFoundError:
                pass

    @staticmethod
    def ref(session_id: str) -> str:
        """The ref holding ``session_id``'s chain of snapshots."""
        return "refs/lich/s/" + hashlib.sha256(session_id.encode()).hexdigest()[:24]

    def head(self, session_id: str) -> str | None:
        """The session's latest snapshot commit, or ``None``."""
        if not (self.git_dir / "HEAD").is_file():
            return None
        out = self.git("rev-parse", "-q", "--verify", self.ref(session_id) + "^{commit}",
                       check=False).strip()
        return out.decode() or None

    def _head_and_tree(self, session_id: str) -> tuple[str | None, str | None]:
        """The session's latest snapshot and its tree, in one git call."""
        ref = self.ref(session_id)
        out = self.git("rev-parse", "-q", ref + "^{commit}", ref + "^{tree}", check=False)
        lines = out.decode().split()
        if len(lines) != 2:
            return None, None
        return lines[0], lines[1]

    # -- snapshots -----------------------------------------------------------------------

    def _select(self) -> tuple[list[str], list[str], list[dict[str, Any]]]:
        """``(kept, dropped, skipped)``: the paths to (re)store, those to take out of the
        index, and what was left out with why.

        Only what git says changed since the last snapshot — files new to it
        (``ls-files --others``, ignores applied) and stored files that differ
        (``diff-files``, by their stat data) — is looked at on disk; an unchanged
        stored file costs a name check (an unchanged tree's snapshot must be cheap).
        """
        # One walk, tagged: H stored, C stored and changed, R stored and gone, ? new.
        cached: list[str] = []
        others: list[str] = []
        dirty: set[str] = set()
        out = self.git("ls-files", "-z", "-t", "--cached", "--modified", "--deleted",
                       "--others", "--exclude-standard")
        for entry in out.split(b"\0"):
            if len(entry) < 3:
                continue
            tag, rel = entry[:1], os.fsdecode(entry[2:])
            if tag == b"?":
                others.append(rel)
            elif tag in (b"C", b"R"):
                dirty.add(rel)
            else:
                cached.append(rel)
        blocked = self._blocked()
        kept: list[str] = []
        dropped: list[str] = []
        skipped: list[dict[str, Any]] = []
        root = str(self.work_dir)
        for rel in dict.fromkeys(cached):
            if blocked(rel):
                dropped.append(rel)
            elif rel in dirty:
                self._check(root, rel, kept, dropped, skipped)
        for rel in others:
            if rel.endswith("/"):  # a nested repository: its own history, not ours to keep
                skipped.append({"path": rel.rstrip("/"), "reason": "repository"})
            elif not blocked(rel):
                self._check(root, rel, kept, dropped, skipped)
        return kept, dropped, skipped

    def _check(self, root: str, rel: str, kept: list[str], dropped: list[str],
               skipped: list[dict[str, Any]]) -> None:
        """Sort one new or changed path by what it is on disk now."""
        try:
            info = os.lstat(os.path.join(root, rel))
        except OSError:
            dropped.append(rel)  # gone since it was stored
            return
        if stat.S_ISLNK(info.st_mode):
            kept.append(rel)  # the link itself (its target text), never followed
        elif not stat.S_ISREG(info.st_mode):
            dropped.append(rel)
        elif info.st_size > self.max_file_bytes:
            dropped.append(rel)
            skipped.append({"path": rel, "reason": "too_large", "bytes": info.st_size})
        else:
            kept.append(rel)

    def _blocked(self) -> Callable[[str], bool]:
        """Whether a path (relative to the work dir) is out of every snapshot: protected
        (:meth:`lich.protected.ProtectedPaths.blocks`, decided once per directory), or
        below a directory that is a link (what is there is somewhere else).

        :raises SnapshotError: the work dir itself lies in a protected directory.
        """
        root = str(self.work_dir)
        if self.protected.blocks(root, root):
            raise SnapshotError(f"refusing to snapshot {root}: it is protected")
        names = self.protected.names
        widest = max((glob.count("/") + 1 for glob in names), default=1)
        inside = {os.path.relpath(d, root) for d in self.protected.dirs
                  if os.path.commonpath((root, d)) == root}
        dirs: dict[str, bool] = {"": False}

        def dir_blocked(rel: str) -> bool:
            found = dirs.get(rel)
            if found is None:
                parts = rel.split("/")
                found = dirs[rel] = (
                    dir_blocked(os.path.dirname(rel)) or rel in inside
                    or name_matches(parts[-widest:], names)
                    or os.path.islink(os.path.join(root, rel)))
            return found

        def blocked(rel: str) -> bool:
            # Windows of components ending above the file are the directories' verdicts.
            return dir_blocked(os.path.dirname(rel)) or name_matches(
                rel.split("/")[-widest:], names)

        return blocked

    def snapshot(self, session_id: str, message: Mapping[str, Any]) -> Snapshot:
        """Commit the work dir as it is now onto ``session_id``'s chain.

        :raises SnapshotError: the dir is refused or git failed.
        """
        refused = _refuse(self.work_dir)
        if refused:
            raise SnapshotError(refused)
        with self._locked():
            kept, dropped, skipped = self._select()
            # Out first: a directory that became a file or a link (or the reverse)
            # conflicts with its old entries otherwise.
            if dropped:
                self.git("update-index", "--force-remove", "-z", "--stdin",
                         input=_nul(dropped))
            if kept:
                self.git("update-index", "--add", "--remove", "--replace", "-z", "--stdin",
                         input=_nul(kept))
            tree = self.git("write-tree").decode().strip()
            parent, parent_tree = self._head_and_tree(session_id)
            # The time to the microsecond: a commit's own date is whole seconds, and
            # pruning goes oldest first.
            body = json.dumps({**message, "ts": time.time(), "skipped": skipped},
                              sort_keys=True)
            args = ["commit-tree", tree, "-m", body]
            if parent:
                args += ["-p", parent]
            commit = self.git(*args).decode().strip()
            self.git("update-ref", self.ref(session_id), commit)
            changed: tuple[str, ...] = ()
            if parent and parent_tree != tree:
                changed = self.changed(parent, commit)
        return Snapshot(commit, tree, changed, tuple(skipped))

    # -- reading -------------------------------------------------------------------------

    def changed(self, old: str, new: str) -> tuple[str, ...]:
        """The paths that differ between two snapshots."""
        out = self.git("diff-tree", "-r", "-z", "--no-renames", "--name-only", old, new)
        return tuple(sorted(os.fsdecode(p) for p in out.split(b"\0") if p))

    def entries(self, commit: str) -> dict[str, Entry]:
        """Every file of a snapshot: path → :class:`Entry`."""
        out = self.git("ls-tree", "-r", "-z", "--full-tree", commit)
        found: dict[str, Entry] = {}
        for line in out.split(b"\0"):
            if not line:
                continue
            meta, _, path = line.partition(b"\t")
            mode, _kind, blob = meta.decode().split(" ")
            found[os.fsdecode(path)] = Entry(mode, blob)
        return found

    def diff(self, old: str, new: str | None = None) -> str:
        """A patch from snapshot ``old`` to ``new`` (or to the work dir as it is)."""
        args = ["diff", "--no-color", "--no-ext-diff", "--binary", old]
        if new is not None:
            args.append(new)
        return self.git(*args).decode("utf-8", "replace")

    def resolve(self, commit_prefix: str) -> str:
        """The full commit id of a snapshot id (12 hex digits, or more)."""
        out = self.git("rev-parse", "-q", "--verify", commit_prefix + "^{commit}", check=False)
        if not out.strip():
            raise SnapshotError(f"no snapshot {commit_prefix!r} in {self.git_dir}")
        return out.decode().strip()

    # -- pruning -------------------------------------------------------------------------

    def chains(self) -> list[Chain]:
        """Every session's chain of snapshots, oldest latest-snapshot first."""
        if not (self.git_dir / "HEAD").is_file():
            return []
        # Fields end in NUL, as no commit message holds one; for-each-ref ends each
        # ref's line with a newline after that.
        out = self.git("for-each-ref", "--sort=committerdate",
                       "--format=%(refname)%00%(committerdate:unix)%00%(contents)%00",
                       "refs/lich/s/")
        found: list[Chain] = []
        for line in out.split(b"\0\n"):
            parts = line.split(b"\0")
            if len(parts) != 3:
                continue
            ref, when, body = parts
            try:
                meta = json.loads(body.decode())
                session_id = str(meta.get("session_id", ""))
                latest = float(meta.get("ts", when or 0))
            except (ValueError, AttributeError, TypeError):
                session_id, latest = "", float(when or 0)
            found.append(Chain(ref.decode(), session_id, latest))
        found.sort(key=lambda chain: chain.latest)
        return found

    def drop(self, refs: Iterable[str]) -> None:
        """Forget these chains (their snapshots go at the next :meth:`collect`)."""
        with self._locked():
            for ref in refs:
                self.git("update-ref", "-d", ref)

    def collect(self) -> int:
        """Delete every snapshot no chain holds, now (``git gc --prune=now``); the bytes
        the store then takes."""
        with self._locked():
            # The index holds the last snapshot's blobs, and gc keeps what an index holds:
            # the next snapshot rebuilds it (hashing every file once more).
            (self.git_dir / "lich-index").unlink(missing_ok=True)
            self.git("reflog", "expire", "--expire=now", "--all")
            self.git("gc", "--prune=now", "--quiet")
        return self.size()

    def size(self) -> int:
        """The bytes the store takes on disk."""
        total = 0
        for base, _dirs, files in os.walk(self.git_dir):
            for name in files:
                try:
                    total += os.lstat(os.path.join(base, name)).st_size
                except OSError:
                    pass
        return total

    # -- restoring -----------------------------------------------------------------------

    def restore(self, commit: str, write: Sequence[str], delete: Iterable[str]) -> None:
        """Write ``write`` as they are in ``commit`` and remove ``delete`` from the work
        dir; nothing else is touched. Paths are relative to the work dir."""
        with self._locked():
            for rel in delete:
                full = self._inside(rel)
                try:
                    if not os.path.isdir(full) or os.path.islink(full):
                        os.unlink(full)
                except FileNotFoundError:
                    pass
                self._prune_parents(full)
            for rel in write:
                self._inside(rel)  # never through a link out of the work dir
            if write:
                # checkout writes through our own index, links as links, modes kept.
                self.git("checkout", commit, "--pathspec-from-file=-", "--pathspec-file-nul",
                         input=_nul(write))

    def _inside(self, rel: str) -> str:
        full = os.path.normpath(os.path.join(self.work_dir, rel))
        parent = os.path.realpath(os.path.dirname(full))
        root = str(self.work_dir)
        if os.path.commonpath((root, parent)) != root or self.protected.blocks(full, root):
            raise SnapshotError(f"refusing to touch {rel!r}: outside the work dir or protected")
        return full

    def _prune_parents(self, full: str) -> None:
        """Remove the directories a deleted file leaves empty, up to the work dir."""
        parent = os.path.dirname(full)
        while parent != str(self.work_dir) and parent.startswith(str(self.work_dir)):
            try:
                os.rmdir(parent)
            except OSError:
                return
            parent = os.path.dirname(parent)


def _nul(paths: Iterable[str]) -> bytes:
    return b"".join(os.fsencode(p) + b"\0" for p in paths)
