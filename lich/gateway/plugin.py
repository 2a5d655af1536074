"""The builtin ``gateway`` plugin (entry point ``gateway`` in the group ``lich``).

It adds the gateway's own hook specifications (:mod:`lich.gateway.hookspecs`,
through ``lich_add_hookspecs``), registers the four platforms — ``webhook``,
``telegram``, ``discord``, ``twitch`` — through
``lich_register_gateway_adapters``, exactly as a third-party package would
register its own, adds the ``lich gateway`` command through
``lich_register_commands``, and claims the ``[gateway]`` table and the
in-process ``[bus]`` (``kind = "memory"``, the default) through
``lich_register_config_tables``, as a third-party plugin claims its own.

Importing this module is cheap: starlette, uvicorn, websockets and httpx are
imported only when an adapter is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from attrs import frozen

from lich.hooks import hookimpl

if TYPE_CHECKING:
    import click

    from lich.gateway.registry import Adapter, AdapterContext, AdapterRegistry
    from lich.plugins import PluginHost
    from lich.settings import ConfigTables

__all__ = [
    "MemoryBusSettings",
    "lich_add_hookspecs",
    "lich_register_commands",
    "lich_register_config_tables",
    "lich_register_gateway_adapters",
]


@frozen
class MemoryBusSettings:
    """``[bus]`` for the in-process bus (``kind = "memory"``): no settings of its own
    (its limits are ``[gateway] queue_limit`` and ``history_cap``)."""


def parse_memory_bus(raw: Mapping[str, Any], path: str) -> MemoryBusSettings:
    """Check ``[bus]`` for the memory bus: ``kind`` and nothing else."""
    from lich.settings import ConfigError

    extra = sorted(str(key) for key in raw if key != "kind")
    if extra:
        raise ConfigError([f"{path}.{key}: unknown key (the memory bus has no settings)"
                           for key in extra])
    return MemoryBusSettings()


@hookimpl
def lich_add_hookspecs(host: PluginHost) -> None:
    """Add ``lich_register_gateway_adapters`` and ``lich_make_bus``."""
    from lich.gateway import hookspecs

    host.add_hookspecs(hookspecs)


@hookimpl
def lich_register_config_tables(tables: ConfigTables) -> None:
    """Claim ``[gateway]``, and ``[bus]`` for the in-process bus."""
    from lich.gateway.config import GatewayConfig, parse_gateway_config

    tables.claim("gateway", GatewayConfig,
                 parse=lambda raw, path: parse_gateway_config(raw, path=path),
                 help="the gateway: platforms, limits, the tools chat users may use")
    tables.claim("bus", MemoryBusSettings, kind="memory", default=True, parse=parse_memory_bus,
                 help="how the gateway's messages reach their runs (kind picks the bus)")


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
def lich_register_commands(cli: click.Group) -> None:
    """Add ``lich gateway``."""
    from lich.gateway.command import gateway_command

    cli.add_command(gateway_command)
