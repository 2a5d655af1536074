"""Workspace trust: what a project's ``.lich/config.toml`` may do before its user says so.

A cloned repository is someone else's: its ``.lich/config.toml`` must not run
code, send the user's key somewhere or widen a limit just because lich was started
inside it. Until its directory is *trusted*, lich keeps from a project config only
the keys known to be safe (:data:`SAFE_KEYS`: the model among the kinds lich
knows, the system prompt, limits that narrow) and ignores everything else —
plugins other than the user's own, ``[mcp]`` servers, providers' ``base_url``,
``api_key_env``, ``headers`` and ``options``, ``[approvals]``, ``[tools]``
(limits, ``pass_env``), ``protect_private_files = false``, ``[otel]``,
``[gateway]``, ``[bus]``, ``[session_store]``, ``[prices]``, ``work_dir``,
``session_dir`` and every table a plugin reads. The list is an allow-list: a key
added to lich later is ignored in an untrusted project until it is added here.

A project is trusted when (:func:`trust_of`):

* the run says so: ``--trust`` or ``LICH_TRUST=1`` (this run only);
* its directory is in the user config's ``trusted_dirs`` list (or below one of
  them): for CI, whose checkouts change at every commit;
* ``lich trust DIR`` (or a "yes" to the question lich asks on a terminal) recorded
  it in ``trusted.json`` in the user config dir (``0600``) with the SHA-256 of its
  config: a changed config is untrusted again, and asks again.

Trust covers the project's config file, and what it names (its plugin files,
MCP commands) as they are when they run: as with VS Code's or direnv's trust, a
trusted directory is one whose contents you would run.

Also here: which discovered config files are not even read (:func:`unsafe_reason`,
git's ``safe.directory`` rule): one another local user could have written.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeAlias

from attrs import frozen

__all__ = [
    "SAFE_KEYS",
    "TRUST_ENV",
    "ProjectTrust",
    "config_digest",
    "forget",
    "keep_trust",
    "record_trust",
    "trust_file",
    "trust_of",
    "trusted_entries",
    "unsafe_reason",
    "untrusted_view",
]

TRUST_ENV = "LICH_TRUST"
"""``LICH_TRUST=1``: trust the project config of this run (as ``--trust``)."""

TrustHow: TypeAlias = Literal["flag", "env", "list", "store", ""]

_TRUE = {"1", "true", "yes", "on"}


@frozen
class ProjectTrust:
    """Whether a project config was trusted, and what was left out of it if not.

    ``how``: ``flag`` (``--trust``), ``env`` (``LICH_TRUST``), ``list`` (the user
    config's ``trusted_dirs``), ``store`` (``lich trust``); empty when untrusted.
    ``ignored``: the keys (``$.path`` style, without the ``$.``) an untrusted config
    set that were left out: what trusting it would enable.
    """

    project_dir: Path
    config: Path
    trusted: bool
    how: TrustHow = ""
    ignored: tuple[str, ...] = ()
    changed: bool = False
    """Trusted once with another content: the config changed since."""

    def describe(self) -> str:
        """One line: what was ignored and how to trust the project."""
        what = ", ".join(self.ignored)
        why = "changed since it was trusted" if self.changed else "not trusted"
        return (f"the project config {self.config} is {why}: ignored {what}; "
                f"to use them trust the project with `lich trust {self.project_dir}` "
                f"(or --trust for this run)")


# --------------------------------------------------------------------- the filter

# Keys kept whatever their value: they choose among what lich already does.
_ANY_VALUE = frozenset({
    "system_prompt", "temperature", "stream", "log_level", "retry_jitter",
    "compress_threshold", "tools_enabled", "tools_disabled", "persist_sessions",
    # Budgets: unset means no limit, so any value narrows. (Not max_tokens: unset is
    # the provider's own cap per answer, which a value may raise.)
    "max_cost_usd", "max_total_tokens",
})
# Kept when they narrow (at most lich's default).
_AT_MOST = {"max_turns": 25, "context_budget_tokens": 100_000, "hook_timeout_s": 10.0,
            "approval_timeout_s": 300.0}
# Kept only with this value (the safe one).
_ONLY = {"protect_private_files": True, "strict_plugins": True}
# Of a [[providers]] entry: which model, of which kind lich knows. Never where to
# (base_url), with whose key (api_key_env), with what headers or extra options.
_PROVIDER_KEYS = frozenset({"name", "model", "kind", "think", "keep_alive", "timeout_s"})

SAFE_KEYS: frozenset[str] = frozenset({*_ANY_VALUE, *_AT_MOST, *_ONLY, "providers", "plugins"})
"""The top-level keys an untrusted project config may set at all (each with its rule)."""


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _safe(key: str, value: Any) -> bool:
    if key in _AT_MOST:
        return _number(value) and 0 < value <= _AT_MOST[key]
    if key in _ONLY:
        return bool(value == _ONLY[key])
    return key in _ANY_VALUE or key == "providers"  # (a bad providers value: reported)


def untrusted_view(
    raw: Mapping[str, Any], user_plugins: Sequence[str]
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """What an untrusted project config may set: ``raw`` without every key that runs
    code, directs a key or widens a limit; and those keys, for the one line that says so.

    :param raw: the project config as read (before any structuring).
    :param user_plugins: the user's own plugin list (their user config's, or the
        builtins): the only plugins an untrusted project gets, whatever it lists.
    """
    kept: dict[str, Any] = {}
    ignored: list[str] = []
    for key, value in raw.items():
        if key == "plugins":
            listed = value if isinstance(value, list) else None
            names = None if listed is None else {
                str(e).removeprefix("+").strip() for e in listed}
            if listed and all(str(e).startswith("+") for e in listed):
                names = (names or set()) | set(user_plugins)
            if names != set(user_plugins):
                ignored.append("plugins")
            continue  # the user's list is used (the caller sets it)
        if key == "providers" and isinstance(value, list):
            entries = []
            for i, entry in enumerate(value):
                if not isinstance(entry, Mapping):
                    entries.append(entry)  # structuring reports the bad shape
                    continue
                entries.append({k: v for k, v in entry.items() if k in _PROVIDER_KEYS})
                ignored.extend(f"providers[{i}].{k}" for k in entry if k not in _PROVIDER_KEYS)
            kept[key] = entries
            continue
        if _safe(key, value):
            kept[key] = value
        else:
            ignored.append(f"[{key}]" if isinstance(value, Mapping) else key)
    return kept, tuple(ignored)


# --------------------------------------------------------------------- the store


def trust_file() -> Path:
    """``trusted.json`` in the user config dir: the projects ``lich trust`` recorded."""
    from lich.config import user_config_path

    return user_config_path().parent / "trusted.json"


def config_digest(path: Path) -> str:
    """The SHA-256 of a config file's bytes (empty when it cannot be read)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


def trusted_entries() -> dict[str, dict[str, str]]:
    """The recorded projects: directory -> ``{"config", "sha256", "trusted_at"}``.
    A missing or unreadable file is no entries (nothing is trusted)."""
    try:
        data = json.loads(trust_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    projects = data.get("projects") if isinstance(data, dict) else None
    if not isinstance(projects, dict):
        return {}
    return {k: v for k, v in projects.items()
            if isinstance(k, str) and isinstance(v, dict)
            and all(isinstance(x, str) for x in v.values())}


def _save(projects: Mapping[str, Mapping[str, str]]) -> None:
    from lich.private_files import replace_private

    text = json.dumps({"version": 1, "projects": dict(sorted(projects.items()))}, indent=2)
    replace_private(trust_file(), (text + "\n").encode())


def record_trust(project_dir: Path, config: Path) -> None:
    """Trust ``project_dir`` with its config as it is now (its SHA-256)."""
    projects = trusted_entries()
    projects[str(project_dir)] = {
        "config": str(config), "sha256": config_digest(config),
        "trusted_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    _save(projects)


def keep_trust(config: Path, before: str) -> None:
    """After lich itself edited ``config`` for the user (rules an "always" answer
    wrote), keep the trust of the project that had it trusted with the ``before``
    content: the edit is the user's, not the repository's."""
    projects = trusted_entries()
    changed = False
    for entry in projects.values():
        if entry.get("config") == str(config) and before and entry.get("sha256") == before:
            entry["sha256"] = config_digest(config)
            changed = True
    if changed:
        _save(projects)


def forget(project_dir: Path) -> bool:
    """Stop trusting ``project_dir``; whether it was recorded."""
    projects = trusted_entries()
    if projects.pop(str(project_dir), None) is None:
        return False
    _save(projects)
    return True


def _under(directory: Path, listed: Iterable[str]) -> bool:
    for entry in listed:
        base = Path(entry).expanduser()
        if base.is_absolute() and directory.is_relative_to(base.resolve()):
            return True
    return False


def trust_of(
    project_dir: Path,
    config: Path,
    *,
    flag: bool | None = None,
    env: Mapping[str, str] | None = None,
    trusted_dirs: Iterable[str] = (),
) -> ProjectTrust:
    """Whether the project ``project_dir`` (whose config is ``config``) is trusted.

    :param flag: ``True``: trusted for this run (``--trust``); ``False``: not,
        whatever is recorded (to show what trust would enable); ``None``: look.
    :param trusted_dirs: the user config's ``trusted_dirs`` (absolute paths).
    """
    env = os.environ if env is None else env
    if flag is not None:
        return ProjectTrust(project_dir, config, flag, "flag" if flag else "")
    if env.get(TRUST_ENV, "").strip().lower() in _TRUE:
        return ProjectTrust(project_dir, config, True, "env")
    if _under(project_dir, trusted_dirs):
        return ProjectTrust(project_dir, config, True, "list")
    entry = trusted_entries().get(str(project_dir))
    if entry is not None:
        if entry.get("sha256") == config_digest(config) and entry.get("sha256"):
            return ProjectTrust(project_dir, config, True, "store")
        return ProjectTrust(project_dir, config, False, changed=True)
    return ProjectTrust(project_dir, config, False)


# ---------------------------------------------------------------- who wrote it


def _owner_ok(st: os.stat_result) -> bool:
    return st.st_uid in (os.geteuid(), 0)


def _others_write(st: os.stat_result) -> bool:
    # Group write counts unless the group is the user's own (a umask of 002 with one
    # group per user is common and harmless).
    return bool(st.st_mode & stat.S_IWOTH) or (
        bool(st.st_mode & stat.S_IWGRP) and st.st_gid != os.getegid())


def unsafe_reason(project_dir: Path) -> str | None:
    """Why ``project_dir/.lich/config.toml`` must not be read, or ``None``: it, its
    ``.lich`` directory or the project directory is owned by another user (not root),
    or one of them is writable by others (git's ``safe.directory`` rule, after
    CVE-2022-24765: ``/tmp/.lich`` would otherwise configure everyone under ``/tmp``).
    """
    lich_dir = project_dir / ".lich"
    config = lich_dir / "config.toml"
    try:
        checks = ((config, os.stat(config)), (config, os.lstat(config)),
                  (lich_dir, os.stat(lich_dir)), (project_dir, os.stat(project_dir)))
    except OSError as exc:
        return f"cannot be checked ({exc.strerror})"
    for path, st in checks:
        # The project directory too: its owner may swap the .lich inside it for their
        # own at any time, even between this check and the read (git's rule looks at
        # the owner of the directory holding .git for the same reason).
        if not _owner_ok(st):
            return f"{path} is owned by another user (uid {st.st_uid})"
        if _others_write(st) and not stat.S_ISLNK(st.st_mode):
            return f"{path} is writable by other users"
    return None
