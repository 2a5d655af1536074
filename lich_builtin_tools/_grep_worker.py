"""The search loop of ``grep_files``, run as a separate process that can be killed.

Started as ``python -I -S _grep_worker.py`` (standard library only, no site,
no user environment). Reads one JSON spec from stdin and writes one JSON
string per hit to stdout, flushed as it goes, so that whatever was found
before the parent's deadline survives the kill. Python's ``re`` cannot be
interrupted inside a single match, which is why the bound is a process.

**Confinement.** The parent opened the searched file or directory inside the
work dir and passes its descriptor down (``spec["fd"]``), so the worker starts
from the object that was checked. Below it, every directory is opened again
from the work dir by its resolved path with no symlink followed
(``lich.guards.open_beneath``, loaded by file path: the package is not
importable here), and every file relative to its directory's descriptor with
``O_NOFOLLOW``; a symlinked file is followed only to a regular file inside the
work dir. A directory swapped for a symlink mid-search is skipped, never
entered. Files with more than one hard link are skipped unless
``allow_hard_links``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import stat
import sys
from types import ModuleType
from typing import Any

MAX_FILE_BYTES = 1_000_000
BINARY_SNIFF_BYTES = 1000
LINE_CAP_CHARS = 1000
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class _Enough(Exception):
    """Raised once the hit limit is reached."""


def _glob_ok(name: str, glob: str) -> bool:
    if not glob:
        return True
    if "*" not in glob:
        return name == glob
    prefix, suffix = glob.split("*", 1)
    return name.startswith(prefix) and name.endswith(suffix)


def _load_guards(path: str, name: str = "_lich_guards") -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _join(rel: str, name: str) -> str:
    return name if rel == "." else f"{rel}/{name}"


def _within(root: str, path: str) -> bool:
    try:
        return os.path.commonpath((root, path)) == root
    except ValueError:
        return False


def _protected(root: str, path: str, dirs: list[str], names: list[str],
               rules: ModuleType) -> bool:
    """lich.protected.ProtectedPaths.blocks, restated (this process cannot import lich,
    which needs attrs), with the name rule itself from lich.secret_files."""
    if any(_within(d, path) for d in dirs):
        return True
    if not names:
        return False
    if _within(root, path):
        rel = os.path.relpath(path, root)
        parts = [] if rel == "." else rel.split(os.sep)
    else:
        parts = [p for p in path.split(os.sep)[-3:] if p]
    return bool(rules.name_matches(parts, names))


def main() -> int:
    """Run one search described by the JSON spec on stdin."""
    spec: dict[str, Any] = json.load(sys.stdin)
    rx = re.compile(spec["pattern"])
    guards = _load_guards(spec["guards"])
    root: str = spec["root"]  # the work dir, symlinks resolved
    top_fd: int = spec["fd"]  # the searched file or directory, opened by the parent
    glob: str = spec.get("glob", "")
    limit: int = spec["limit"]
    allow_hard_links: bool = spec.get("allow_hard_links", False)
    skip = frozenset(spec.get("skip", ()))
    protected_dirs: list[str] = spec.get("protected_dirs", [])
    protected_names: list[str] = spec.get("protected_names", [])
    rules = _load_guards(spec["secret_files"], "_lich_secret_files")
    # A file holding a private key is left out whatever its name (the policy is on).
    refuse_keys: bool = spec.get("protected_content", False)

    def hidden(rel: str) -> bool:
        # Protected entries are left out silently (a link is judged by where it leads too).
        return _protected(root, os.path.join(root, rel), protected_dirs, protected_names,
                          rules)

    out = sys.stdout
    found = 0

    def search(fd: int, display: str) -> None:
        """Search the file open as ``fd`` (closed here)."""
        nonlocal found
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size >= MAX_FILE_BYTES:
                return
            if st.st_nlink > 1 and not allow_hard_links:
                return
            os.set_blocking(fd, True)
            with os.fdopen(os.dup(fd), "rb") as fh:
                data = fh.read(MAX_FILE_BYTES)
        except OSError:
            return
        finally:
            os.close(fd)
        if b"\x00" in data[:BINARY_SNIFF_BYTES]:
            return
        if refuse_keys and rules.holds_private_key(data):
            return
        for number, line in enumerate(data.decode("utf-8", "replace").split("\n"), 1):
            if rx.search(line):
                out.write(json.dumps(f"{display}:{number}: {line.strip()[:LINE_CAP_CHARS]}"))
                out.write("\n")
                out.flush()
                found += 1
                if found >= limit:
                    raise _Enough

    def open_dir(rel: str) -> int | None:
        try:
            opened = guards.open_beneath(root, rel, os.O_RDONLY | _O_DIRECTORY,
                                         follow_links=False)
        except (OSError, guards.ToolError):
            return None  # gone, unreadable, or swapped for a link since it was listed
        fd: int = opened.fd
        return fd

    def search_entry(dir_fd: int, rel: str, name: str, display: str) -> None:
        try:
            fd = os.open(name, os.O_RDONLY | _O_NONBLOCK | _O_NOFOLLOW | os.O_CLOEXEC,
                         dir_fd=dir_fd)
        except OSError:
            # A symlink (or an entry turned into one): followed only while inside.
            try:
                opened = guards.open_beneath(root, _join(rel, name), os.O_RDONLY | _O_NONBLOCK)
            except (OSError, guards.ToolError):
                return
            fd = opened.fd
            if hidden(opened.rel):
                os.close(fd)
                return
        search(fd, display)

    try:
        if not stat.S_ISDIR(os.fstat(top_fd).st_mode):
            if _glob_ok(spec["name"], glob):
                search(os.dup(top_fd), spec["name"])
            return 0
        stack: list[tuple[str, str, int | None]] = [(spec["rel"], "", os.dup(top_fd))]
        while stack:
            rel, prefix, dir_fd = stack.pop()
            if dir_fd is None:
                dir_fd = open_dir(rel)
                if dir_fd is None:
                    continue
            try:
                # A DirEntry of a descriptor stats through it, so only while the scan is open.
                with os.scandir(dir_fd) as it:
                    kinds = []
                    for entry in it:
                        if entry.name in skip:
                            continue
                        with contextlib.suppress(OSError):
                            kinds.append((entry.name,
                                          entry.stat(follow_symlinks=False).st_mode))
                subdirs = []
                for name, mode in sorted(kinds):
                    if hidden(_join(rel, name)):
                        continue
                    display = f"{prefix}{name}"
                    if stat.S_ISDIR(mode):
                        subdirs.append((_join(rel, name), display + "/", None))
                    elif _glob_ok(name, glob) and (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                        search_entry(dir_fd, rel, name, display)
            except OSError:
                continue
            finally:
                os.close(dir_fd)
            stack.extend(reversed(subdirs))
    except _Enough:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
