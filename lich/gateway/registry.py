"""Gateway platforms as registered by plugins: name → factory, attributed to a plugin.

``lich_register_gateway_adapters(registry)`` calls :meth:`AdapterRegistry.register`;
the plugin host sets :attr:`AdapterRegistry.current_plugin` around each
plugin's call (as for tools), so a plugin that fails is unloaded with
everything it registered.

An adapter is built by its factory from an :class:`AdapterContext` and only
has to implement :class:`Adapter`: ``start()`` returns once it is serving,
``stop()`` stops taking messages, lets the replies already being produced
go out, and closes its connections. An adapter with ``exclusive = True`` (a
poller, a single platform connection) must run in one process at a time: on
a bus that leases platforms (``nats``), a gateway serves it only while it
holds the platform's lease, and stands by otherwise.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from attrs import field, frozen

from lich.registry import Registry

if TYPE_CHECKING:
    from lich.gateway.bus import MessageBus
    from lich.gateway.config import GatewayConfig

__all__ = [
    "Adapter",
    "AdapterContext",
    "AdapterFactory",
    "AdapterRegistry",
    "GatewayError",
    "UnknownPlatformError",
]


class GatewayError(Exception):
    """An adapter cannot start (missing token, refused bind, bad settings); the message says why."""


class UnknownPlatformError(GatewayError):
    """A requested platform is not registered by any loaded plugin."""


class Adapter(Protocol):
    """One platform, serving the bus."""

    name: str

    async def start(self) -> None:
        """Begin serving; return once ready (bound, connected or polling).

        Raise :class:`GatewayError` when the adapter cannot run at all.
        """
        ...

    async def stop(self) -> None:
        """Stop taking messages, deliver the replies in flight, close connections."""
        ...


@frozen
class AdapterContext:
    """What a factory gets to build its adapter.

    ``settings`` is the platform's ``[gateway.<name>]`` table: a typed value
    for the builtin platforms, the raw mapping for third-party ones. ``env``
    is where tokens are read from (``os.environ`` unless a test says otherwise).
    """

    name: str
    bus: MessageBus
    config: GatewayConfig
    settings: Any
    env: Mapping[str, str] = field(factory=lambda: dict(os.environ))
    log: logging.Logger = field(factory=lambda: logging.getLogger("lich.gateway"))

    def secret(self, env_name: str) -> str:
        """The value of the environment variable ``env_name`` ('' when unset)."""
        return self.env.get(env_name, "").strip()


AdapterFactory: TypeAlias = Callable[[AdapterContext], Adapter]


class AdapterRegistry(Registry[AdapterFactory]):
    """Gateway platforms: name → factory, each attributed to the plugin that registered it."""

    what = "gateway_platform"

    def register(self, name: str, factory: AdapterFactory) -> None:
        """Register ``factory`` for platform ``name``.

        The first registration of a name wins. Third-party plugins run before
        the builtin ``gateway`` plugin, so one can replace a builtin platform;
        the later registration is reported (``duplicate_gateway_platform``) on
        its plugin's load report and skipped.

        :raises lich.registry.DuplicateNameError: (a ``ValueError``) for a
            duplicate outside the plugin host.
        :raises TypeError: for an empty name or a factory that is not callable.
        """
        if not callable(factory):
            raise TypeError(f"gateway adapter factory for {name!r} is not callable")
        self._add(name, factory)

    def create(self, context: AdapterContext) -> Adapter:
        """Build the adapter for ``context.name``; :class:`KeyError` if it is not registered."""
        factory = self.get(context.name)
        if factory is None:
            raise KeyError(context.name)
        return factory(context)
