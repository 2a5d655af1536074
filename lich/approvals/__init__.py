"""Approvals: which tool calls a person must say yes to.

* :mod:`lich.approvals.rules` — the rule model (``terminal(git status*)``) and the
  decision (deny > ask > allow > mode); :func:`~lich.approvals.rules.suggest_rules`
  and :func:`~lich.approvals.rules.rules_cover` for the grants.
* :mod:`lich.approvals.shell` — splitting a command line into simple commands.
* :mod:`lich.approvals.plugin` — the builtin ``approvals`` plugin (entry point
  ``approvals``), which applies the ``[approvals]`` table, offers the rules a
  ``session``/``always`` approval grants and answers the requests they cover.
* :mod:`lich.approvals.grants` — what those approvals granted, per session: the
  plugin's own state (the core knows only the ``Ask`` contract).
* :mod:`lich.approvals.store` — writing an ``always`` approval's rules to a config.

See ``docs/tools.md`` ("Approvals") for the defaults and the rule syntax.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lich.config import LichConfig
    from lich.plugins import PluginHost
    from lich.tools import Tool

__all__ = ["approvals_loaded", "unasked_warning"]


def approvals_loaded(host: PluginHost) -> bool:
    """Whether the builtin ``approvals`` plugin is loaded in ``host`` (under any entry
    name: ``approvals`` or the module ``lich.approvals.plugin``)."""
    import lich.approvals.plugin as approvals_plugin

    return any(p is approvals_plugin for p in host.pm.get_plugins())


def unasked_warning(host: PluginHost, tools: Iterable[Tool],
                    config: LichConfig | None = None) -> str | None:
    """The warning for a plugin list without ``approvals``: which tools then run
    without anyone being asked. ``None`` when the plugin is loaded or no tool needs
    approval."""
    if approvals_loaded(host):
        return None
    risky = [t.name for t in tools if not t.read_only]
    if not risky:
        return None
    shown = ", ".join(risky[:6]) + (f" and {len(risky) - 6} more" if len(risky) > 6 else "")
    ignored = (" and [approvals] is ignored"
               if config is not None and config.table("approvals") else "")
    return (f"the approvals plugin is not loaded: {shown} run without asking{ignored} "
            "(add \"approvals\" to plugins, or \"+approvals\")")
