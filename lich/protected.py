"""Paths no tool may touch: lich's own state and the secret files beside a project.

A :class:`ProtectedPaths` policy travels with every tool call
(:attr:`lich.tools.ToolContext.protected`). The builtin file tools check the
*resolved* path they are about to touch against it (symlinks followed, so a
link named ``notes.txt`` pointing at ``.env`` is refused too), and the
walking tools (``list_dir``, ``grep_files``, ``disk_usage``, the docs tools)
leave protected entries out silently. What is protected:

* whole directories: ``<work_dir>/.lich`` (config, sessions, audit logs), any
  other ``.lich`` below the root a tool works in, and the session directory
  wherever it lives;
* secret files by name, anywhere below the root a tool works in:
  :data:`SECRET_FILE_GLOBS` (dotenv files, keys and key stores, ``.ssh``,
  ``.gnupg``, and the credential files of npm, pip, git, netrc, PostgreSQL,
  Docker, AWS, kubectl, gh, ...: :mod:`lich.secret_files`), matched
  case-insensitively against the components of the path below that root (a
  directory named ``.env.d`` hides what is in it; ``.aws/credentials`` matches
  two consecutive components);
* secret files by content: a file holding a private key (a PEM ``PRIVATE KEY``
  block with its body, a PuTTY key: :func:`lich.secret_files.holds_private_key`)
  is refused by every tool that would show its content (``read_file``,
  ``edit_file``, ``grep_files``, ``docs_read``, ``docs_search``), whatever its
  name.

The CLI's runs get the policy unless ``protect_private_files = false`` is set;
gateway conversations always get it (see ``docs/reliability.md``, threat
model). ``terminal`` runs a shell and cannot be confined by path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from attrs import frozen

from lich.secret_files import SECRET_FILE_GLOBS, name_matches

if TYPE_CHECKING:
    from lich.config import LichConfig

__all__ = ["SECRET_FILE_GLOBS", "ProtectedPaths", "is_protected"]


# The most components one glob spans (``.config/gh/hosts.yml``).
_WIDEST = max(glob.count("/") + 1 for glob in SECRET_FILE_GLOBS)


def _within(root: str, path: str) -> bool:
    try:
        return os.path.commonpath((root, path)) == root
    except ValueError:  # a mix of absolute and relative paths
        return False


@frozen
class ProtectedPaths:
    """What tools may never read, list or search.

    :param dirs: absolute directories, symlinks resolved: nothing at or below
        them is reachable.
    :param names: :mod:`fnmatch` globs (lower case) for path components below
        the root a tool works in; a glob with ``/`` matches as many consecutive
        components.

    The empty policy (the default) protects nothing; it is falsy.
    """

    dirs: tuple[str, ...] = ()
    names: tuple[str, ...] = ()

    @classmethod
    def for_config(cls, config: LichConfig) -> ProtectedPaths:
        """The policy of an agent: lich's state and secret files, unless the config opts out."""
        if not config.protect_private_files:
            return cls()
        dirs = {
            os.path.realpath(Path(config.work_dir) / ".lich"),
            os.path.realpath(config.session_dir),
        }
        # ".lich" by name too: a nested project's own .lich/ is as private as ours.
        return cls(tuple(sorted(dirs)), (".lich", *SECRET_FILE_GLOBS))

    def __bool__(self) -> bool:
        return bool(self.dirs or self.names)

    def blocks(self, path: str | os.PathLike[str], root: str | os.PathLike[str]) -> bool:
        """Whether ``path`` (already resolved) is protected, seen from ``root``.

        ``root`` (resolved too) is the directory the tool works in: the name
        globs apply to the components of ``path`` below it, so a work dir that
        itself sits in a directory called ``keys.key`` stays usable. A path
        outside ``root`` has only its last components checked against them.
        """
        path = os.fspath(path)
        if any(_within(d, path) for d in self.dirs):
            return True
        if not self.names:
            return False
        root = os.fspath(root)
        if _within(root, path):
            rel = os.path.relpath(path, root)
            parts = [] if rel == "." else rel.split(os.sep)
        else:
            # The name, and for an `a/b` glob the directory it is in: never the
            # components above, which are not the tool's to judge.
            parts = path.split(os.sep)[-_WIDEST:]
            parts = [p for p in parts if p]
        return name_matches(parts, self.names)


def is_protected(
    policy: ProtectedPaths | None,
    path: str | os.PathLike[str],
    root: str | os.PathLike[str],
) -> bool:
    """Whether ``policy`` forbids ``path`` (resolved) for a tool working in ``root``.

    The single check the builtin tools apply after resolving a path and for
    every entry a walking tool meets; ``None`` protects nothing.
    """
    return policy is not None and policy.blocks(path, root)
