"""The ``lich gateway [PLATFORM...]`` command (click).

It takes the same configuration flags as every ``lich`` command
(``--config``, ``--work-dir``, ``--plugin``, ``--model``, …, before or after
the command name) plus the gateway's own. Importing this module is cheap
(click only); the gateway is imported when the command runs.

Exit codes: 0 after a graceful stop, 1 when no platform could start,
2 for a usage or configuration error.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import click

from lich.cli.options import config_options, get_settings

if TYPE_CHECKING:
    from lich.cli.common import Assembly
    from lich.gateway.config import GatewayConfig

__all__ = ["assemble_gateway", "gateway_command"]


def assemble_gateway(ctx: click.Context) -> tuple[Assembly, GatewayConfig]:
    """The plugin host and config of a gateway process (``lich gateway``, ``lich
    worker``), every plugin's settings checked; exits 2 (with the message) when they
    are wrong.

    The agents are built later, by the process itself (with the gateway's tools), on
    this host: the plugins' settings are checked now, as assembling an agent would,
    so that a --plugin entry failing its own check is refused here too, and a bad
    table is exit 2 before anything listens or connects.
    """
    from lich.cli.common import CommandError, assemble, check_named_plugins
    from lich.config import ConfigError
    from lich.gateway.config import parse_gateway_config
    from lich.gateway.runner import gateway_agent_config

    settings = get_settings(ctx)
    if settings.yes:
        # --yes is "I am at this terminal and say yes to this run's calls"; a gateway's
        # calls come from chat users, whom nobody on this command line watches.
        ctx.exit(CommandError(
            "--yes does not apply to the gateway or a worker (it would approve every chat "
            "user's calls): a call that asks is approved in its chat (/approve ID) or by "
            "an [approvals] allow rule").report())
    try:
        built = assemble(settings, agent=False, service=True)
        gateway = parse_gateway_config(built.config.table("gateway"))
        problems = built.host.check_config(gateway_agent_config(built.config, gateway,
                                                                  built.host))
        check_named_plugins(settings, built.host)
        if problems:
            raise ConfigError(problems)
    except CommandError as exc:
        ctx.exit(exc.report())
    except ConfigError as exc:
        ctx.exit(CommandError(str(exc)).report())
    return built, gateway


@click.command("gateway")
@click.argument("platforms", nargs=-1)
@click.option("--host", "webhook_host", metavar="ADDRESS",
              help="Webhook bind address (default 127.0.0.1; others need LICH_GATEWAY_TOKEN).")
@click.option("--port", "webhook_port", type=click.IntRange(0, 65535),
              help="Webhook port (default 8089, or LICH_GATEWAY_PORT).")
@click.option("--grace", "grace_s", type=click.FloatRange(min=0), metavar="SECONDS",
              help="How long runs in flight may finish at shutdown (default 30).")
@config_options
@click.pass_context
def gateway_command(
    ctx: click.Context,
    platforms: tuple[str, ...],
    webhook_host: str | None,
    webhook_port: int | None,
    grace_s: float | None,
) -> None:
    """Serve the agent on chat platforms: webhook, telegram, discord, twitch.

    PLATFORMS default to `platforms` in the [gateway] config table (webhook).
    Each conversation is a session that survives restarts. SIGINT or SIGTERM
    stops taking messages, lets runs in flight finish (--grace), then exits 0.
    See docs/gateway.md.
    """
    import asyncio

    from lich.cli.common import CommandError, echo_error, freeze_startup_heap
    from lich.config import ConfigError
    from lich.gateway.config import with_overrides
    from lich.gateway.registry import GatewayError, UnknownPlatformError
    from lich.gateway.runner import run_gateway
    from lich.plugins import PluginLoadError

    built, gateway = assemble_gateway(ctx)
    changes: dict[str, Any] = {}
    env_port = os.environ.get("LICH_GATEWAY_PORT", "").strip()
    if webhook_port is None and env_port:
        if not env_port.isdigit() or not 0 <= int(env_port) <= 65535:
            ctx.exit(CommandError(
                f"LICH_GATEWAY_PORT must be a port number (0-65535), got {env_port!r}").report())
        webhook_port = int(env_port)
    if webhook_port is not None:
        changes["webhook_port"] = webhook_port
    if webhook_host:
        changes["webhook_host"] = webhook_host
    if grace_s is not None:
        changes["grace_s"] = grace_s
    if changes:
        gateway = with_overrides(gateway, **changes)
    freeze_startup_heap()
    try:
        code = asyncio.run(run_gateway(built.config, platforms, host=built.host, gateway=gateway))
    except (UnknownPlatformError, ConfigError, PluginLoadError) as exc:
        ctx.exit(CommandError(str(exc)).report())
    except GatewayError as exc:
        echo_error(str(exc))
        ctx.exit(1)
    ctx.exit(code)
