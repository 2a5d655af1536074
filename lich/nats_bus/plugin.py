"""The builtin ``nats`` plugin (entry point ``nats``): ``[bus] kind = "nats"``.

Enable it with ``plugins = ["+nats"]`` and install the extra
(``pip install 'lich-agent[nats]'``). It also adds ``lich worker``. Importing this
module is cheap: nats-py is imported only when a bus is made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lich.hooks import hookimpl

if TYPE_CHECKING:
    import click

    from lich.config import LichConfig
    from lich.gateway.bus import GatewayBus, MessageBus
    from lich.settings import ConfigTables

__all__ = [
    "lich_check_config",
    "lich_make_bus",
    "lich_register_commands",
    "lich_register_config_tables",
]

KIND = "nats"



@hookimpl
def lich_register_config_tables(tables: ConfigTables) -> None:
    """Claim ``[bus]`` when its ``kind`` is ``"nats"``."""
    from lich.nats_bus.settings import NatsBusSettings, parse_nats_bus_settings

    tables.claim("bus", NatsBusSettings, kind=KIND, parse=parse_nats_bus_settings,
                 help="the NATS JetStream bus: servers, partitions, leases")


@hookimpl
def lich_check_config(config: LichConfig) -> None:
    """Check ``[bus]`` when it asks for this bus (``lich config validate`` reports it)."""
    from lich.gateway.bus import bus_kind
    from lich.nats_bus.settings import parse_nats_bus_settings

    if bus_kind(config.table("bus")) == KIND:
        parse_nats_bus_settings(config.table("bus"))


@hookimpl
def lich_make_bus(config: LichConfig, local: GatewayBus) -> MessageBus | None:
    """The nats bus, when ``[bus] kind = "nats"``.

    :raises lich.config.ConfigError: ``[bus]`` is wrong, or nats-py is not installed.
    """
    from lich.gateway.bus import bus_kind
    from lich.nats_bus.settings import parse_nats_bus_settings
    from lich.settings import ConfigError

    if bus_kind(config.table("bus")) != KIND:
        return None
    settings = parse_nats_bus_settings(config.table("bus"))
    try:
        from lich.nats_bus.bus import NatsBus
    except ImportError as exc:
        raise ConfigError([
            f"$.bus.kind: the nats bus needs nats-py ({exc.name or exc}): "
            "pip install 'lich-agent[nats]'"
        ]) from exc
    return NatsBus(settings, local)


@hookimpl
def lich_register_commands(cli: click.Group) -> None:
    """Add ``lich worker``, which runs the bus's messages in a process of its own, and
    ``lich cluster status``, what the broker knows of the cluster."""
    from lich.nats_bus.command import cluster_group, worker_command

    cli.add_command(worker_command)
    cli.add_command(cluster_group)
