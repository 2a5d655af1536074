"""The gateway's own hook specifications, and their rows of the policy table:
platforms and buses.

The builtin ``gateway`` plugin adds them (``lich_add_hookspecs``) and calls
them (:mod:`lich.gateway.runner`) through the host's one caller, as any plugin
owns the hooks it defines; the core knows neither. A plugin that implements them
without the ``gateway`` plugin loaded fails to load, naming the hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lich.hooks import hookspec
from lich.plugins.policy import HookPolicy, registration

if TYPE_CHECKING:
    from lich.config import LichConfig
    from lich.gateway.bus import GatewayBus, MessageBus
    from lich.gateway.registry import AdapterRegistry

__all__ = ["HOOK_POLICIES", "lich_make_bus", "lich_register_gateway_adapters"]

_BUS_METHODS = ("submit", "handle", "start", "drain", "close", "cancel_runs", "park", "parked")


def _bus(answer: Any) -> str | None:
    missing = [name for name in _BUS_METHODS if not callable(getattr(answer, name, None))]
    return ", ".join(missing) or None


@hookspec
def lich_register_gateway_adapters(registry: AdapterRegistry) -> None:
    """Add gateway platforms.

    :param registry: call ``registry.register(name, factory)``; ``factory``
        takes a :class:`lich.gateway.AdapterContext` and returns a
        :class:`lich.gateway.Adapter`. A name registered twice is reported
        (``duplicate_gateway_platform: <name> (already registered by
        <plugin>); skipped``) and the later one skipped, so a third-party
        plugin (registered first) can replace a builtin platform.

    Fires when ``lich gateway`` starts. The builtin ``gateway`` plugin
    registers ``webhook``, ``telegram``, ``discord`` and ``twitch`` this way.
    """


@hookspec(firstresult=True)
def lich_make_bus(config: LichConfig, local: GatewayBus) -> MessageBus | None:
    """Return the bus that carries the gateway's inbound messages to their runs.

    :param config: the effective configuration (``config.table("bus")`` is the raw
        ``[bus]`` table; its ``kind`` says which bus is wanted, ``"memory"``
        by default).
    :param local: the in-process bus, which runs messages in this process
        with the gateway's agent and limits (``[gateway] queue_limit``,
        ``history_cap``). A bus that moves messages elsewhere (a broker) hands
        them to it where they are run.
    :return: a :class:`lich.gateway.MessageBus` when this plugin makes the
        bus ``[bus] kind`` names, else ``None``.

    ``firstresult``: the first non-``None`` answer wins. With none, the
    gateway uses ``local`` itself — today's bus, at no added cost — when
    ``kind`` is ``"memory"``, and refuses to start otherwise (no loaded plugin
    makes that kind). The builtin ``nats`` plugin answers for ``kind =
    "nats"``. A bus must pass :class:`lich.testing.contracts.BusContract`.
    Fires when ``lich gateway`` starts, after the agent is built; a plugin
    that raises stops the gateway with a configuration error naming it.
    """


#: How the host calls these hooks (:mod:`lich.plugins.policy`), added with the specs.
HOOK_POLICIES: tuple[HookPolicy, ...] = (
    registration("lich_register_gateway_adapters"),
    registration(
        "lich_make_bus", answers={object: "stop"}, check=_bus,
        config_error="raise", on_error="raise",
        failed="$.bus: {hook} of plugin {plugin!r} failed: {error}",
        # The gateway would fail at its first message, far from the cause.
        on_bad_answer="raise",
        bad_answer="$.bus: {hook} of plugin {plugin!r} returned {type}, not a bus "
                   "(it has no {problem})"),
)
