"""The ``lich worker`` and ``lich cluster status`` commands (click), added by the ``nats`` plugin.

They take the configuration flags of every ``lich`` command plus their own.
Importing this module is cheap (click only). Exit codes: 0 after a graceful
stop (``worker``) or a report (``cluster status``), 1 when the broker cannot be
reached, 2 for a usage or configuration error.
"""

from __future__ import annotations

from typing import Any

import click

from lich.cli.options import config_options, json_option, setup_options

__all__ = ["cluster_group", "worker_command"]


@click.command("worker")
@click.option("--concurrency", type=click.IntRange(min=1), metavar="N",
              help="Runs at once in this process (default [bus] concurrency, else one "
                   "per partition).")
@click.option("--grace", "grace_s", type=click.FloatRange(min=0), metavar="SECONDS",
              help="How long runs in flight may finish at shutdown (default [gateway] "
                   "grace_s, 30).")
@click.option("--health", metavar="HOST:PORT",
              help="Serve GET /livez and /readyz there (default [bus] health_listen).")
@config_options
@click.pass_context
def worker_command(ctx: click.Context, concurrency: int | None, grace_s: float | None,
                   health: str | None) -> None:
    """Run the gateway's messages from the nats bus ([bus] kind = "nats").

    Consumes every partition of the stream and runs each message with the
    gateway's agent; replies go back through the bus to the `lich gateway`
    that admitted them. Start as many as you need. SIGINT or SIGTERM lets
    runs in flight finish (--grace), then exits 0. With --health, /livez
    answers while the process runs and /readyz says whether it takes
    messages. See docs/cluster.md.
    """
    import asyncio

    from lich.cli.common import CommandError, echo_error, freeze_startup_heap
    from lich.config import ConfigError
    from lich.gateway.command import assemble_gateway
    from lich.gateway.config import with_overrides
    from lich.gateway.registry import GatewayError
    from lich.nats_bus.settings import parse_listen
    from lich.nats_bus.worker import run_worker

    if health is not None:
        try:
            parse_listen(health)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--health") from None
    built, gateway = assemble_gateway(ctx)  # as `lich gateway` does: every plugin checked
    if grace_s is not None:
        gateway = with_overrides(gateway, grace_s=grace_s)
    freeze_startup_heap()
    try:
        code = asyncio.run(run_worker(built.config, host=built.host, gateway=gateway,
                                      concurrency=concurrency, health=health))
    except ConfigError as exc:
        ctx.exit(CommandError(str(exc)).report())
    except GatewayError as exc:
        echo_error(str(exc))
        ctx.exit(1)
    ctx.exit(code)


@click.group("cluster")
def cluster_group() -> None:
    """The nats cluster: its stream, workers and leases ([bus] kind = "nats")."""


@cluster_group.command("status")
@setup_options
@json_option()
@click.option("--store-timeout", "store_timeout_s", type=click.FloatRange(min=0.1),
              default=10.0, show_default=True, metavar="SECONDS",
              help="How long the session store may take to answer.")
@click.pass_context
def cluster_status_command(ctx: click.Context, store_timeout_s: float) -> None:
    """Stream depth per partition, the consumers, the processes seen, leases, the store.

    Reads what the broker knows (nothing is changed): each partition's messages
    and its consumer's pending, ack-pending and redelivered counts; every
    ingress and worker alive within [bus] lease_ttl_s (host, pid, concurrency,
    in flight, started, last seen); who holds each single-connection platform;
    and whether the session store answers a read. Exit 1 when the broker
    cannot be reached. See docs/cluster.md.
    """
    from lich.cli.common import CommandError, echo_error, host_for, quiet_plugin_log
    from lich.cli.options import get_settings
    from lich.cli.output import load_or_report
    from lich.config import ConfigError
    from lich.gateway.registry import GatewayError
    from lich.nats_bus.settings import nats_bus_settings_of
    from lich.sessions import open_session_store

    settings = get_settings(ctx)
    loaded = load_or_report(settings)
    if loaded is None:
        ctx.exit(2)
    config = loaded.config
    try:
        bus = nats_bus_settings_of(config, "lich cluster status reads")
    except ConfigError as exc:
        ctx.exit(CommandError(str(exc)).report())
    try:
        from lich.nats_bus.status import gather, probe_store
    except ImportError as exc:
        ctx.exit(CommandError(f"lich cluster status needs nats-py ({exc.name or exc}): "
                              "pip install 'lich-agent[nats]'").report())

    def open_store() -> Any:
        with quiet_plugin_log():
            return open_session_store(config, host_for(settings, config))

    import asyncio
    import os

    token = os.environ.get(bus.token_env, "").strip()
    store = probe_store(open_store, store_timeout_s)
    try:
        status = asyncio.run(gather(bus, token, store))
    except GatewayError as exc:
        echo_error(str(exc))
        ctx.exit(1)
    if settings.json:
        from lich.cli.output import print_json

        print_json(status)
    else:
        _print_status(status)
    ctx.exit(0)


def _ago(ts: Any, now: float) -> str:
    return f"{max(0.0, now - ts):.0f}s ago" if isinstance(ts, int | float) else ""


def _print_status(status: dict[str, Any]) -> None:
    """The human report: a few summary lines, then a table per section."""
    import time

    from rich.table import Column, Table

    from lich.cli.output import add_row, out_console, print_table

    console = out_console()
    now = time.time()
    broker = status["broker"]
    stream = status["stream"]
    store = status["session_store"]
    console.print(f"broker   {broker['url']} (nats-server {broker['version']})",
                  markup=False, highlight=False)
    if stream is None:
        console.print("stream   absent (no lich gateway or worker has started on this broker)",
                      markup=False)
    else:
        console.print(f"stream   {stream['name']}: {stream['messages']} messages, "
                      f"{stream['partitions']} partitions", markup=False)
    where = store["store"] or "session store"
    state = "reachable" if store["reachable"] else f"UNREACHABLE: {store['error']}"
    console.print(f"store    {where}: {state}", markup=False)

    if status["partitions"]:
        table = Table(*(Column(h, justify="right", no_wrap=True) for h in (
            "partition", "messages", "pending", "ack pending", "redelivered",
            "pulls waiting")), box=None, pad_edge=False)
        for row in status["partitions"]:
            cells = [row["partition"], row["messages"]]
            if row["consumer"]:
                cells += [row["pending"], row["ack_pending"], row["redelivered"],
                          row["waiting_pulls"]]
            else:
                cells += ["no consumer", "", "", ""]
            add_row(table, *(str(c) for c in cells))
        console.print()
        print_table(console, table)

    console.print()
    processes = status["processes"]
    if not processes:
        console.print("no ingress or worker seen", markup=False)
    else:
        table = Table(*(Column(h, no_wrap=True) for h in (
            "role", "host", "pid", "concurrency", "in flight", "started", "last seen",
            "state")), box=None, pad_edge=False)
        for p in processes:
            started = (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(p["started"]))
                       if isinstance(p.get("started"), int | float) else "")
            add_row(table, str(p.get("role", "")), str(p.get("host", "")), str(p.get("pid", "")),
                    "" if p.get("concurrency") is None else str(p["concurrency"]),
                    str(p.get("in_flight", "")), started, _ago(p.get("last_seen"), now),
                    str(p.get("state", "")))
        print_table(console, table)

    by_id = {p.get("id"): p for p in processes}
    if status["leases"]:
        console.print()
        table = Table(Column("lease", no_wrap=True), Column("held by", no_wrap=True),
                      box=None, pad_edge=False)
        for lease in status["leases"]:
            holder = by_id.get(lease["holder"])
            who = (f"{holder.get('host')} pid {holder.get('pid')}" if holder is not None
                   else f"process {lease['holder']} (not seen)")
            add_row(table, lease["lease"], who)
        print_table(console, table)
