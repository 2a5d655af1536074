"""lich's builtin tools, registered as a plugin (entry point ``builtin_tools``).

Twelve core tools — ``read_file``, ``write_file``, ``edit_file``, ``list_dir``,
``terminal``, ``grep_files``, ``fetch_url``, ``web_search``, ``http_request``,
``process_list``, ``disk_usage``, ``env_get`` — plus ``docs_read`` and
``docs_search`` when a docs root is found (see :func:`resolve_docs_root`).
Every path is confined to the work dir with symlinks resolved; see
``docs/tools.md`` for parameters, limits, errors and the ``[tools.<name>]``
settings, which the plugin checks in ``lich_check_config`` (one settings class
per tool, in ``lich_builtin_tools._settings``).

Importing this module is cheap: the tool modules (and httpx, which the web
tools import only when they run) are loaded when the tools are registered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lich.hooks import hookimpl

if TYPE_CHECKING:
    from pathlib import Path

    from lich.config import LichConfig
    from lich.tools import Tool, ToolRegistry
    from lich_builtin_tools._docs import DocsResolver
    from lich_builtin_tools._net import NetGuard

__all__ = [
    "CORE_TOOL_NAMES",
    "DOCS_TOOL_NAMES",
    "builtin_tools",
    "lich_check_config",
    "lich_register_tools",
    "resolve_docs_root",
]

CORE_TOOL_NAMES: tuple[str, ...] = (
    "read_file",
    "write_file",
    "edit_file",
    "list_dir",
    "terminal",
    "grep_files",
    "fetch_url",
    "web_search",
    "http_request",
    "process_list",
    "disk_usage",
    "env_get",
)
"""The twelve tools always registered, in registration order."""

DOCS_TOOL_NAMES: tuple[str, ...] = ("docs_read", "docs_search")
"""The tools registered when a docs root is found."""


def resolve_docs_root(work_dir: str, env: Any) -> Path | None:
    """The docs root for ``work_dir`` and a tool env (``LICH_DOCS_DIR``), or ``None``."""
    from lich_builtin_tools._docs import resolve_docs_root as resolve

    return resolve(work_dir, env)


def builtin_tools(
    config: LichConfig | None = None,
    *,
    net: NetGuard | None = None,
    docs_resolver: DocsResolver | None = None,
    env: Any = None,
) -> list[Tool]:
    """The builtin tools for ``config``, in registration order.

    :param config: the agent's configuration: its ``work_dir`` is where the docs
        root is looked for. (The providers' key variables that ``terminal`` scrubs
        and ``env_get`` redacts come with each call, in ``ctx.secret_env_names``.)
    :param net: the SSRF guard / HTTP runner of the web tools (tests inject a
        resolver or transport through it).
    :param docs_resolver: ``(work_dir, env) -> Path | None``; the docs tools are
        included only when it finds a root for the config's work dir.
    :param env: the tool env used for that check (``LICH_DOCS_DIR``); the
        process env is consulted too.
    """
    import os

    from lich_builtin_tools._docs import make_docs_tools
    from lich_builtin_tools._docs import resolve_docs_root as default_resolver
    from lich_builtin_tools._files import (
        edit_file_tool,
        list_dir_tool,
        read_file_tool,
        write_file_tool,
    )
    from lich_builtin_tools._grep import grep_files_tool
    from lich_builtin_tools._system import disk_usage_tool, make_env_get_tool, process_list_tool
    from lich_builtin_tools._terminal import make_terminal_tool
    from lich_builtin_tools._web import make_web_tools

    fetch_url, web_search, http_request = make_web_tools(net)
    tools = [
        read_file_tool,
        write_file_tool,
        edit_file_tool,
        list_dir_tool,
        make_terminal_tool(),
        grep_files_tool,
        fetch_url,
        web_search,
        http_request,
        process_list_tool,
        disk_usage_tool,
        make_env_get_tool(),
    ]
    resolver = docs_resolver or default_resolver
    work_dir = getattr(config, "work_dir", None) or os.getcwd()
    if resolver(str(work_dir), dict(env or {})) is not None:
        tools.extend(make_docs_tools(resolver))
    return tools


@hookimpl
def lich_check_config(config: LichConfig) -> None:
    """Check the ``[tools.<name>]`` table of every builtin tool: a bad value or an
    unknown key fails ``lich config validate`` and every run, before any tool is called.

    Tables of other plugins' tools are theirs to check.
    """
    from lich_builtin_tools._settings import check_tool_tables

    check_tool_tables(config.tools)


@hookimpl(trylast=True)
def lich_register_tools(registry: ToolRegistry, config: LichConfig) -> None:
    """Register the builtin tools (the docs tools only when a docs root is found).

    ``trylast`` so that a plugin offering a tool of the same name registers
    first and wins; the builtin is then reported as a skipped duplicate.
    """
    for item in builtin_tools(config):
        registry.register(item)
