"""The builtin ``mcp`` plugin (entry point ``mcp`` in the group ``lich``).

* ``lich_check_config`` checks the ``[mcp]`` table (and expands ``${VAR}``), so
  ``lich config validate`` and every run report a bad server table;
* ``lich_register_tools`` starts the enabled servers in parallel and registers
  their tools; a server that fails is a warning on this plugin's load report and
  one ``[lich:warn]`` line, and its tools are absent;
* ``lich_shutdown`` stops the servers of the agent that is closing;
* ``lich_register_commands`` adds ``lich mcp``.

Importing this module is cheap: the MCP SDK is imported only when a server is
configured and enabled.
"""

from __future__ import annotations

import logging
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

from lich.hooks import hookimpl

if TYPE_CHECKING:
    from collections.abc import Callable

    import click

    from lich.config import LichConfig
    from lich.mcp.client import McpRuntime
    from lich.mcp.config import McpSettings
    from lich.processes import ProcessRunner
    from lich.settings import ConfigTables
    from lich.tools import ToolRegistry

__all__ = [
    "lich_check_config",
    "lich_register_commands",
    "lich_register_config_tables",
    "lich_register_tools",
    "lich_shutdown",
    "log_dir",
    "open_runtime",
]

log = logging.getLogger("lich.mcp")

# The servers each agent's registry holds, closed by lich_shutdown (or, for an agent
# dropped unclosed, when its registry is garbage-collected).
_RUNTIMES: weakref.WeakKeyDictionary[ToolRegistry, McpRuntime] = weakref.WeakKeyDictionary()


def log_dir(config: LichConfig) -> Path:
    """Where the stdio servers' stderr logs go: ``logs/mcp`` beside the session dir
    (``.lich/logs/mcp`` in a project), where the transcripts of the same runs are."""
    return Path(config.session_dir).parent / "logs" / "mcp"


def missing_sdk_message() -> str:
    """What to tell a user with MCP servers configured but no SDK installed."""
    return ("MCP servers are configured but the MCP SDK is not installed: "
            "pip install 'lich-agent[mcp]'")


def open_runtime(
    settings: McpSettings, config: LichConfig, runner: ProcessRunner | None = None, *,
    cached: bool = True,
) -> McpRuntime:
    """Start every enabled server of ``settings`` (in parallel; blocks until each is
    connected or failed), the stdio ones through ``runner`` (the direct one by default).
    ``cached``: a server whose tool list the cache holds (:mod:`lich.mcp.cache`) is not
    started until its first call.

    :raises ImportError: the MCP SDK is not installed.
    """
    from lich.mcp.cache import default_cache
    from lich.mcp.client import McpRuntime

    # The cache goes where the logs do: the state dir of these runs (``.lich``).
    cache = default_cache(log_dir(config).parent.parent) if cached else None
    runtime = McpRuntime(settings, work_dir=config.work_dir, log_dir=log_dir(config),
                         runner=runner, cache=cache)
    runtime.start()
    return runtime


def _narrowed(settings: McpSettings, tools_enabled: tuple[str, ...] | None) -> McpSettings:
    """``settings`` without the servers none of whose tools ``tools_enabled`` (lich's
    allow-list, the gateway's ``[gateway] tools``) could keep: they are not started."""
    if tools_enabled is None:
        return settings
    import attrs

    from lich.mcp.naming import MAX_TOOL_NAME, PREFIX, sanitise

    def wanted(server: str) -> bool:
        # The prefix every tool name of the server starts with (a long name is cut
        # and hashed after 55 characters, so only that much of the prefix is sure).
        prefix = f"{PREFIX}{sanitise(server)}__"[:MAX_TOOL_NAME - 9]
        return any(name.startswith(prefix) for name in tools_enabled)

    return attrs.evolve(settings, servers={
        name: server for name, server in settings.servers.items() if wanted(name)})



@hookimpl
def lich_register_config_tables(tables: ConfigTables) -> None:
    """Claim ``[mcp]``: the MCP servers whose tools the agent offers."""
    from lich.mcp.config import McpSettings, parse_mcp_settings

    tables.claim("mcp", McpSettings, parse=lambda raw, path: parse_mcp_settings(raw, path=path),
                 help="MCP servers whose tools the agent offers ([mcp.servers.<name>])")


@hookimpl
def lich_check_config(config: LichConfig) -> None:
    """Check ``[mcp]``; every run and ``lich config validate`` refuse a bad table."""
    from lich.mcp.config import parse_mcp_settings

    parse_mcp_settings(config.table("mcp"))


def _refresh_wanted_of(registry: ToolRegistry) -> Callable[[], None]:
    """``registry.refresh_wanted``, holding the registry weakly: the runtime is kept
    (in ``_RUNTIMES``) for as long as the registry lives, and must not keep it alive."""
    ref = weakref.ref(registry)

    def wanted() -> None:
        alive = ref()
        if alive is not None:
            alive.refresh_wanted()

    return wanted


@hookimpl
def lich_register_tools(
    registry: ToolRegistry, config: LichConfig, runner: ProcessRunner,
) -> None:
    """Start the configured servers (stdio ones through ``runner``) and register their
    tools."""
    from lich.mcp.config import parse_mcp_settings

    settings = _narrowed(parse_mcp_settings(config.table("mcp")), config.tools_enabled)
    if not settings.enabled():
        return
    if registry.inspect_only:
        # `lich config validate`: no server is started (no process, no connection) to
        # list names; what is left out is said instead.
        names = ", ".join(server.name for server in settings.enabled())
        registry.unlisted(f"the tools of the MCP servers {names} (not started here)")
        return
    try:
        runtime = open_runtime(settings, config, runner)
    except ImportError:
        registry.warn(missing_sdk_message())
        log.warning("%s", missing_sdk_message())
        return
    from lich.mcp.tools import McpToolset, server_tokens

    _RUNTIMES[registry] = runtime
    weakref.finalize(registry, runtime.close)
    toolset = McpToolset(runtime, registry, registry.current_plugin or "mcp")
    toolset.register()
    registry.add_refresher(toolset.refresh)
    runtime.on_tools_changed = _refresh_wanted_of(registry)
    failed = [s for s in runtime.states() if s.status not in ("connected", "idle")]
    for state in failed:
        registry.warn(f"mcp server {state.name!r} is unavailable: {state.error}")
    if failed:
        names = ", ".join(f"{s.name} ({s.error})" for s in failed)
        log.warning("mcp: %d of %d servers did not start, their tools are absent: %s "
                    "(see `lich mcp list`)", len(failed), len(runtime.states()), names)
    # What the model will be sent: lich's own tools_enabled / tools_disabled, which the
    # registry applies after this hook, already taken into account.
    offered = [e for e in toolset.entries
               if (config.tools_enabled is None or e.tool.name in config.tools_enabled)
               and e.tool.name not in config.tools_disabled]
    tokens = server_tokens(offered)
    total = sum(tokens.values())
    limit = settings.context_warning_share * config.context_budget_tokens
    if total > limit:
        per_server = ", ".join(f"{s} ~{n}" for s, n in
                               sorted(tokens.items(), key=lambda kv: -kv[1]))
        log.warning("mcp: the MCP tool definitions take ~%d tokens, more than %.0f%% of "
                    "context_budget_tokens (%d): %s; narrow them with tools_enabled in "
                    "[mcp.servers.<name>]", total, settings.context_warning_share * 100,
                    config.context_budget_tokens, per_server)


@hookimpl
def lich_shutdown(registry: ToolRegistry) -> None:
    """Stop the servers started for ``registry``'s agent."""
    runtime = _RUNTIMES.pop(registry, None)
    if runtime is not None:
        runtime.close()


@hookimpl
def lich_register_commands(cli: click.Group) -> None:
    """Add ``lich mcp``."""
    from lich.mcp.command import mcp_group

    cli.add_command(mcp_group)
