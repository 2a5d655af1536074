"""The sandbox plugin's settings: the ``[sandbox]`` table."""

from __future__ import annotations

from typing import Any

from attrs import frozen

from lich.settings import each, one_of, setting, structure_settings

__all__ = ["MODES", "PROFILES", "SETTINGS_PATH", "TABLE", "SandboxSettings", "sandbox_settings"]

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
