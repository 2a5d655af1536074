"""The sandbox plugin's settings: the ``[sandbox]`` table."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attrs import frozen

from lich.config import ConfigError
from lich.settings import each, one_of, setting, structure_settings

__all__ = ["MODES", "PROFILES", "SETTINGS_PATH", "TABLE", "SandboxSettings", "sandbox_settings",
           "strictest", "user_floor"]

MODES = ("off", "auto", "required")
"""``off``: no sandbox; ``auto``: the sandbox when this machine can run it, else a one-line
notice and none; ``required``: the sandbox or no run at all (fail closed)."""

PROFILES = ("read-only", "workspace-write", "full")
"""What a sandboxed process may touch: ``read-only`` nothing writable but a private
``/tmp`` and home; ``workspace-write`` the work dir too (but ``.git`` internals that run
code and ``.lich``); ``full`` no sandbox at all (said explicitly)."""

SETTINGS_PATH = "$.sandbox"
TABLE = "sandbox"


def _path(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TypeError("expected a non-empty path string")
    return value


@frozen
class SandboxSettings:
    """``[sandbox]``: whether processes are sandboxed, and how."""

    mode: str = setting("off", check=one_of(*MODES),
                        help="off, auto (when the machine can) or required (fail closed)")
    profile: str = setting("workspace-write", check=one_of(*PROFILES),
                           help="read-only, workspace-write or full (no sandbox)")
    read_paths: tuple[str, ...] = setting(
        factory=tuple, parse=each(_path, what="an array of paths"),
        help="paths under the (hidden) home directories shown read-only: ~/.cargo, ~/.nvm")


def sandbox_settings(raw: Any) -> SandboxSettings:
    """The checked settings of the raw table ``raw``.

    :raises lich.config.ConfigError: naming every bad key (``$.sandbox.mode``).
    """
    return structure_settings(raw, SandboxSettings, SETTINGS_PATH)


def user_floor(path: Path) -> SandboxSettings | None:
    """The ``[sandbox]`` table of the user config at ``path`` (``None``: no file, or no
    table there): the least sandbox any run of this user gets.

    lich reads one config file: a project's ``.lich/config.toml`` replaces the user
    config, and an untrusted one keeps no plugin table at all. Without this floor any
    repository with a config of its own would switch off the sandbox its user asked
    for, silently.

    :raises lich.config.ConfigError: the file cannot be read, or its table is bad.
    """
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError([f"{SETTINGS_PATH}: the user config {path} cannot be read for "
                           f"its sandbox settings: {exc}"], str(path)) from exc
    legacy = raw.get("plugin_settings")
    table = raw.get(TABLE)
    if table is None and isinstance(legacy, Mapping):
        table = legacy.get(TABLE)
    if table is None:
        return None
    try:
        return sandbox_settings(table)
    except ConfigError as exc:
        # Said in each line: a host that re-raises the problems keeps which file it is.
        raise ConfigError([f"{p} (in the user config {path})" for p in exc.problems],
                          str(path)) from exc


def strictest(effective: SandboxSettings, floor: SandboxSettings | None) -> SandboxSettings:
    """``effective`` made at least as strict as ``floor``: the stricter mode
    (``off`` < ``auto`` < ``required``) and profile (``full`` < ``workspace-write`` <
    ``read-only``) of the two. The paths shown are ``effective``'s."""
    if floor is None:
        return effective
    mode = max(effective.mode, floor.mode, key=MODES.index)
    profile = max(effective.profile, floor.profile, key=_STRICTNESS.index)
    return SandboxSettings(mode=mode, profile=profile, read_paths=effective.read_paths)


_STRICTNESS = ("full", "workspace-write", "read-only")
