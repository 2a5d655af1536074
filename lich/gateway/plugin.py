"""The builtin ``gateway`` plugin (entry point ``gateway`` in the group ``lich``).

It registers the four platforms — ``webhook``, ``telegram``, ``discord``,
``twitch`` — through ``lich_register_gateway_adapters``, exactly as a
third-party package would register its own, adds the ``lich gateway``
command through ``lich_register_commands``, and checks the ``[gateway]``
table (and ``[bus] kind``) through ``lich_check_config``.

Importing this module is cheap: starlette, uvicorn, websockets and httpx are
imported only when an adapter is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lich.hooks import hookimpl

if TYPE_CHECKING:
    import click

    from lich.config import LichConfig
    from lich.gateway.registry import Adapter, AdapterContext, AdapterRegistry

__all__ = ["lich_check_config", "lich_register_commands", "lich_register_gateway_adapters"]


def _webhook(context: AdapterContext) -> Adapter:
    from lich.gateway.webhook import WebhookAdapter

    return WebhookAdapter(context)


def _telegram(context: AdapterContext) -> Adapter:
    from lich.gateway.telegram import TelegramAdapter

    return TelegramAdapter(context)


def _discord(context: AdapterContext) -> Adapter:
    from lich.gateway.discord import DiscordAdapter

    return DiscordAdapter(context)


def _twitch(context: AdapterContext) -> Adapter:
    from lich.gateway.twitch import TwitchAdapter

    return TwitchAdapter(context)


@hookimpl
def lich_register_gateway_adapters(registry: AdapterRegistry) -> None:
    """Register the builtin platforms."""
    registry.register("webhook", _webhook)
    registry.register("telegram", _telegram)
    registry.register("discord", _discord)
    registry.register("twitch", _twitch)


@hookimpl
def lich_check_config(config: LichConfig) -> None:
    """Check ``[gateway]``: ``lich config validate`` reports it, and every run refuses it.

    A bad ``[gateway]`` table is a configuration error like any other, so a plain
    ``lich run`` refuses it too rather than leaving it to the next ``lich gateway``.
    """
    from lich.gateway.bus import bus_kind
    from lich.gateway.config import parse_gateway_config
    from lich.settings import ConfigError

    problems: list[str] = []
    try:
        parse_gateway_config(config.gateway)
    except ConfigError as exc:
        problems.extend(exc.problems)
    try:
        # Another kind's settings are checked by the plugin that makes that kind.
        if bus_kind(config.bus) == "memory":
            problems.extend(f"$.bus.{key}: unknown key (the memory bus has no settings)"
                            for key in config.bus if key != "kind")
    except ConfigError as exc:
        problems.extend(exc.problems)
    if problems:
        raise ConfigError(problems)


@hookimpl
def lich_register_commands(cli: click.Group) -> None:
    """Add ``lich gateway``."""
    from lich.gateway.command import gateway_command

    cli.add_command(gateway_command)
