"""The provider kinds the builtin provider plugins register, as an agent would see them:
loaded through the plugin host by entry-point name, never imported by the tests."""

from __future__ import annotations

import functools

from lich.plugins import PluginHost
from lich.providers import ProviderRegistry

__all__ = ["builtin_provider_kinds"]


@functools.cache
def builtin_provider_kinds() -> ProviderRegistry:
    """A registry of the ``openai_compat``, ``anthropic`` and ``ollama`` kinds (shared:
    read it, do not register into it)."""
    host = PluginHost()
    host.load(["openai_compat", "anthropic", "ollama"])
    registry = ProviderRegistry()
    host.register_providers(registry)
    return registry
