"""The search loop of ``grep_files``, run as a separate process that can be killed.

Started as ``python -I -S _grep_worker.py`` (standard library only, no site,
no user environment). Reads one JSON spec from stdin and writes one JSON
string per hit to stdout, flushed as it goes, so that whatever was found
before the parent's deadline survives the kill. Python's ``re`` cannot be
interrupted inside a single match, which is why the bound is a process.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import stat
import sys
from typing import Any

MAX_FILE_BYTES = 1_000_000
BINARY_SNIFF_BYTES = 1000
LINE_CAP_CHARS = 1000


class _Enough(Exception):
    """Raised once the hit limit is reached."""


def _glob_ok(name: str, glob: str) -> bool:
    if not glob:
        return True
    if "*" not in glob:
        return name == glob
    prefix, suffix = glob.split("*", 1)
    return name.startswith(prefix) and name.endswith(suffix)


def _within(root: str, path: str) -> bool:
    try:
        return os.path.commonpath((root, path)) == root
    except ValueError:
        return False


def _protected(root: str, path: str, dirs: list[str], names: list[str]) -> bool:
    """lich.protected.ProtectedPaths.blocks, restated: this process cannot import lich."""
    if any(_within(d, path) for d in dirs):
        return True
    if not names:
        return False
    if _within(root, path):
        rel = os.path.relpath(path, root)
        parts = [] if rel == "." else rel.split(os.sep)
    else:
        parts = [os.path.basename(path)]
    return any(fnmatch.fnmatchcase(part.lower(), glob) for part in parts for glob in names)


def main() -> int:
    """Run one search described by the JSON spec on stdin."""
    spec: dict[str, Any] = json.load(sys.stdin)
    rx = re.compile(spec["pattern"])
    root: str = spec["root"]  # the work dir, symlinks resolved
    target: str = spec["target"]  # where to search, symlinks resolved
    glob: str = spec.get("glob", "")
    limit: int = spec["limit"]
    skip = frozenset(spec.get("skip", ()))
    protected_dirs: list[str] = spec.get("protected_dirs", [])
    protected_names: list[str] = spec.get("protected_names", [])

    def hidden(path: str) -> bool:
        return _protected(root, path, protected_dirs, protected_names)
    out = sys.stdout
    found = 0

    def search(path: str, display: str) -> None:
        nonlocal found
        try:
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode) or st.st_size >= MAX_FILE_BYTES:
                return
            with open(path, "rb") as fh:
                data = fh.read(MAX_FILE_BYTES)
        except OSError:
            return
        if b"\x00" in data[:BINARY_SNIFF_BYTES]:
            return
        for number, line in enumerate(data.decode("utf-8", "replace").split("\n"), 1):
            if rx.search(line):
                out.write(json.dumps(f"{display}:{number}: {line.strip()[:LINE_CAP_CHARS]}"))
                out.write("\n")
                out.flush()
                found += 1
                if found >= limit:
                    raise _Enough

    try:
        if not os.path.isdir(target):
            name = os.path.basename(target)
            if _glob_ok(name, glob):
                search(target, name)
            return 0
        stack = [(target, "")]
        while stack:
            current, prefix = stack.pop()
            try:
                with os.scandir(current) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError:
                continue
            subdirs = []
            for entry in entries:
                # Protected entries are left out silently, judged by the path met and,
                # for a link, by where it leads.
                if entry.name in skip or hidden(entry.path):
                    continue
                display = f"{prefix}{entry.name}"
                try:
                    if entry.is_symlink():
                        # Follow a link only to a file inside the root; never into a directory
                        # (no escapes, no cycles).
                        real = os.path.realpath(entry.path)
                        if hidden(real):
                            continue
                        if _within(root, real) and os.path.isfile(real) and _glob_ok(
                            entry.name, glob
                        ):
                            search(real, display)
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        subdirs.append((entry.path, display + "/"))
                    elif _glob_ok(entry.name, glob):
                        search(entry.path, display)
                except OSError:
                    continue
            stack.extend(reversed(subdirs))
    except _Enough:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
