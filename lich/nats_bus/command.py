"""The ``lich worker`` command (click), added by the ``nats`` plugin.

It takes the configuration flags of every ``lich`` command plus its own.
Importing this module is cheap (click only). Exit codes: 0 after a graceful
stop, 1 when the broker cannot be reached, 2 for a usage or configuration error.
"""

from __future__ import annotations

import click

from lich.cli.options import config_options

__all__ = ["worker_command"]


@click.command("worker")
@click.option("--concurrency", type=click.IntRange(min=1), metavar="N",
              help="Runs at once in this process (default [bus] concurrency, else one "
                   "per partition).")
@click.option("--grace", "grace_s", type=click.FloatRange(min=0), metavar="SECONDS",
              help="How long runs in flight may finish at shutdown (default [gateway] "
                   "grace_s, 30).")
@config_options
@click.pass_context
def worker_command(ctx: click.Context, concurrency: int | None, grace_s: float | None) -> None:
    """Run the gateway's messages from the nats bus ([bus] kind = "nats").

    Consumes every partition of the stream and runs each message with the
    gateway's agent; replies go back through the bus to the `lich gateway`
    that admitted them. Start as many as you need. SIGINT or SIGTERM lets
    runs in flight finish (--grace), then exits 0. See docs/cluster.md.
    """
    import asyncio

    from lich.cli.common import CommandError, echo_error
    from lich.config import ConfigError
    from lich.gateway.command import assemble_gateway
    from lich.gateway.config import with_overrides
    from lich.gateway.registry import GatewayError
    from lich.nats_bus.worker import run_worker

    built, gateway = assemble_gateway(ctx)  # as `lich gateway` does: every plugin checked
    if grace_s is not None:
        gateway = with_overrides(gateway, grace_s=grace_s)
    try:
        code = asyncio.run(run_worker(built.config, host=built.host, gateway=gateway,
                                      concurrency=concurrency))
    except ConfigError as exc:
        ctx.exit(CommandError(str(exc)).report())
    except GatewayError as exc:
        echo_error(str(exc))
        ctx.exit(1)
    ctx.exit(code)
