"""Guard helpers for tool authors: argument checks, path confinement, output clamps.

Tools raise :class:`ToolError` with a coded message (``missing_arg: path``,
``path_escape: ../x escapes /work``); the executor turns it into a failed
:class:`lich.ToolResult` for the model. Nothing here does I/O beyond
``realpath``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeAlias

__all__ = [
    "DEFAULT_MAX_OUTPUT_CHARS",
    "DEFAULT_TOOL_TIMEOUT_S",
    "MAX_PATH_CHARS",
    "ToolError",
    "TruncateStyle",
    "is_within",
    "optional_bool_arg",
    "optional_int_arg",
    "optional_number_arg",
    "optional_string_arg",
    "require_string_arg",
    "resolve_in_root",
    "truncate_text",
]

DEFAULT_MAX_OUTPUT_CHARS = 20_000
DEFAULT_TOOL_TIMEOUT_S = 30.0
MAX_PATH_CHARS = 4096


class ToolError(Exception):
    """A tool failure the model should read: its message starts with a code."""


TruncateStyle: TypeAlias = Literal["block", "inline", "ellipsis"]


def truncate_text(text: str, max_chars: int, *, style: TruncateStyle = "block") -> str:
    """``text`` cut to ``max_chars`` characters, marked when anything was cut.

    The one truncation of lich and its plugins; the style says for what:

    * ``"block"`` (output a model reads): the first ``max_chars`` characters,
      then ``[... truncated, N chars omitted ...]`` on a line of its own;
    * ``"inline"`` (one-line messages: error bodies, previews): the first
      ``max_chars`` characters, then ``… [N chars omitted]``;
    * ``"ellipsis"`` (a column on a screen): at most ``max_chars`` characters
      in all (but at least the mark), the last one ``…``.
    """
    limit = max(0, max_chars)
    if len(text) <= limit:
        return text
    if style == "ellipsis":
        return text[: max(0, limit - 1)] + "…"
    omitted = len(text) - limit
    if style == "inline":
        return f"{text[:limit]}… [{omitted} chars omitted]"
    return f"{text[:limit]}\n[... truncated, {omitted} chars omitted ...]"


def require_string_arg(args: Mapping[str, Any], key: str) -> str:
    """A non-empty string argument, or ``missing_arg: <key>``."""
    value = args.get(key)
    if not isinstance(value, str) or value == "":
        raise ToolError(f"missing_arg: {key}")
    return value


def optional_string_arg(args: Mapping[str, Any], key: str, fallback: str) -> str:
    """A non-empty string argument, else ``fallback``."""
    value = args.get(key)
    return value if isinstance(value, str) and value != "" else fallback


def optional_number_arg(args: Mapping[str, Any], key: str, fallback: float) -> float:
    """A finite number (not a bool, not a numeric string), else ``fallback``."""
    value = args.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return fallback
    if not math.isfinite(value):
        return fallback
    return float(value)


def optional_int_arg(
    args: Mapping[str, Any],
    key: str,
    fallback: int,
    *,
    lo: int | None = None,
    hi: int | None = None,
) -> int:
    """A number floored to an int and clamped to ``[lo, hi]``, else ``fallback``."""
    value = optional_number_arg(args, key, float("nan"))
    result = fallback if math.isnan(value) else math.floor(value)
    if lo is not None:
        result = max(lo, result)
    if hi is not None:
        result = min(hi, result)
    return result


def optional_bool_arg(args: Mapping[str, Any], key: str, fallback: bool) -> bool:
    """A real bool, else ``fallback``."""
    value = args.get(key)
    return value if isinstance(value, bool) else fallback


def is_within(root: str, path: str) -> bool:
    """Whether ``path`` is ``root`` or below it (both already resolved)."""
    try:
        return os.path.commonpath((root, path)) == root
    except ValueError:  # different drives, or a mix of absolute and relative
        return False


def resolve_in_root(root: str | os.PathLike[str], target: str) -> Path:
    """Resolve ``target`` against ``root`` and refuse anything that lands outside.

    Symlinks are followed (``realpath``) for the parts of the path that exist,
    so a link inside the root that points outside is refused; the parts that
    do not exist yet (a file about to be written) are resolved lexically
    beneath their deepest existing parent.

    :raises ToolError: ``invalid_path: …`` for a NUL byte or an over-long path,
        ``path_escape: <target> escapes <root>`` for anything outside.
    """
    if "\x00" in target:
        raise ToolError("invalid_path: path contains a NUL byte")
    if len(target) > MAX_PATH_CHARS:
        raise ToolError(f"invalid_path: path longer than {MAX_PATH_CHARS} characters")
    real_root = os.path.realpath(root)
    try:
        resolved = os.path.realpath(os.path.join(real_root, target))
    except (OSError, ValueError) as exc:
        raise ToolError(f"invalid_path: {exc}") from exc
    if not is_within(real_root, resolved):
        raise ToolError(f"path_escape: {target} escapes {real_root}")
    return Path(resolved)
