"""``lich tools``: the enabled tools, with their plugin and description."""

from __future__ import annotations

import click

from lich.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    check_named_plugins,
    echo_error,
    host_for,
    quiet_plugin_log,
    warn_plugin_failures,
)
from lich.cli.options import CliSettings, get_settings, json_option, setup_options
from lich.cli.output import add_row, load_or_report, out_console, print_json, print_table

__all__ = ["tools_command", "tools_list"]


@click.command("tools")
@setup_options
@json_option("As JSON, with parameter schemas.")
@click.pass_context
def tools_command(ctx: click.Context) -> None:
    """The enabled tools, with their plugin and description."""
    settings = get_settings(ctx)
    ctx.exit(tools_list(settings, settings.json))


def tools_list(settings: CliSettings, as_json: bool) -> int:
    """``lich tools``: the enabled tools with their plugin and description."""
    from lich.agent import build_tool_registry
    from lich.config import ConfigError
    from lich.providers import ProviderRegistry

    loaded = load_or_report(settings)
    if loaded is None:
        return EXIT_USAGE
    config = loaded.config
    host = host_for(settings, config)
    try:
        with quiet_plugin_log():
            # As an agent is assembled: a plugin that fails registering its providers is
            # unloaded whole, so its tools must not be listed as if a run could use them.
            host.check_config(config)
            host.register_providers(ProviderRegistry())
            registry = build_tool_registry(host, config)
    except ConfigError as exc:
        # A plugin's table, or a process runner that cannot start (a required sandbox):
        # said as a run would say it, not as a traceback.
        echo_error(str(exc))
        return EXIT_USAGE
    # Registering tools may start processes (MCP servers): the list is all we need.
    host.shutdown_sync(registry)
    try:
        check_named_plugins(settings, host)
    except CommandError as exc:
        return exc.report()
    warn_plugin_failures(host)
    tools = registry.list()
    if as_json:
        from lich.executor import ToolExecutor

        # The limits a run uses: [tools.<name>] over the tool's own.
        limits = ToolExecutor(registry, work_dir=config.work_dir, tool_settings=config.tools)
        rows = []
        for t in tools:
            timeout_s, max_chars = limits.limits(t)
            rows.append({"name": t.name, "plugin": t.plugin, "description": t.description,
                         "parameters": t.parameters, "timeout_s": timeout_s,
                         "max_output_chars": max_chars, "runs_inline": limits.runs_inline(t)})
        print_json(rows)
        return EXIT_OK
    if not tools:
        click.echo("no tools enabled (see `lich plugins`)", err=True)
        return EXIT_OK
    from rich.table import Column, Table

    table = Table(Column("tool", no_wrap=True), Column("plugin", no_wrap=True), "description",
                  box=None, pad_edge=False)
    for t in tools:
        first = t.description.strip().splitlines()[0] if t.description.strip() else ""
        add_row(table, t.name, t.plugin or "", first)
    print_table(out_console(), table)
    return EXIT_OK
