"""A single-file third-party plugin that owns a config table, a hook of its own and a
slash command — the way the builtins own theirs.

    plugins = ["+plugins_example/forecast.py", "+plugins_example/forecast_gauge.py"]

    [forecast]                 # claimed by this plugin (lich_register_config_tables)
    city = "Oslo"
    units = "metric"

* ``[forecast]`` is checked with :class:`ForecastSettings` by ``lich config
  validate`` and before any run, shown with its defaults by ``lich config show``,
  written into ``lich config init``'s template.
* ``lich_forecast_sources(city, units)`` is this plugin's own hook
  (``lich_add_hookspecs``): other plugins (``forecast_gauge.py``) answer it with a
  line each.
* ``/forecast [CITY]`` in ``lich chat``, the TUI and the gateway's chats, and the
  command ``lich forecast [CITY]``, print what the sources say.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click
from attrs import frozen

from lich import LichConfig, SlashCommand, SlashContext, hookimpl
from lich.hooks import hookspec
from lich.settings import non_empty, one_of, setting, structure_settings

if TYPE_CHECKING:
    from lich import ConfigTables, PluginHost, SlashRegistry

PLUGIN_NAME = "forecast"


@frozen
class ForecastSettings:
    """``[forecast]``."""

    city: str = setting("Reykjavik", check=non_empty, help="the city when none is named")
    units: str = setting("metric", check=one_of("metric", "imperial"), help="metric or imperial")


class ForecastSpecs:
    """This plugin's own hook: other plugins answer it."""

    @hookspec
    def lich_forecast_sources(self, city: str, units: str) -> str | None:
        """One line of forecast for ``city`` in ``units``, or ``None`` to say nothing.

        :param city: the city asked about.
        :param units: ``metric`` or ``imperial``, from ``[forecast] units``.
        """


def forecast_settings(config: LichConfig | None) -> ForecastSettings:
    """``[forecast]``, checked (its claim has it checked before any run already)."""
    raw = config.table(PLUGIN_NAME) if config is not None else None
    return structure_settings(raw, ForecastSettings, f"$.{PLUGIN_NAME}")


def forecast(host: PluginHost, config: LichConfig | None, city: str = "") -> str:
    """What every source says about ``city`` (the configured one when empty)."""
    settings = forecast_settings(config)
    where = city.strip() or settings.city
    lines: list[Any] = host.pm.hook.lich_forecast_sources(city=where, units=settings.units)
    said = [str(line) for line in lines if line]
    if not said:
        return f"forecast for {where}: no source answered (is forecast_gauge loaded?)"
    return f"forecast for {where} ({settings.units}): " + "; ".join(said)


@hookimpl
def lich_add_hookspecs(host: PluginHost) -> None:
    """Add ``lich_forecast_sources``."""
    host.add_hookspecs(ForecastSpecs)


@hookimpl
def lich_register_config_tables(tables: ConfigTables) -> None:
    """Claim ``[forecast]``."""
    tables.claim(PLUGIN_NAME, ForecastSettings, help="the forecast example: city and units")


def _slash_forecast(context: SlashContext) -> str:
    if context.host is None:
        return "forecast: no plugin host"
    return forecast(context.host, context.config, context.args)


@hookimpl
def lich_register_slash_commands(registry: SlashRegistry) -> None:
    """``/forecast [CITY]`` in chat, the TUI and the gateway."""
    registry.register(SlashCommand("forecast", "what the forecast sources say",
                                   arg_hint="[CITY]", run=_slash_forecast))


@click.command("forecast")
@click.argument("city", required=False, default="")
@click.pass_context
def forecast_command(ctx: click.Context, city: str) -> None:
    """What the forecast sources say about CITY (default: [forecast] city)."""
    from lich.cli.common import CommandError, assemble
    from lich.cli.options import get_settings

    try:
        built = assemble(get_settings(ctx), agent=False)
        # A table a run would refuse is refused here too.
        problems = built.host.check_config(built.config)
        if problems:
            raise CommandError("\n".join(problems))
    except CommandError as exc:
        ctx.exit(exc.report())
    click.echo(forecast(built.host, built.config, city))


@hookimpl
def lich_register_commands(cli: click.Group) -> None:
    """Add ``lich forecast``."""
    cli.add_command(forecast_command)
