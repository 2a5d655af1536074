"""``lich plugins``: the configured plugins and how loading each went — for each, the
config tables it claims, the hooks it implements and the hook specs it adds; ``lich
plugins available``: what is installed. A plugin that fails is a row in a table, never
a crash."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from lich.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    echo_warning,
    host_for,
    load_settings_config,
    named_plugin_failures,
    quiet_plugin_log,
)
from lich.cli.options import CliSettings, get_settings, json_option, setup_options
from lich.cli.output import add_row, load_or_report, out_console, print_json, print_table

if TYPE_CHECKING:
    from lich.config import LichConfig
    from lich.plugins import PluginHost

__all__ = ["plugins_available", "plugins_group", "plugins_list"]


@click.group("plugins", invoke_without_command=True)
@setup_options
@json_option()
@click.pass_context
def plugins_group(ctx: click.Context) -> None:
    """The configured plugins and how loading each went."""
    if ctx.invoked_subcommand is None:
        settings = get_settings(ctx)
        ctx.exit(plugins_list(settings, settings.json))


@plugins_group.command("available")
@setup_options
@json_option()
@click.pass_context
def plugins_available_command(ctx: click.Context) -> None:
    """Installed plugins (entry points of group `lich`), read from metadata
    without importing them; marks the enabled ones."""
    settings = get_settings(ctx)
    ctx.exit(plugins_available(settings, settings.json))


def _exercise(host: PluginHost, config: LichConfig) -> str | None:
    """Run the registration hooks once, so failures in them show up in the reports;
    returns the warning for tools that would run unasked (no ``approvals`` plugin)."""
    from lich.agent import build_tool_registry
    from lich.providers import ProviderRegistry

    with quiet_plugin_log():
        # As an agent is assembled: the settings checks first (which has every plugin
        # claim its tables), then registration.
        host.check_config(config)
        host.slash_commands()
        host.register_providers(ProviderRegistry())
        tools = build_tool_registry(host, config)
        # Registering tools may start processes (MCP servers): stop them again.
        host.shutdown_sync(tools)
        from lich.cli.root import BUILTIN_COMMANDS

        host.register_commands(click.Group("scratch"), reserved=BUILTIN_COMMANDS)
    from lich.approvals import unasked_warning

    return unasked_warning(host, tools.list(), config)


def plugins_list(settings: CliSettings, as_json: bool) -> int:
    """``lich plugins``: one row per configured entry; exit 2 when a ``--plugin`` entry
    (or, in strict mode, any entry) did not load."""
    from lich import serialization

    loaded = load_or_report(settings)
    if loaded is None:
        return EXIT_USAGE
    config = loaded.config
    host = host_for(settings, config)
    unasked = _exercise(host, config)
    reports = list(host.reports)
    if as_json:
        print_json([{**serialization.unstructure(r), "ok": r.ok} for r in reports])
    else:
        from rich.table import Column, Table
        from rich.text import Text

        whole = ("entry", "plugin", "version", "status")
        table = Table(*(Column(h, no_wrap=True) for h in whole), "tables", "hooks",
                      Column("error", no_wrap=True))
        for r in reports:
            style = {"loaded": "green", "failed": "red", "skipped": "yellow"}[r.status]
            hooks = ", ".join(h.removeprefix("lich_") for h in r.hooks)
            if r.hookspecs:
                # The hooks this plugin specifies (for others to implement): the same
                # column, as a builtin's and a third party's are the same kind of thing.
                hooks += "; adds specs: " + ", ".join(h.removeprefix("lich_")
                                                       for h in r.hookspecs)
            tables = ", ".join(f"[{t}]" for t in r.tables)
            # A loaded plugin's warnings (a command name it could not take) go where a
            # failed one's error would.
            problem = r.describe_error() or "; ".join(f"warning: {w}" for w in r.warnings)
            add_row(table, r.entry, r.plugin or "", r.version or "",
                     Text(r.status, style=style), tables, hooks, problem)
        console = out_console()
        print_table(console, table)
        failed = len(host.failures)
        if failed:
            console.print(f"{failed} of {len(reports)} plugin entries did not load.",
                          markup=False, soft_wrap=True)
    if unasked:
        # On stderr, as every warning: `lich plugins --json` stays one JSON document.
        echo_warning(unasked)
    # The table is the answer either way; the exit code says whether a run would start.
    if named_plugin_failures(settings, host):
        return EXIT_USAGE
    if config.strict_plugins and host.failures:
        return EXIT_USAGE
    return EXIT_OK


def plugins_available(settings: CliSettings, as_json: bool) -> int:
    """``lich plugins available``: installed ``lich`` entry points, from metadata only."""
    from lich.config import BUILTIN_PLUGINS, ConfigError
    from lich.plugins import available_plugins

    try:
        enabled: Sequence[str] = load_settings_config(settings).config.plugins
    except ConfigError as exc:
        echo_warning(f"{exc} (showing the default plugin list as enabled)")
        enabled = BUILTIN_PLUGINS
    rows: list[dict[str, Any]] = [
        {"name": p.name, "value": p.value, "distribution": p.distribution,
         "version": p.version, "enabled": p.name in enabled}
        for p in available_plugins()
    ]
    if as_json:
        print_json(rows)
        return EXIT_OK
    from rich.table import Column, Table

    table = Table(*(Column(h, no_wrap=True)
                    for h in ("name", "distribution", "version", "module", "enabled")))
    for row in rows:
        add_row(table, row["name"], row["distribution"] or "", row["version"] or "",
                      row["value"], "yes" if row["enabled"] else "")
    print_table(out_console(), table)
    return EXIT_OK
