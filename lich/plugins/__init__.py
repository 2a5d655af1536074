"""The plugin host: loads the config's plugin entries, keeps a report per entry,
and calls hooks through a typed facade.

The package is split along its seams, each module readable on its own:

* :mod:`lich.plugins.loading` — resolve an entry (entry point, dotted module or
  ``.py`` file), import it, register it, a :class:`LoadReport` per entry; what
  is installed (:func:`available_plugins`), from metadata only.
* :mod:`lich.plugins.policy` — one :class:`~lich.plugins.policy.HookPolicy` row
  per hook: the answers it accepts, fail open or closed, its deadline, its wording.
* :mod:`lich.plugins.calling` — the one caller that calls every hook by its row
  (timeouts, worker threads, the eager start), and the typed calls over it.
* :mod:`lich.plugins.host` — :class:`PluginHost`, both of the above over one
  pluggy manager, and the registration hooks that fill the registries.
"""

from __future__ import annotations

from lich.plugins.calling import ToolDecision
from lich.plugins.host import PluginHost
from lich.plugins.loading import (
    ENTRY_POINT_GROUP,
    AvailablePlugin,
    LoadReport,
    PluginLoadError,
    available_plugins,
    installed_entry_points,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "AvailablePlugin",
    "LoadReport",
    "PluginHost",
    "PluginLoadError",
    "ToolDecision",
    "available_plugins",
    "installed_entry_points",
]
