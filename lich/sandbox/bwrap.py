"""bubblewrap: the probe and the sandbox's command line.

The sandbox (:func:`sandbox_argv`) is the system ``bwrap`` with every namespace new
(user, PID, IPC, network, UTS, cgroup, mount), no capability left, no nested user
namespace, ``--die-with-parent`` and ``--new-session`` (a command cannot type into
lich's terminal). Its file system, in the order the mounts are made (a later mount
covers an earlier one):

1. ``/`` read-only, a minimal ``/dev``, a ``/proc`` of its own PID namespace (no other
   process of the machine is in it, so no other ``/proc/<pid>/environ``);
2. empty private tmpfs over ``/tmp``, ``/var/tmp``, ``/run`` (the machine's sockets:
   Docker's, D-Bus', PostgreSQL's) and every home directory (``/home``, ``/root``, the
   user's ``HOME``): the user's keys and dotfiles are not there at all;
3. the work dir: read-write (``workspace-write``) or read-only (``read-only``);
4. the paths shown read-only although they are in a home (the interpreter lich runs on,
   ``read_paths``);
5. in the work dir: ``.git/hooks``, ``.git/config``, ``.git/modules`` (and a ``.git``
   file) read-only, since git runs what they name outside the sandbox later, and
   ``.git`` itself a mount point (it cannot be renamed away and replaced); the
   protected directories (``.lich``, the session dir) and every secret file by name
   (:data:`lich.secret_files.SECRET_FILE_GLOBS`) masked by an empty read-only mount;
   ``/etc/shadow``-like system secrets masked too.

A directory that must be read-only but does not exist yet (``.git/hooks``, ``.lich``)
is mounted as an empty read-only directory: bwrap creates it in the real work dir (an
empty directory), so a command cannot create it with hooks in it.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from attrs import frozen

from lich.secret_files import SECRET_FILE_GLOBS, name_matches

__all__ = [
    "ISOLATION", "MAX_WALK_ENTRIES", "MIN_VERSION", "Probe", "SandboxError", "Tree",
    "probe", "sandbox_argv", "sandbox_tree",
]

MIN_VERSION = (0, 8, 0)
"""The oldest bwrap that can forbid nested user namespaces (``--disable-userns``)."""

ISOLATION: tuple[str, ...] = (
    "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
    "--die-with-parent", "--new-session",
)
"""bwrap's namespace options: every namespace new (network included), no capability
(run as root, bwrap would otherwise keep them all inside), no user namespace below."""

MAX_WALK_ENTRIES = 200_000
"""The most entries of the work dir looked at for secret files at one start; a bigger
tree fails the start (a secret left unmasked because the walk gave up would be a hole)."""

PROBE_TIMEOUT_S = 10.0

# Secrets of the system that a sandboxed root could read (its uid owns them).
_SYSTEM_SECRETS = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")
_SSH_HOST_KEYS = re.compile(r"ssh_host_.*_key$")
_PRUNED = frozenset({".git"})  # objects and refs: no secret files by name


class SandboxError(RuntimeError):
    """The sandbox cannot be set up for a launch: the launch fails (never unconfined)."""


@frozen
class Probe:
    """What :func:`probe` found.

    :param ok: the sandbox can run here.
    :param bwrap: the ``bwrap`` found on ``PATH`` (``None``: none).
    :param version: its version (``"0.8.0"``).
    :param reason: why it cannot run (empty when ``ok``).
    """

    ok: bool
    bwrap: str | None
    version: str | None
    reason: str

    def line(self) -> str:
        """One line for a notice: what runs, or why nothing does."""
        if self.ok:
            return f"sandbox: bubblewrap {self.version} ({self.bwrap})"
        return f"sandbox unavailable: {self.reason}"


def _version(text: str) -> tuple[int, ...] | None:
    found = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if found is None:
        return None
    return tuple(int(g or 0) for g in found.groups())


def _userns_hint() -> str:
    # The usual reasons a working bwrap cannot make a user namespace, as the kernel says.
    for path, bad, what in (
        ("/proc/sys/kernel/unprivileged_userns_clone", "0",
         "kernel.unprivileged_userns_clone = 0"),
        ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1",
         "AppArmor restricts unprivileged user namespaces "
         "(kernel.apparmor_restrict_unprivileged_userns = 1)"),
        ("/proc/sys/user/max_user_namespaces", "0", "user.max_user_namespaces = 0"),
    ):
        try:
            if Path(path).read_text().strip() == bad:
                return f" ({what})"
        except OSError:
            continue
    return ""


def probe(path: str | None = None) -> Probe:
    """Whether bubblewrap can sandbox a process on this machine: ``bwrap`` on ``path``
    (``PATH`` by default), new enough (:data:`MIN_VERSION`), and a real sandboxed
    ``true`` with the very namespace options every launch uses exits 0."""
    exe = shutil.which("bwrap", path=path)
    if exe is None:
        return Probe(False, None, None,
                     "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)")
    try:
        shown = subprocess.run([exe, "--version"], capture_output=True, text=True,
                               timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return Probe(False, exe, None, f"{exe} --version failed: {exc}")
    version = _version(shown.stdout)
    if version is None:
        return Probe(False, exe, None, f"{exe} --version printed no version: "
                                       f"{(shown.stdout or shown.stderr).strip()[:200]!r}")
    text = ".".join(map(str, version))
    if version < MIN_VERSION:
        need = ".".join(map(str, MIN_VERSION))
        return Probe(False, exe, text, f"bwrap {text} is too old ({need} or later is "
                                       "needed, for --disable-userns)")
    true = shutil.which("true") or "/bin/true"
    try:
        ran = subprocess.run(
            [exe, *ISOLATION, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
             "--", true],
            capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False,
            stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        return Probe(False, exe, text, f"a sandboxed true did not run: {exc}")
    if ran.returncode != 0:
        said = (ran.stderr.strip().splitlines() or [f"exit status {ran.returncode}"])[-1]
        return Probe(False, exe, text,
                     f"bwrap cannot create its namespaces: {said[:300]}{_userns_hint()}")
    return Probe(True, exe, text, "")


# ----------------------------------------------------------------- the file system


def _real(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(os.fspath(path))


def _within(root: str, path: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def home_dirs(env: Mapping[str, str]) -> list[str]:
    """Every home directory that is hidden: ``/home``, ``/root``, ``HOME`` of ``env`` and
    of lich, and the user's home in the password database (those that exist)."""
    found = ["/home", "/root", env.get("HOME", ""), os.environ.get("HOME", ""),
             os.path.expanduser("~")]
    try:
        found.append(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        pass
    return sorted({_real(p) for p in found if p and os.path.isdir(p)})


def default_read_paths() -> list[str]:
    """The interpreter lich runs on (it may live in a home: pyenv, a venv) and the
    directories of the packages it has loaded, shown so that its helper programs
    (``grep_files``' worker) and MCP servers in Python still start. A package installed
    in place (``pip install -e``) lives in its checkout, which may be under ``/tmp`` or
    a home the sandbox hides: its directory is shown too, read-only, and nothing else of
    that checkout."""
    found = {_real(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None)
        if "." in name or not origin or not origin.endswith("__init__.py"):
            continue  # top-level packages only: their directory holds the rest
        package = _real(os.path.dirname(origin))
        if not any(package == p or package.startswith(p + os.sep) for p in found):
            found.add(package)
    return sorted(found)


@frozen
class Tree:
    """What of the work dir is masked or read-only, found by :func:`sandbox_tree`."""

    read_only: tuple[str, ...] = ()
    """Existing paths bound read-only (``.git/hooks``, ``.git/config``, a ``.git`` file)."""
    empty_dirs: tuple[str, ...] = ()
    """Directories replaced by an empty read-only one (masked, or not there yet)."""
    null_files: tuple[str, ...] = ()
    """Files replaced by an empty read-only one (``/dev/null``)."""
    pinned: tuple[str, ...] = ()
    """Directories bound onto themselves, so that they cannot be renamed (``.git``)."""


def sandbox_tree(work_dir: str, protected_dirs: Iterable[str] = (),
                 max_entries: int = MAX_WALK_ENTRIES) -> Tree:
    """Walk ``work_dir`` for what must not be written or read inside the sandbox.

    :param protected_dirs: directories masked whole (lich's ``.lich``, the session dir).
    :raises SandboxError: more than ``max_entries`` entries (see :data:`MAX_WALK_ENTRIES`).
    """
    work = _real(work_dir)
    read_only: list[str] = []
    empty: list[str] = []
    null: list[str] = []
    git = os.path.join(work, ".git")
    pinned: list[str] = []
    if os.path.isdir(git) and not os.path.islink(git):
        # A mount point cannot be renamed: without this, `mv .git x; mkdir -p .git/hooks`
        # would move the read-only mounts away and plant a hook git runs later.
        pinned.append(git)
        for name in ("hooks", "config", "config.worktree", "modules"):
            path = os.path.join(git, name)
            if os.path.lexists(path):
                read_only.append(path)
            elif name == "hooks":
                empty.append(path)
            elif name == "config":
                null.append(path)
    elif os.path.lexists(git):
        read_only.append(git)  # a worktree's .git file: it names the git dir git uses
    masked = {_real(d) for d in protected_dirs}
    masked.add(os.path.join(work, ".lich"))
    lich_dir = os.path.join(work, ".lich")
    for path in sorted(masked):
        # What is there (a mount point cannot be made on the read-only system, nor in a
        # masked directory); the work dir's .lich even when it is not, so that no
        # command can create a config there.
        if path != work and (path == lich_dir or os.path.isdir(path)):
            empty.append(path)
    globs = (".lich", *SECRET_FILE_GLOBS)
    seen = 0
    stack = [work]
    while stack:
        top = stack.pop()
        try:
            entries = list(os.scandir(top))
        except OSError:
            continue  # unreadable: unreadable inside too
        for entry in entries:
            seen += 1
            if seen > max_entries:
                raise SandboxError(
                    f"the work dir {work} has more than {max_entries} entries: too many "
                    "to check for secret files at every start")
            path = entry.path
            if path in masked:
                continue
            rel = os.path.relpath(path, work).split(os.sep)
            is_dir = entry.is_dir(follow_symlinks=False)
            if name_matches(rel, globs):
                if entry.is_symlink():
                    # The mount lands on what the link names; mask that when it is there.
                    target = _real(path)
                    if os.path.isdir(target):
                        empty.append(target)
                    elif os.path.exists(target):
                        null.append(target)
                elif is_dir:
                    empty.append(path)
                else:
                    null.append(path)
                continue
            if is_dir and entry.name not in _PRUNED:
                stack.append(path)
    # A mount inside an empty read-only one could not be made (and is not needed).
    dirs = sorted(set(empty))
    dirs = [d for d in dirs if not any(_within(o, d) and o != d for o in dirs)]
    files = sorted(p for p in set(null) if not any(_within(d, p) for d in dirs))
    return Tree(tuple(read_only), tuple(dirs), tuple(files), tuple(pinned))


def _system_secrets() -> list[str]:
    found = [p for p in _SYSTEM_SECRETS if os.path.isfile(p)]
    try:
        found += sorted(e.path for e in os.scandir("/etc/ssh")
                        if _SSH_HOST_KEYS.search(e.name) and e.is_file())
    except OSError:
        pass
    return found


def sandbox_argv(
    bwrap: str,
    argv: Sequence[str],
    *,
    work_dir: str,
    cwd: str,
    profile: str,
    env: Mapping[str, str],
    tree: Tree,
    read_paths: Iterable[str] = (),
) -> list[str]:
    """The command line that runs ``argv`` in the sandbox (``bwrap … -- argv``).

    :param profile: ``workspace-write`` (the work dir writable) or ``read-only``.
    :param env: the launch's environment (its ``HOME`` is hidden too).
    :param tree: what :func:`sandbox_tree` found in the work dir.
    :param read_paths: paths under a hidden home shown read-only (``~`` expanded).
    """
    if profile not in ("read-only", "workspace-write"):
        raise SandboxError(f"profile {profile!r} has no sandbox")
    work = _real(work_dir)
    out = [bwrap, *ISOLATION, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    masks = [p for p in ("/tmp", "/var/tmp", "/run") if os.path.isdir(p) and
             not os.path.islink(p)]
    masks += home_dirs(env)
    masks = sorted(set(masks))
    # A mask above the work dir goes first (the work dir is bound over it); one inside
    # it (a home that is in the work dir) after, so the work dir cannot uncover it.
    for path in masks:
        if _within(path, work):
            out += ["--tmpfs", path]
    out += ["--bind" if profile == "workspace-write" else "--ro-bind", work, work]
    for path in masks:
        if not _within(path, work):
            out += ["--tmpfs", path]
    for path in read_paths:
        real = _real(os.path.expanduser(path))
        out += ["--ro-bind-try", real, real]
    for path in tree.pinned:
        out += ["--bind" if profile == "workspace-write" else "--ro-bind", path, path]
    for path in tree.read_only:
        out += ["--ro-bind", path, path]
    # In a read-only work dir nothing can be created: what is not there stays away.
    def wanted(path: str) -> bool:
        return profile == "workspace-write" or os.path.lexists(path)

    for path in filter(wanted, tree.empty_dirs):
        out += ["--perms", "0555", "--tmpfs", path, "--remount-ro", path]
    for path in (*filter(wanted, tree.null_files), *_system_secrets()):
        out += ["--ro-bind", "/dev/null", path]
    out += ["--chdir", cwd, "--", *argv]
    return out
