"""A single-file lich plugin: one tool and one before-hook.

Use it for one run::

    lich --plugin plugins_example/my_plugin.py "how many words are in notes.txt?"

or for good, in ``.lich/config.toml``::

    plugins = ["builtin_tools", "openai_compat", "failover", "plugins_example/my_plugin.py"]

    [plugin_settings.my_plugin]        # the plugin's name is the file's stem
    protect = ["*.lock", ".git/**", "LICENSE"]

A relative path is resolved against the work dir. The file is imported as a
module; lich finds its hooks by their ``lich_`` names.

* ``word_count`` counts the lines, words and characters of a text file in the
  work dir (like ``wc``).
* The before-hook refuses ``write_file`` and ``edit_file`` on protected files
  (``protect``, globs matched against the path relative to the work dir and
  against the file name; default: lock files and ``.git``).
* ``lich_check_config`` checks ``[plugin_settings.my_plugin]`` with
  :mod:`lich.settings`, so ``protect = "*.lock"`` (not an array) or a typo in
  a key fails ``lich config validate`` and every run.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping
from typing import Any

from attrs import frozen

from lich import (
    Block,
    LichConfig,
    RunInfo,
    ToolCall,
    ToolContext,
    ToolError,
    ToolRegistry,
    hookimpl,
    tool,
)
from lich.guards import resolve_in_root
from lich.settings import structure_settings

PLUGIN_NAME = "my_plugin"
DEFAULT_PROTECT = ("*.lock", ".git", ".git/**")
WRITING_TOOLS = ("write_file", "edit_file")
MAX_FILE_BYTES = 5_000_000


@frozen
class MyPluginSettings:
    """``[plugin_settings.my_plugin]``."""

    protect: tuple[str, ...] = DEFAULT_PROTECT  # globs; replaces the defaults


def my_settings(raw: Mapping[str, Any] | None) -> MyPluginSettings:
    """The checked settings; :class:`lich.settings.ConfigError` names every bad key."""
    return structure_settings(raw, MyPluginSettings, f"$.plugin_settings.{PLUGIN_NAME}")


@tool(timeout_s=10)
def word_count(path: str, ctx: ToolContext) -> dict[str, Any]:
    """Count the lines, words and characters of a UTF-8 text file in the work dir.

    :param path: the file, relative to the work dir.
    """
    target = resolve_in_root(ctx.work_dir, path)
    if not target.is_file():
        raise ToolError(f"not_found: {path}")
    if target.stat().st_size > MAX_FILE_BYTES:
        raise ToolError(f"file_too_large: {path} is over {MAX_FILE_BYTES} bytes")
    try:
        text = target.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(f"not_text: {path} is not UTF-8 ({exc.reason})") from exc
    return {
        "path": path,
        "lines": text.count("\n") + (1 if text and not text.endswith("\n") else 0),
        "words": len(text.split()),
        "chars": len(text),
    }


@hookimpl
def lich_register_tools(registry: ToolRegistry) -> None:
    """Add ``word_count``. (The hook may take fewer arguments than its spec.)"""
    registry.register(word_count)


@hookimpl
def lich_check_config(config: LichConfig) -> None:
    """Check the settings before any run (and in ``lich config validate``)."""
    my_settings(config.plugin_settings.get(PLUGIN_NAME))


@hookimpl
def lich_before_tool_call(call: ToolCall, run: RunInfo) -> Block | None:
    """Refuse writes to protected files; allow everything else."""
    if call.name not in WRITING_TOOLS:
        return None
    target = call.args.get("path")
    if not isinstance(target, str):
        return None  # the tool itself reports the missing argument
    protect = my_settings(run.settings_for(PLUGIN_NAME)).protect
    relative = os.path.normpath(target).replace(os.sep, "/").lstrip("/")
    name = os.path.basename(relative)
    for pattern in protect:
        if fnmatch.fnmatchcase(relative, pattern) or fnmatch.fnmatchcase(name, pattern):
            return Block(f"protected_file: {target} matches {pattern!r} ({PLUGIN_NAME})")
    return None
