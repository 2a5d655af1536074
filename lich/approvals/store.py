"""Writing an ``always`` approval down: allow rules appended to a config file.

The front ends show the person the rules (:attr:`lich.hooks.ApprovalRequest.rules`)
and the files they may go to (:func:`approval_config_targets`), then call
:func:`add_allow_rules`. The file is the person's own: it is edited in place with
``tomlkit``, so its comments, order and layout stay as they were, and only the
``[approvals] allow`` array grows.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import tomllib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lich.approvals.rules import parse_rule
from lich.private_files import PRIVATE_FILE_MODE, make_private_dirs
from lich.settings import ConfigError

if TYPE_CHECKING:
    from lich.config import ConfigLocation, LichConfig

__all__ = ["add_allow_rules", "approval_config_targets"]


def approval_config_targets(config: LichConfig,
                            location: ConfigLocation | None) -> list[tuple[str, Path]]:
    """Where an ``always`` approval may write its rules, as ``(label, path)`` to offer
    the person, the file in use first: a TOML file given with ``--config``, the
    project's ``.lich/config.toml`` (that of the project whose config is in use, else
    the work dir's) and the user config. A path may not exist yet:
    :func:`add_allow_rules` creates it.
    """
    from lich.config import user_config_path

    targets: list[tuple[str, Path]] = []
    if location is not None and location.reason == "flag" and location.path.suffix == ".toml":
        targets.append(("the config given with --config", location.path))
    project_dir = (location.project_dir if location is not None and location.project_dir
                   else Path(config.work_dir))
    targets.append(("this project", project_dir / ".lich" / "config.toml"))
    targets.append(("your user config", user_config_path()))
    seen: set[Path] = set()
    unique = []
    for label, path in targets:
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            unique.append((label, path))
    return unique


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file at ``path`` (created empty if absent), so
    that two approvals written at once both end up in it. The lock is on the file
    itself, re-taken when a writer replaced it meanwhile; no lock file is left."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): the write is still atomic
        yield
        return
    while True:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, PRIVATE_FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # replaced while we waited: lock the new file
    try:
        yield
    finally:
        os.close(fd)


def _allow_array(doc: Any, path: Path) -> Any:
    import tomlkit

    table = doc.get("approvals")
    if table is None:
        table = tomlkit.table()
        doc["approvals"] = table
    elif not isinstance(table, dict):
        raise ConfigError(["$.approvals: expected a table, so that allow rules can be added"],
                          str(path))
    allow = table.get("allow")
    if allow is None:
        allow = tomlkit.array()
        table["allow"] = allow
    elif not isinstance(allow, list):
        raise ConfigError(["$.approvals.allow: expected an array of rules, so that rules "
                           "can be added"], str(path))
    return allow


def add_allow_rules(path: Path, rules: Sequence[str]) -> None:
    """Append ``rules`` to ``[approvals] allow`` in the TOML file ``path``.

    Comments and formatting are kept; the file and the table are created when
    absent (and the directory, for a new ``.lich/``); a rule already listed is not
    added again. The new text replaces the file atomically (a temporary file in
    the same directory, then :func:`os.replace`), with the file's mode kept, so a
    reader sees the old file or the new one, never half of it.

    :raises ValueError: a rule does not parse (nothing is written).
    :raises lich.config.ConfigError: the file is not valid TOML, or its
        ``approvals``/``allow`` is not a table/array (nothing is written).
    :raises OSError: the file cannot be read or written.
    """
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    for rule in rules:
        parse_rule(rule)
    target = Path(os.path.realpath(path))  # a symlinked config is edited, not replaced
    make_private_dirs(target.parent)
    with _locked(target):
        text = target.read_text(encoding="utf-8")
        try:
            doc = tomlkit.parse(text)
        except TOMLKitError as exc:
            raise ConfigError([f"not valid TOML: {exc}"], str(path)) from exc
        allow = _allow_array(doc, path)
        listed = {str(item) for item in allow}
        added = [r for r in dict.fromkeys(rules) if r not in listed]
        if not added:
            return
        for rule in added:
            allow.append(rule)
        new_text = tomlkit.dumps(doc)
        # What lich will read back: the same rules, as strings (a guard against a
        # tomlkit bug ever writing a file the config loader refuses).
        written = tomllib.loads(new_text).get("approvals", {}).get("allow", [])
        if not all(r in written for r in added):
            raise ConfigError(["$.approvals.allow: the rules could not be written back"],
                              str(path))
        _replace(target, new_text)


def _replace(target: Path, text: str) -> None:
    mode = stat.S_IMODE(os.stat(target).st_mode)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
