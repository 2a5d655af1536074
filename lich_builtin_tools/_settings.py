"""The ``[tools.<name>]`` tables of the builtin tools: one settings class per tool.

Every class extends :class:`lich.settings.ToolSettings` (``timeout_s``,
``max_output_chars``, which the executor applies), and adds only the keys its
tool reads. The ``builtin_tools`` plugin checks each table against its class in
``lich_check_config``, so ``lich config validate`` and every run refuse a bad
or unknown key before any tool is called; at call time the tools read their
table through the same class (:func:`tool_settings`).

Importing this module is cheap: it is all the plugin's check needs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from attrs import frozen

from lich.guards import ToolError
from lich.settings import (
    ConfigError,
    ToolSettings,
    at_least,
    greater_than,
    setting,
    structure_settings,
    url,
)

if TYPE_CHECKING:
    from lich.tools import ToolContext

__all__ = [
    "DEFAULT_SEARCH_URL",
    "DEFAULT_TIME_BUDGET_S",
    "SETTINGS",
    "GrepFilesSettings",
    "NetSettings",
    "ReadFileSettings",
    "TerminalSettings",
    "WebSearchSettings",
    "WriteFileSettings",
    "check_tool_tables",
    "tool_settings",
]

S = TypeVar("S", bound=ToolSettings)

DEFAULT_TIME_BUDGET_S = 10.0
DEFAULT_SEARCH_URL = "https://html.duckduckgo.com/html/"


@frozen
class TerminalSettings(ToolSettings):
    """``[tools.terminal]``."""

    pass_env: tuple[str, ...] = setting(
        (), help="names kept in the command's environment even though they look secret")
    max_processes: int = setting(
        0, check=at_least(0),
        help="RLIMIT_NPROC of the command (processes of the user, all counted); 0 = unlimited")
    max_memory_mb: int = setting(
        0, check=at_least(0),
        help="RLIMIT_AS of each process of the command, in MiB; 0 = unlimited")
    protect_process: bool = setting(
        True, help="make lich non-dumpable before the first command, so commands cannot "
                   "read its environment or memory (false: debuggers may attach, core dumps)")
    inherit_env: bool = setting(
        True, help="start from lich's own environment (what its launcher gave it), scrubbed; "
                   "false: only a minimal base (PATH, HOME, USER, LANG, ...), the tool env "
                   "and pass_env")


@frozen
class ReadFileSettings(ToolSettings):
    """``[tools.read_file]``."""

    allow_hard_links: bool = setting(
        False, help="true reads files with more than one hard link (one may be outside)")


@frozen
class WriteFileSettings(ReadFileSettings):
    """``[tools.write_file]`` and ``[tools.edit_file]``."""

    allow_git_dir: bool = setting(
        False, help="true allows writes into .git/ (its config and hooks run commands)")


@frozen
class GrepFilesSettings(ReadFileSettings):
    """``[tools.grep_files]``."""

    time_budget_s: float = setting(DEFAULT_TIME_BUDGET_S, check=greater_than(0),
                                   help="the time budget of one search")


@frozen
class NetSettings(ToolSettings):
    """``[tools.fetch_url]`` and ``[tools.http_request]``."""

    allow_private: bool = setting(
        False, help="true turns the SSRF guard off (loopback, private, metadata addresses)")


@frozen
class WebSearchSettings(NetSettings):
    """``[tools.web_search]``."""

    base_url: str = setting(DEFAULT_SEARCH_URL, check=url("http", "https"),
                            help="the search endpoint (guarded like any other URL)")


SETTINGS: Mapping[str, type[ToolSettings]] = {
    "read_file": ReadFileSettings,
    "write_file": WriteFileSettings,
    "edit_file": WriteFileSettings,
    "list_dir": ToolSettings,
    "terminal": TerminalSettings,
    "grep_files": GrepFilesSettings,
    "fetch_url": NetSettings,
    "web_search": WebSearchSettings,
    "http_request": NetSettings,
    "process_list": ToolSettings,
    "disk_usage": ToolSettings,
    "env_get": ToolSettings,
    "docs_read": ReadFileSettings,
    "docs_search": ReadFileSettings,
}
"""The settings class of every builtin tool, by tool name."""


def check_tool_tables(tables: Mapping[str, Any]) -> None:
    """Check the ``[tools.<name>]`` table of every builtin tool in ``tables``.

    Tables of other tools are left alone: their plugins check them (lich itself
    checks ``timeout_s`` and ``max_output_chars`` everywhere).

    :raises ConfigError: listing every problem of every table.
    """
    problems: list[str] = []
    for name, table in tables.items():
        cls = SETTINGS.get(name)
        if cls is None:
            continue
        try:
            structure_settings(table, cls, f"$.tools.{name}")
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)


def tool_settings(ctx: ToolContext, tool: str, cls: type[S]) -> S:
    """``ctx.settings`` (the ``[tools.<tool>]`` table) as ``cls``.

    A loaded config has been checked already; a table handed to an executor
    directly may not have been, so a bad one fails the call with the same
    problems a check would report.

    :raises ToolError: ``invalid_setting: $.tools.<tool>.<key>: ...``.
    """
    try:
        return structure_settings(ctx.settings, cls, f"$.tools.{tool}")
    except ConfigError as exc:
        raise ToolError(f"invalid_setting: {'; '.join(exc.problems)}") from None
