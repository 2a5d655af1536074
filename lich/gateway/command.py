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
from typing import Any

import click

from lich._cli_options import config_options, get_settings

__all__ = ["gateway_command"]


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

    from lich._cli_app import (
        EXIT_USAGE,
        echo_error,
        host_for,
        load_settings_config,
        setup_logging,
        warn_plugin_failures,
    )
    from lich.config import ConfigError
    from lich.gateway.config import parse_gateway_config, with_overrides
    from lich.gateway.registry import GatewayError, UnknownPlatformError
    from lich.gateway.runner import run_gateway
    from lich.plugins import PluginLoadError

    settings = get_settings(ctx)
    try:
        config = load_settings_config(settings).config
        gateway = parse_gateway_config(config.gateway)
    except ConfigError as exc:
        echo_error(str(exc))
        ctx.exit(EXIT_USAGE)
    changes: dict[str, Any] = {}
    env_port = os.environ.get("LICH_GATEWAY_PORT", "").strip()
    if webhook_port is None and env_port:
        if not env_port.isdigit() or not 0 <= int(env_port) <= 65535:
            echo_error(f"LICH_GATEWAY_PORT must be a port number (0-65535), got {env_port!r}")
            ctx.exit(EXIT_USAGE)
        webhook_port = int(env_port)
    if webhook_port is not None:
        changes["webhook_port"] = webhook_port
    if webhook_host:
        changes["webhook_host"] = webhook_host
    if grace_s is not None:
        changes["grace_s"] = grace_s
    if changes:
        gateway = with_overrides(gateway, **changes)

    setup_logging(settings.log_level or config.log_level, service=True)
    host = host_for(settings, config)
    if config.strict_plugins and host.failures:
        echo_error(str(PluginLoadError(host.failures)))
        ctx.exit(EXIT_USAGE)
    warn_plugin_failures(host)
    try:
        code = asyncio.run(run_gateway(config, platforms, host=host, gateway=gateway))
    except (UnknownPlatformError, ConfigError, PluginLoadError) as exc:
        echo_error(str(exc))
        ctx.exit(EXIT_USAGE)
    except GatewayError as exc:
        echo_error(str(exc))
        ctx.exit(1)
    ctx.exit(code)
