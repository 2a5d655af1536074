"""The installed entry points of a group, remembered between processes.

``importlib.metadata.entry_points`` reads the ``entry_points.txt`` of every
installed distribution, and the metadata of each one that provides the group —
on every start-up, in a process that also pays for importing
``importlib.metadata`` itself (and the ``email`` parser it reads metadata
with): 10–20 ms of a cold ``lich TASK`` (B2-cold in docs/performance.md). What a
scan found is kept in a small JSON file in the user cache directory and used
again as long as what it was read from is unchanged.

*Unchanged* is checked on every use, cheaply, the way Python's own import
system decides whether its directory listings are still valid — by file system
state, not by time: the file records ``sys.path`` and, for each entry of it,
the directory's modification time and the size and modification time of each
``*.dist-info`` / ``*.egg-info`` directory's ``entry_points.txt``. Installing or
removing a distribution adds or removes such a directory (and changes its
parent's modification time); editing an ``entry_points.txt`` changes its own;
a ``.pth`` file or ``PYTHONPATH`` changes ``sys.path``. Any difference is a
full scan, written back. A state younger than two seconds is never written
(a file system whose times are that coarse could hide a change made in the same
tick), and a finder other than the standard one that can list distributions
(``sys.meta_path``) turns the cache off. Nothing here ever raises for a cache
it cannot read or write: it scans instead.

:func:`lookup` is the cached view; :func:`scan` reads the metadata, as
``importlib.metadata`` sees it, each time.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import re
import stat
import sys
import time
from functools import reduce
from pathlib import Path
from typing import Any

__all__ = ["EntryPointRecord", "cache_dir", "lookup", "scan"]

log = logging.getLogger("lich.plugins")

_FORMAT = 1
# A state this recent may share its file system tick with a change still to come.
_SETTLED_NS = 2_000_000_000
# ``module[:attr.attr] [extras]``: the entry point value syntax (PyPA spec); compiled
# by ``re`` (and kept in its cache) when a plugin is first loaded, not at import.
_VALUE = r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$"


class EntryPointRecord:
    """One installed entry point: its name, value (``module:attr``) and the
    distribution (name and version) that declares it."""

    __slots__ = ("distribution", "name", "value", "version")

    def __init__(self, name: str, value: str, distribution: str | None,
                 version: str | None) -> None:
        self.name = name
        self.value = value
        self.distribution = distribution
        self.version = version

    def load(self) -> Any:
        """Import the module and return the object the value names (as
        ``importlib.metadata.EntryPoint.load`` does)."""
        match = re.match(_VALUE, self.value)
        if match is None:
            raise ValueError(f"invalid entry point value {self.value!r} (module or module:attr)")
        module = importlib.import_module(match.group("module"))
        names = (match.group("attr") or "").split(".")
        return reduce(getattr, filter(None, names), module)

    def __repr__(self) -> str:
        return f"EntryPointRecord({self.name!r}, {self.value!r}, {self.distribution!r})"


def scan(group: str) -> dict[str, EntryPointRecord]:
    """The group's entry points by name, read from the installed metadata now."""
    import importlib.metadata

    out: dict[str, EntryPointRecord] = {}
    for ep in importlib.metadata.entry_points(group=group):
        dist = getattr(ep, "dist", None)
        try:
            name = dist.metadata["Name"] if dist is not None else None
            version = dist.version if dist is not None else None
        except Exception:  # broken metadata must not break loading
            name = version = None
        out[ep.name] = EntryPointRecord(ep.name, ep.value, name, version)
    return out


def lookup(group: str) -> dict[str, EntryPointRecord]:
    """The group's entry points by name: from the cache when the installed
    distributions are as they were when it was written, else :func:`scan` (and the
    cache rewritten)."""
    current = _state()
    file = _cache_file(group) if current is not None else None
    if current is None or file is None:
        return scan(group)
    state, newest = current
    cached = _read(file, state)
    if cached is not None:
        return cached
    found = scan(group)
    if time.time_ns() - newest > _SETTLED_NS:
        _write(file, state, found)
    return found


def cache_dir() -> Path | None:
    """Where lich keeps what it caches (``$XDG_CACHE_HOME/lich`` or ``~/.cache/lich``
    on Linux, the platform's user cache directory elsewhere); ``None`` without a home."""
    if sys.platform.startswith("linux"):
        # platformdirs gives the same on Linux, at the price of importing it (~3 ms).
        base = os.environ.get("XDG_CACHE_HOME", "").strip()
        if not base:
            home = os.path.expanduser("~")
            if home == "~":
                return None
            base = os.path.join(home, ".cache")
        return Path(base) / "lich"
    import platformdirs

    return Path(platformdirs.user_cache_dir("lich"))


# ----------------------------------------------------------------- internals


def _state() -> tuple[list[Any], int] | None:
    """What the scan depends on, as JSON-able data, and the newest modification time
    in it; ``None``: not cacheable."""
    import importlib.machinery

    standard = importlib.machinery.PathFinder
    if any(finder is not standard and hasattr(finder, "find_distributions")
           for finder in sys.meta_path):
        return None  # distributions from somewhere this state does not describe
    state: list[Any] = []
    newest = 0
    for entry in sys.path:
        path = os.path.abspath(entry or ".")
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            state.append([path, None])
            continue
        newest = max(newest, st.st_mtime_ns)
        if not stat.S_ISDIR(st.st_mode):  # a zip archive: any change changes the file
            state.append([path, st.st_mtime_ns, st.st_size])
            continue
        try:
            with os.scandir(path) as children:
                names = sorted(c.name for c in children
                               if c.name.endswith((".dist-info", ".egg-info")))
        except OSError:
            return None
        metadata: list[Any] = []
        for name in names:
            try:
                ep = os.stat(os.path.join(path, name, "entry_points.txt"))
            except OSError:
                metadata.append([name])
            else:
                newest = max(newest, ep.st_mtime_ns)
                metadata.append([name, ep.st_mtime_ns, ep.st_size])
        state.append([path, st.st_mtime_ns, metadata])
    return state, newest


def _cache_file(group: str) -> Path | None:
    where = cache_dir()
    if where is None:
        return None
    # One file per interpreter and path: two virtualenvs never share one.
    key = json.dumps([sys.executable, sys.version, sys.path, group])
    return where / f"entry-points-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def _read(file: Path, state: list[Any]) -> dict[str, EntryPointRecord] | None:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        if data.get("format") != _FORMAT or data.get("state") != state:
            return None
        return {name: EntryPointRecord(name, value, dist, version)
                for name, value, dist, version in data["entry_points"]}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        log.debug("entry point cache %s unreadable (%s): scanning", file, exc)
        return None


def _write(file: Path, state: list[Any], found: dict[str, EntryPointRecord]) -> None:
    data = {"format": _FORMAT, "state": state,
            "entry_points": [[r.name, r.value, r.distribution, r.version]
                             for r in found.values()]}
    from lich.private_files import write_private

    temp = file.with_name(f"{file.name}.{os.getpid()}.tmp")
    try:
        write_private(temp, json.dumps(data).encode())  # 0600 in 0700 dirs, like all of lich's
        os.replace(temp, file)  # whole or not at all, whoever else writes it
    except OSError as exc:
        log.debug("entry point cache %s not written (%s)", file, exc)
        try:
            temp.unlink()
        except OSError:
            pass
