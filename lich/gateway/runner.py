"""Running the gateway: build the agent and the bus, start the adapters, stop gracefully.

:class:`GatewayRunner` does the work in steps (tests drive it directly);
:func:`run_gateway` is what ``lich gateway`` calls: start, wait for SIGINT or
SIGTERM, then stop taking messages, give runs in flight ``grace_s`` to
finish (then cancel them — their transcripts stay valid), close every
adapter and exit 0. A second signal cuts the grace period short.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lich.config import LichConfig, config_with
from lich.gateway.bus import GatewayBus, MessageBus, bus_kind
from lich.gateway.config import GatewayConfig, parse_gateway_config
from lich.gateway.formatting import log_event, redact
from lich.gateway.registry import (
    Adapter,
    AdapterContext,
    AdapterRegistry,
    GatewayError,
    UnknownPlatformError,
)
from lich.gateway.signals import stop_on_signals

if TYPE_CHECKING:
    from lich.agent import Agent
    from lich.plugins import PluginHost
    from lich.types import ChatFn

__all__ = ["GatewayRunner", "gateway_agent_config", "make_bus", "run_gateway"]

log = logging.getLogger("lich.gateway")


def gateway_agent_config(config: LichConfig, gateway: GatewayConfig,
                         host: PluginHost | None = None) -> LichConfig:
    """The agent configuration of the gateway: the tools narrowed to ``[gateway] tools``,
    and retries spread with jitter unless the config says otherwise.

    The gateway's list never widens what the main config allows: with a
    ``tools_enabled`` list there, the gateway gets the intersection. Private
    files are always protected (``protect_private_files = false`` is for the
    CLI's own runs only): a chat user must never read another conversation's
    transcript, the config or a ``.env`` through the tools. Hundreds of
    conversations retrying a rate-limited provider at the same instants would be
    limited again together, so ``retry_jitter`` defaults to ``"full"`` here. No one
    is at a terminal to approve a call: ``[approvals] mode`` defaults to
    ``"deny-unlisted"`` (read-only tools and what the allow rules name run, the
    rest is refused), unless the config sets a mode — when a plugin of ``host`` claims
    ``[approvals]`` (without ``host``: when ``approvals`` is in its plugin list; a table
    nobody claims would be an error).
    """
    changes: dict[str, Any] = {"protect_private_files": True}
    if config.retry_jitter is None:
        changes["retry_jitter"] = "full"
    # Only for a table some plugin claims: without one it would be an error nobody made.
    # No host (a caller building the config alone): the plugin list says.
    claimed = ("approvals" in host.config_tables().tables() if host is not None
               else "approvals" in config.plugins)
    if claimed and "mode" not in config.table("approvals"):
        approvals = {**config.table("approvals"), "mode": "deny-unlisted"}
        changes["tables"] = {**config.tables, "approvals": approvals}
    if gateway.tools is not None:
        tools = gateway.tools
        if config.tools_enabled is not None:
            tools = tuple(t for t in tools if t in config.tools_enabled)
        changes["tools_enabled"] = tools
    return config_with(config, **changes)


def make_bus(host: PluginHost, config: LichConfig, local: GatewayBus) -> MessageBus | None:
    """``lich_make_bus`` (the gateway's own hook, called as its row in
    :data:`lich.gateway.hookspecs.HOOK_POLICIES` says): the first answer, or ``None``
    (use ``local``).

    :raises lich.config.ConfigError: a bus plugin raised (its own ``ConfigError`` as
        it is; anything else named with the plugin), or answered with something that
        is not a bus.
    """
    return host.call_hook_sync(  # type: ignore[no-any-return]
        "lich_make_bus", config=config, local=local).value


class GatewayRunner:
    """The gateway's parts and their lifecycle.

    :param config: the effective lich configuration (its ``gateway`` table is parsed here).
    :param platforms: platforms to start; ``[gateway] platforms`` when empty.
    :param host: a plugin host with the plugins loaded (made from the config by default).
    :param chat: a chat function to use instead of the configured providers (tests).
    :param env: where tokens are read (``os.environ`` by default).
    :param gateway: an already parsed ``[gateway]`` table (overrides ``config.table("gateway")``).
    """

    def __init__(
        self,
        config: LichConfig,
        platforms: Sequence[str] = (),
        *,
        host: PluginHost | None = None,
        chat: ChatFn | None = None,
        env: Mapping[str, str] | None = None,
        gateway: GatewayConfig | None = None,
    ) -> None:
        self.config = config
        self.gateway = (gateway if gateway is not None
                        else parse_gateway_config(config.table("gateway")))
        self.requested = tuple(dict.fromkeys(p.strip() for p in platforms if p.strip()))
        self.host = host
        self.chat = chat
        self.env: Mapping[str, str] = dict(os.environ) if env is None else env
        self.registry = AdapterRegistry()
        self.agent: Agent | None = None
        #: The bus the adapters hand messages to (``local`` itself unless a plugin's
        #: ``lich_make_bus`` made another).
        self.bus: MessageBus | None = None
        #: The in-process bus, which runs messages here.
        self.local: GatewayBus | None = None
        self.adapters: dict[str, Adapter] = {}
        self.failed: dict[str, str] = {}
        #: Single-connection platforms waiting for their lease (another process serves them).
        self.standby: set[str] = set()
        self._supervisors: dict[str, asyncio.Task[None]] = {}

    def adapter(self, name: str) -> Any:
        """The started adapter of platform ``name``."""
        return self.adapters[name]

    async def start(self) -> None:
        """Load the adapters, build the agent and bus, start every requested platform.

        :raises GatewayError: an unknown platform was requested, or none could start.
        :raises lich.config.ConfigError: the configuration is unusable (e.g. no model).
        """
        from lich.agent import Agent, load_plugins

        if self.host is None:
            self.host = load_plugins(self.config)
        # The gateway's own hook (lich.gateway.hookspecs), called as lich calls its own.
        self.host.register_into("lich_register_gateway_adapters", self.registry)
        names = self.requested or self.gateway.platforms
        unknown = [n for n in names if not self.registry.has(n)]
        if unknown:
            available = ", ".join(self.registry.names()) or "none (is the gateway plugin enabled?)"
            raise UnknownPlatformError(
                f"unknown gateway platform{'s' if len(unknown) > 1 else ''}: "
                f"{', '.join(unknown)} (available: {available})"
            )
        if not names:
            raise UnknownPlatformError(
                "no gateway platforms requested ([gateway] platforms is empty)"
            )
        for table in self.gateway.extra:
            if not self.registry.has(table):
                log_event(log, logging.WARNING, "unknown_platform_table",
                          table=f"gateway.{table}", detail="no adapter of that name is registered")

        # A bus spread over processes may run every message elsewhere (an ingress runs
        # no model): whether a model is needed here is known once the bus is made.
        self.agent = Agent(gateway_agent_config(self.config, self.gateway, self.host),
                           host=self.host,
                           chat=self.chat,
                           model_optional=bus_kind(self.config.table("bus")) != "memory")
        try:
            # A database store that is unreachable or too new fails the start, not the
            # first conversation (its schema is migrated here too).
            await asyncio.to_thread(self.agent.sessions.prepare)
        except OSError as exc:
            await self._close_agent()
            raise GatewayError(f"the session store is not usable: {redact(str(exc))}") from exc
        if self.gateway.tools is not None:
            absent = [t for t in self.gateway.tools if not self.agent.tools.has(t)]
            if absent:
                log_event(log, logging.WARNING, "tools_unavailable", tools=",".join(absent),
                          detail="listed in [gateway] tools but no loaded plugin provides them")
        if self.agent.tools.has("terminal"):
            # A shell reads whatever the OS user can: no path policy confines it.
            log_event(log, logging.WARNING, "terminal_unconfined",
                      detail="terminal is enabled: chat users can read lich's files, other "
                             "conversations' transcripts and secret files through it")
        self.local = GatewayBus.from_config(self.agent, self.gateway)
        try:
            self.bus = self._make_bus(self.local)
            self._check_model(self.bus, self.agent)
            await self.bus.start()
        except BaseException:
            self.bus = None
            await self._close_agent()
            raise
        # A bus spread over processes may lease single-connection platforms (nats does).
        lease_for = getattr(self.bus, "lease", None)
        log_event(log, logging.INFO, "gateway_starting", platforms=",".join(names),
                  pid=os.getpid(), tools=",".join(self.agent.tools.names()) or "none",
                  sessions=self.agent.sessions.describe())

        for name in names:
            context = AdapterContext(
                name=name,
                bus=self.bus,
                config=self.gateway,
                settings=self.gateway.settings_for(name),
                env=self.env,
                log=logging.getLogger("lich.gateway"),
            )
            try:
                adapter = self.registry.create(context)
                if lease_for is not None and getattr(adapter, "exclusive", False):
                    # One process at a time: serve while holding the platform's lease,
                    # stand by while another process does.
                    lease = await lease_for(name)
                    self.standby.add(name)
                    self._supervisors[name] = asyncio.create_task(
                        self._serve_exclusive(context, adapter, lease),
                        name=f"lich-lease-{name}")
                    continue
                await adapter.start()
            except Exception as exc:
                reason = redact(str(exc) or type(exc).__name__)
                self.failed[name] = reason
                log_event(log, logging.ERROR, "adapter_failed", platform=name, error=reason)
                continue
            self.adapters[name] = adapter
        if not self.adapters and not self._supervisors:
            await self.bus.drain(0)
            await self._close_agent()
            details = "; ".join(f"{n}: {why}" for n, why in self.failed.items())
            raise GatewayError(f"no gateway platform could start ({details})")
        log_event(log, logging.INFO, "gateway_ready", platforms=",".join(self.adapters),
                  standby=",".join(sorted(self.standby)) or "none")

    async def _serve_exclusive(self, context: AdapterContext, adapter: Adapter | None,
                               lease: Any) -> None:
        """Run a single-connection platform whenever this process holds its lease."""
        name = context.name
        while True:
            await lease.acquire()
            self.standby.discard(name)
            try:
                if adapter is None:
                    adapter = self.registry.create(context)
                await adapter.start()
            except Exception as exc:
                reason = redact(str(exc) or type(exc).__name__)
                self.failed[name] = reason
                log_event(log, logging.ERROR, "adapter_failed", platform=name, error=reason)
                await lease.release()
                return
            self.adapters[name] = adapter
            log_event(log, logging.INFO, "adapter_serving", platform=name, lease="held")
            await lease.lost.wait()
            # Another process may take it over now: stop at once, then stand by again.
            self.adapters.pop(name, None)
            await self._stop_adapter(name, adapter)
            adapter = None
            self.standby.add(name)

    @staticmethod
    def _check_model(bus: MessageBus, agent: Agent) -> None:
        """Fail the start when this process runs messages and its model is unusable.

        :raises lich.config.ConfigError: the model's problem, as a run would report it.
        """
        problem = agent.model_problem
        if problem is None:
            return
        if getattr(bus, "runs_messages", True):
            raise problem
        log_event(log, logging.INFO, "model_not_configured", problem="; ".join(problem.problems),
                  detail="this process runs no model: its bus hands every message to workers")

    def _make_bus(self, local: GatewayBus) -> MessageBus:
        """The bus of ``[bus] kind``: a plugin's (``lich_make_bus``), or ``local`` for memory.

        :raises lich.config.ConfigError: ``[bus]`` is malformed, a bus plugin
            failed, or no loaded plugin makes the kind asked for.
        """
        from lich.config import ConfigError

        assert self.host is not None
        kind = bus_kind(self.config.table("bus"))
        made = make_bus(self.host, self.config, local)
        if made is not None:
            log_event(log, logging.INFO, "bus_ready", kind=kind, bus=type(made).__name__)
            return made
        if kind != "memory":
            raise ConfigError([
                f"$.bus.kind: no loaded plugin makes a bus of kind {kind!r} "
                f"(is the plugin enabled? e.g. plugins = [\"+{kind}\"])"
            ])
        return local

    async def stop(self, grace_s: float | None = None) -> bool:
        """Stop taking messages, let runs finish within ``grace_s``, cancel the rest, close.

        Returns whether every run finished within the grace period.
        """
        grace = self.gateway.grace_s if grace_s is None else grace_s
        log_event(log, logging.INFO, "gateway_stopping", grace_s=grace,
                  in_flight=self.bus.in_flight if self.bus else 0)
        clean = True
        for task in self._supervisors.values():
            task.cancel()  # no more taking over; the adapters serving now stop below
        await asyncio.gather(*self._supervisors.values(), return_exceptions=True)
        self._supervisors.clear()
        if self.bus is not None:
            self.bus.close()
            results = await asyncio.gather(
                self.bus.drain(grace),
                *(self._stop_adapter(name, a) for name, a in self.adapters.items()),
            )
            clean = bool(results[0])
        self.adapters.clear()
        await self._close_agent()
        log_event(log, logging.INFO, "gateway_stopped", clean=clean)
        return clean

    async def _stop_adapter(self, name: str, adapter: Adapter) -> None:
        try:
            await adapter.stop()
        except Exception as exc:
            log_event(log, logging.WARNING, "adapter_stop_failed", platform=name,
                      error=redact(f"{type(exc).__name__}: {exc}"))

    async def _close_agent(self) -> None:
        if self.agent is not None:
            await self.agent.aclose()

    def cancel_runs(self) -> None:
        """Cut the grace period short: cancel every run now."""
        if self.bus is not None:
            self.bus.cancel_runs()


async def run_gateway(
    config: LichConfig,
    platforms: Sequence[str] = (),
    *,
    host: PluginHost | None = None,
    chat: ChatFn | None = None,
    env: Mapping[str, str] | None = None,
    gateway: GatewayConfig | None = None,
    stop: asyncio.Event | None = None,
    install_signals: bool = True,
) -> int:
    """Serve until SIGINT/SIGTERM (or ``stop`` is set), then shut down gracefully.

    Returns 0 after a graceful stop.

    :raises GatewayError: an unknown platform was requested, or none could start.
    """
    runner = GatewayRunner(config, platforms, host=host, chat=chat, env=env, gateway=gateway)
    try:
        await runner.start()
    except UnknownPlatformError:
        raise  # a usage error: the command prints it
    except GatewayError as exc:
        log_event(log, logging.ERROR, "gateway_failed", error=str(exc))
        raise
    stop = stop or asyncio.Event()
    async with stop_on_signals(stop, runner.cancel_runs, install=install_signals):
        await stop.wait()
        await runner.stop()
    return 0
