"""The gateway: serve a lich agent on chat platforms.

The conversation bus (:class:`GatewayBus`) turns platform messages into agent
runs, one session per conversation. Platforms are plugins registered through
``lich_register_gateway_adapters``; the builtin ``gateway`` plugin
(:mod:`lich.gateway.plugin`) registers ``webhook``, ``telegram``,
``discord`` and ``twitch``. See ``docs/gateway.md``.

Names are imported lazily, so importing the package (and the plugin module)
stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lich.lazy import lazy_exports

if TYPE_CHECKING:
    from lich.gateway.bus import BusReply, GatewayBus, InboundMessage, MessageBus, cap_history
    from lich.gateway.config import (
        Allowlist,
        GatewayConfig,
        parse_gateway_config,
    )
    from lich.gateway.registry import (
        Adapter,
        AdapterContext,
        AdapterFactory,
        AdapterRegistry,
        GatewayError,
    )
    from lich.gateway.runner import GatewayRunner, run_gateway

_EXPORTS = {
    "Adapter": "lich.gateway.registry",
    "AdapterContext": "lich.gateway.registry",
    "AdapterFactory": "lich.gateway.registry",
    "AdapterRegistry": "lich.gateway.registry",
    "Allowlist": "lich.gateway.config",
    "BusReply": "lich.gateway.bus",
    "GatewayBus": "lich.gateway.bus",
    "GatewayConfig": "lich.gateway.config",
    "GatewayError": "lich.gateway.registry",
    "GatewayRunner": "lich.gateway.runner",
    "InboundMessage": "lich.gateway.bus",
    "MessageBus": "lich.gateway.bus",
    "cap_history": "lich.gateway.bus",
    "parse_gateway_config": "lich.gateway.config",
    "run_gateway": "lich.gateway.runner",
}

__all__ = [
    "Adapter",
    "AdapterContext",
    "AdapterFactory",
    "AdapterRegistry",
    "Allowlist",
    "BusReply",
    "GatewayBus",
    "GatewayConfig",
    "GatewayError",
    "GatewayRunner",
    "InboundMessage",
    "MessageBus",
    "cap_history",
    "parse_gateway_config",
    "run_gateway",
]


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)
