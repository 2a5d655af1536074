"""The one registry shape behind tools, provider kinds and gateway platforms.

Every registration hook hands its plugins a registry: a mapping from a name to
what a plugin registered under it, each entry attributed to that plugin. The
plugin host sets :attr:`Registry.current_plugin` while a plugin's hook runs and
:attr:`Registry.on_duplicate` so that a name taken twice is reported on the
later plugin's load report and skipped (the first registration wins); outside
the host a duplicate raises :class:`DuplicateNameError`. A plugin that fails is
forgotten whole with :meth:`Registry.remove_plugin`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import ClassVar, Generic, TypeVar

__all__ = ["DuplicateNameError", "Registry"]

T = TypeVar("T")


class DuplicateNameError(ValueError):
    """``duplicate_<what>: <name> ...`` — the name is registered already."""


class Registry(Generic[T]):
    """Names to items in registration order, each attributed to its plugin.

    Subclasses set :attr:`what` (the code used in duplicate messages, e.g.
    ``tool`` gives ``duplicate_tool: <name>``) and give ``register`` its typed
    signature, calling :meth:`_add`.
    """

    what: ClassVar[str] = "name"

    def __init__(self) -> None:
        self._items: dict[str, T] = {}
        self._owners: dict[str, str | None] = {}
        # What a duplicate registration lost, in order: put back if the winner's plugin
        # is unloaded (a plugin that fails must not take a healthy plugin's name with it).
        self._shadowed: dict[str, list[tuple[T, str | None]]] = {}
        #: The plugin whose registration hook is running (set by the plugin host).
        self.current_plugin: str | None = None
        #: ``(plugin, message)`` callback for a duplicate (set by the plugin host);
        #: without it a duplicate raises.
        self.on_duplicate: Callable[[str, str], None] | None = None
        #: ``(plugin, message)`` callback for :meth:`warn` (set by the plugin host).
        self.on_warning: Callable[[str, str], None] | None = None

    def _add(self, name: str, item: T) -> bool:
        """Store ``item`` under ``name`` for the current plugin; ``False`` if skipped.

        :raises TypeError: for a name that is not a non-empty string.
        :raises DuplicateNameError: for a taken name outside the plugin host.
        """
        if not isinstance(name, str) or not name.strip():
            raise TypeError(f"{self.what.replace('_', ' ')} name must be a non-empty string")
        if name in self._items:
            owner = self._owners[name]
            by = f" (already registered by {owner})" if owner else ""
            message = f"duplicate_{self.what}: {name}{by}"
            if self.on_duplicate is not None and self.current_plugin is not None:
                self.on_duplicate(self.current_plugin, f"{message}; skipped")
                self._shadowed.setdefault(name, []).append((item, self.current_plugin))
                return False
            raise DuplicateNameError(message)
        self._items[name] = item
        self._owners[name] = self.current_plugin
        self._changed()
        return True

    def _changed(self) -> None:
        """Called after every change (subclasses drop caches here)."""

    def warn(self, message: str) -> None:
        """Report a problem of the registering plugin that does not fail it (an MCP
        server that did not start): a warning on its load report, shown by ``lich
        plugins``. Outside the plugin host it is logged."""
        if self.on_warning is not None and self.current_plugin is not None:
            self.on_warning(self.current_plugin, message)
        else:
            logging.getLogger("lich.plugins").warning("%s", message)

    def get(self, name: str) -> T | None:
        """What is registered under ``name``, if anything."""
        return self._items.get(name)

    def has(self, name: str) -> bool:
        """Whether ``name`` is registered."""
        return name in self._items

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(list(self._items.values()))

    def names(self) -> list[str]:
        """Registered names, in registration order."""
        return list(self._items)

    def items(self) -> list[T]:
        """Registered items, in registration order."""
        return list(self._items.values())

    def plugin_of(self, name: str) -> str | None:
        """The plugin that registered ``name`` (``None`` outside the plugin host)."""
        return self._owners.get(name)

    def remove_plugin(self, plugin: str) -> list[str]:
        """Forget everything ``plugin`` registered; returns the names."""
        gone = [n for n, owner in self._owners.items() if owner == plugin]
        for n in gone:
            del self._items[n]
            del self._owners[n]
        for n in list(self._shadowed):
            kept = [(item, owner) for item, owner in self._shadowed[n] if owner != plugin]
            if n in gone and kept:
                # The next registration of the name takes its place (registration order).
                item, owner = kept.pop(0)
                self._items[n] = item
                self._owners[n] = owner
            if kept:
                self._shadowed[n] = kept
            else:
                del self._shadowed[n]
        if gone:
            self._changed()
        return gone

    def _keep(self, names: set[str]) -> None:
        """Keep only ``names`` (registration order is kept)."""
        self._items = {n: v for n, v in self._items.items() if n in names}
        self._owners = {n: v for n, v in self._owners.items() if n in names}
        self._shadowed = {n: v for n, v in self._shadowed.items() if n in names}
        self._changed()
