"""The ``lich gateway [PLATFORM...]`` command (click).

Importing this module is cheap (click only); the gateway itself is imported
when the command runs.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import click

__all__ = ["gateway_command", "setup_logging"]

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
           "warning": logging.WARNING, "error": logging.ERROR}


def setup_logging(level: str) -> None:
    """Log lich's structured lines to stderr, one per event."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s level=%(levelname)s %(message)s"))
    logger = logging.getLogger("lich")
    # Replace (not add to) what an earlier call installed, so lines are not doubled.
    for old in [h for h in logger.handlers if getattr(h, "_lich_gateway", False)]:
        logger.removeHandler(old)
    handler._lich_gateway = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(_LEVELS.get(level, logging.INFO))
    logger.propagate = False


def _root_param(ctx: click.Context, *names: str) -> Any:
    # The root `lich` group may own --config / --work-dir; use them when ours are not given.
    root = ctx.find_root()
    for name in names:
        value = root.params.get(name)
        if value:
            return value
    return None


@click.command("gateway")
@click.argument("platforms", nargs=-1)
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="Config file (TOML or JSON).")
@click.option("--work-dir", type=click.Path(file_okay=False),
              help="Work directory (tools, sessions and .lich/config.toml are found here).")
@click.option("--host", "webhook_host", help="Webhook bind address (default 127.0.0.1).")
@click.option("--port", "webhook_port", type=click.IntRange(0, 65535),
              help="Webhook port (default 8089, or LICH_GATEWAY_PORT).")
@click.option("--grace", "grace_s", type=click.FloatRange(min=0),
              help="Seconds runs in flight get to finish at shutdown (default 30).")
@click.option("--plugin", "plugins", multiple=True,
              help="Load this plugin too (entry-point name, module or .py path). Repeatable.")
@click.pass_context
def gateway_command(
    ctx: click.Context,
    platforms: tuple[str, ...],
    config_path: str | None,
    work_dir: str | None,
    webhook_host: str | None,
    webhook_port: int | None,
    grace_s: float | None,
    plugins: tuple[str, ...],
) -> None:
    """Serve the agent on chat platforms: webhook, telegram, discord, twitch.

    PLATFORMS default to [gateway] platforms in the config (webhook). Each
    conversation is a session that survives restarts. SIGINT/SIGTERM stop
    taking messages, let runs in flight finish (--grace), then exit 0.
    """
    import asyncio

    from lich.config import ConfigError, load_config
    from lich.gateway.config import parse_gateway_config, with_overrides
    from lich.gateway.registry import GatewayError
    from lich.gateway.runner import run_gateway

    config_path = config_path or _root_param(ctx, "config_path", "config")
    work_dir = work_dir or _root_param(ctx, "work_dir")
    flags: dict[str, Any] = {"work_dir": work_dir}
    if plugins:
        flags["plugins"] = list(plugins)
    try:
        loaded = load_config(work_dir=work_dir, config_path=config_path, flags=flags)
        gateway = parse_gateway_config(loaded.config.gateway)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    changes: dict[str, Any] = {}
    env_port = os.environ.get("LICH_GATEWAY_PORT", "").strip()
    if webhook_port is None and env_port:
        if not env_port.isdigit() or not 0 <= int(env_port) <= 65535:
            raise click.ClickException(f"LICH_GATEWAY_PORT must be a port number, got {env_port!r}")
        webhook_port = int(env_port)
    if webhook_port is not None:
        changes["webhook_port"] = webhook_port
    if webhook_host:
        changes["webhook_host"] = webhook_host
    if grace_s is not None:
        changes["grace_s"] = grace_s
    if changes:
        gateway = with_overrides(gateway, **changes)
    setup_logging(loaded.config.log_level)
    try:
        code = asyncio.run(run_gateway(loaded.config, platforms, gateway=gateway))
    except (GatewayError, ConfigError) as exc:
        click.echo(f"lich gateway: {exc}", err=True)
        ctx.exit(1)
    except KeyboardInterrupt:  # a signal arrived before the handlers were installed
        ctx.exit(130)
    ctx.exit(code)
