"""``lich worker``: a process that runs the gateway's messages from the nats bus.

It consumes every partition of ``[bus]`` (``consume`` is implied), runs each
message with the gateway's agent (the ``[gateway]`` tools and limits) exactly
as ``lich gateway`` would, and sends the replies back through the bus to the
ingress that admitted them. The ingress (``lich gateway`` with ``[bus]
consume`` left false) holds the platform connections; any number of workers
share the partitions, one message of a partition in flight across all of
them. SIGINT or SIGTERM stops taking messages, lets runs finish within
``grace_s``, then cancels the rest; a second signal cancels at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import attrs

from lich.gateway.formatting import log_event
from lich.gateway.signals import stop_on_signals

if TYPE_CHECKING:
    from lich.config import LichConfig
    from lich.gateway.config import GatewayConfig
    from lich.nats_bus.health import HealthServer
    from lich.plugins import PluginHost
    from lich.types import ChatFn

__all__ = ["run_worker"]

log = logging.getLogger("lich.gateway")


async def run_worker(
    config: LichConfig,
    *,
    host: PluginHost | None = None,
    gateway: GatewayConfig | None = None,
    concurrency: int | None = None,
    chat: ChatFn | None = None,
    stop: asyncio.Event | None = None,
    install_signals: bool = True,
    health: str | None = None,
) -> int:
    """Run messages from the nats bus until SIGINT/SIGTERM (or ``stop``); 0 after a clean stop.

    :param concurrency: runs at once in this process (``[bus] concurrency``, else one
        per partition).
    :param chat: a chat function instead of the configured providers (tests).
    :param health: ``HOST:PORT`` of the liveness and readiness endpoints (``[bus]
        health_listen`` by default; none when neither is set).
    :raises lich.config.ConfigError: ``[bus]`` is not the nats bus, or is wrong.
    :raises lich.gateway.GatewayError: the broker cannot be reached.
    """
    from lich.agent import Agent, load_plugins
    from lich.gateway.bus import GatewayBus
    from lich.gateway.config import parse_gateway_config
    from lich.gateway.runner import gateway_agent_config
    from lich.nats_bus.bus import NatsBus

    stop = stop or asyncio.Event()
    bus: NatsBus | None = None

    def cancel_runs() -> None:
        if bus is not None:
            bus.cancel_runs()

    # The signals are the worker's from here on, its start-up included (plugins, the
    # store, the broker: seconds when one is slow). Without a handler meanwhile, a
    # worker that is PID 1 of a container (the compose image's entrypoint) never sees
    # a SIGTERM at all — the kernel drops what PID 1 has no handler for — and runs on
    # until the runtime's stop timeout kills it. A stop during the start-up ends it
    # there, with nothing in flight.
    async with stop_on_signals(stop, cancel_runs, install=install_signals):
        await asyncio.sleep(0)  # a signal that came while the handlers went in
        if stop.is_set():
            log_event(log, logging.INFO, "worker_stopped", clean=True, started=False)
            return 0
        from lich.nats_bus.settings import nats_bus_settings_of

        settings = nats_bus_settings_of(config, "lich worker runs the messages of")
        settings = attrs.evolve(settings, consume=True,
                                concurrency=concurrency or settings.concurrency,
                                health_listen=health or settings.health_listen)
        gateway = (gateway if gateway is not None
                   else parse_gateway_config(config.table("gateway")))
        host = host if host is not None else load_plugins(config)
        agent = Agent(gateway_agent_config(config, gateway, host), host=host, chat=chat)
        probes: HealthServer | None = None
        try:
            bus = NatsBus(settings, GatewayBus.from_config(agent, gateway))
            bus.role = "worker"
            if settings.health_listen is not None:
                # Before the broker: liveness answers (and readiness says why not)
                # meanwhile.
                from lich.nats_bus.health import HealthServer
                from lich.nats_bus.settings import parse_listen

                probes = HealthServer(bus, agent.sessions, *parse_listen(settings.health_listen))
                await probes.start()
            if not await _unless_stopped(bus.start(), stop):
                # Connecting still: whatever it opened is closed; nothing ran.
                await bus.drain(0)
                log_event(log, logging.INFO, "worker_stopped", clean=True, started=False)
                return 0
            log_event(log, logging.INFO, "worker_ready", pid=os.getpid(),
                      partitions=settings.partitions, concurrency=bus.concurrency,
                      tools=",".join(agent.tools.names()) or "none")
            await stop.wait()
            log_event(log, logging.INFO, "worker_stopping", grace_s=gateway.grace_s,
                      in_flight=bus.in_flight)
            clean = await bus.drain(gateway.grace_s)
            log_event(log, logging.INFO, "worker_stopped", clean=clean)
            return 0
        finally:
            if probes is not None:
                await probes.stop()
            await agent.aclose()


async def _unless_stopped(starting: Coroutine[Any, Any, None], stop: asyncio.Event) -> bool:
    """Await ``starting`` unless ``stop`` is set first (then it is cancelled): whether
    it finished. Its own failure propagates."""
    task = asyncio.ensure_future(starting)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        stopped.cancel()
    if task.done():
        task.result()
        return True
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return False
