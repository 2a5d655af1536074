"""Provider kinds as registered by plugins, and the chat function built from them.

The core knows no provider by name: ``openai_compat``, ``anthropic`` and
``ollama`` are kinds that their plugins register through
``lich_register_providers``; the failover router is whatever
``lich_make_router`` returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

from lich.config import ConfigError, LichConfig, ProviderConfig, no_model_message
from lich.types import ChatFn, Provider

if TYPE_CHECKING:
    from lich.plugins import PluginHost

__all__ = ["ProviderFactory", "ProviderRegistry", "build_chat", "build_providers"]

ProviderFactory: TypeAlias = Callable[[ProviderConfig], Provider]

# Which plugin ships which builtin kind, for the "enable the plugin" hint.
_BUILTIN_KIND_PLUGIN = {"openai_compat": "openai_compat", "anthropic": "anthropic",
                        "ollama": "ollama"}


class ProviderRegistry:
    """Provider kinds: kind name → factory, each attributed to its plugin."""

    def __init__(self) -> None:
        self._factories: dict[str, tuple[ProviderFactory, str | None]] = {}
        self.current_plugin: str | None = None
        self.on_duplicate: Callable[[str, str], None] | None = None

    def register(self, kind: str, factory: ProviderFactory) -> None:
        """Register ``factory`` for ``kind``. A kind registered twice keeps the first."""
        if not isinstance(kind, str) or not kind:
            raise TypeError("provider kind must be a non-empty string")
        if not callable(factory):
            raise TypeError(f"provider factory for {kind!r} is not callable")
        if kind in self._factories:
            message = f"duplicate_provider_kind: {kind}"
            if self.on_duplicate is not None and self.current_plugin is not None:
                self.on_duplicate(self.current_plugin, f"{message} (skipped)")
                return
            raise ValueError(message)
        self._factories[kind] = (factory, self.current_plugin)

    def kinds(self) -> list[str]:
        """Registered kinds, in registration order."""
        return list(self._factories)

    def plugin_of(self, kind: str) -> str | None:
        """The plugin that registered ``kind``."""
        entry = self._factories.get(kind)
        return entry[1] if entry else None

    def remove_plugin(self, plugin: str) -> list[str]:
        """Forget every kind ``plugin`` registered."""
        gone = [k for k, (_, owner) in self._factories.items() if owner == plugin]
        for k in gone:
            del self._factories[k]
        return gone

    def create(self, config: ProviderConfig, index: int = 0) -> Provider:
        """Build the provider for ``config``; :class:`ConfigError` if its kind is unknown."""
        entry = self._factories.get(config.kind)
        if entry is None:
            plugin = _BUILTIN_KIND_PLUGIN.get(config.kind)
            hint = (
                f"enable the {plugin!r} plugin (add it to `plugins` in the config)"
                if plugin
                else "enable the plugin that provides it"
            )
            known = ", ".join(self.kinds()) or "none"
            raise ConfigError(
                [
                    f"$.providers[{index}].kind: provider kind {config.kind!r} is not registered "
                    f"by any loaded plugin; {hint} (registered kinds: {known})"
                ]
            )
        return entry[0](config)


def build_providers(config: LichConfig, registry: ProviderRegistry) -> list[Provider]:
    """One provider per ``providers`` entry, in config order."""
    if not config.providers:
        raise ConfigError([no_model_message()])
    return [registry.create(p, i) for i, p in enumerate(config.providers)]


def build_chat(
    config: LichConfig, host: PluginHost, providers: Sequence[Provider]
) -> ChatFn:
    """The chat function the loop calls: the router plugin's, or the lone provider's."""
    router = host.make_router(list(providers), config)
    if router is not None:
        return router
    if len(providers) == 1:
        return providers[0].chat
    raise ConfigError(
        [
            "$.providers: several providers are configured but no router plugin is loaded; "
            "enable the 'failover' plugin (add it to `plugins`)"
        ]
    )
