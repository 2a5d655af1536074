"""What hook implementations receive and return.

``hookimpl`` marks a plugin's functions; :class:`Block` and :class:`Rewrite`
are the answers a ``lich_before_tool_call`` may give (``lich_check_tool_call``
may only block); :class:`RunInfo` and
:class:`RunOutcome` describe the run to the run-time hooks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pluggy
from attrs import field, frozen

from lich.types import AssistantMessage, Usage

if TYPE_CHECKING:
    from lich.config import LichConfig
    from lich.events import StoppedReason

__all__ = ["PROJECT", "Block", "Rewrite", "RunInfo", "RunOutcome", "Stop", "hookimpl", "hookspec"]

PROJECT = "lich"

hookspec = pluggy.HookspecMarker(PROJECT)
"""Marks a hook specification (only :mod:`lich.hookspecs` uses it)."""

hookimpl = pluggy.HookimplMarker(PROJECT)
"""Marks a plugin's hook implementation: ``@hookimpl`` above a ``lich_*`` function."""


@frozen
class Block:
    """Answer of ``lich_before_tool_call`` or ``lich_check_tool_call``: do not run the tool.

    The model receives ``blocked_by_plugin: <reason>``.
    """

    reason: str = "blocked"


@frozen
class Rewrite:
    """Answer of ``lich_before_tool_call``: run the tool with these arguments instead.

    Later before-hooks see the rewritten arguments, and ``lich_check_tool_call``
    the final ones. The only way a hook changes arguments: changing
    ``call.args`` in place blocks the call.
    """

    args: Mapping[str, Any] = field(converter=dict)


@frozen
class Stop:
    """Answer of ``lich_before_model_call``: end the run now, before the next model call.

    The run ends with ``stopped_reason="budget"``; ``reason`` is shown to the
    user and recorded on the ``budget_exhausted`` event, so it should say which
    budget and how much of it was spent (``"max_total_tokens: 1,204 tokens used
    of 1,000"``). ``budget`` names the budget (default: the plugin's name).
    """

    reason: str
    budget: str | None = None


@frozen
class RunInfo:
    """The run a hook is called for.

    ``config`` is the effective :class:`~lich.config.LichConfig`; a plugin
    finds its own settings in ``config.plugin_settings.get("<plugin name>")``.
    """

    run_id: str
    session_id: str
    input: str
    work_dir: str
    config: LichConfig | None = field(default=None, eq=False, repr=False)

    def settings_for(self, plugin_name: str) -> Mapping[str, Any]:
        """The ``[plugin_settings.<plugin_name>]`` table, or an empty mapping."""
        if self.config is None:
            return {}
        return self.config.plugin_settings.get(plugin_name, {})


@frozen
class RunOutcome:
    """How a run ended, as ``lich_run_end`` sees it.

    ``stopped_reason`` is ``final``, ``budget``, ``aborted`` or ``error``;
    ``error`` describes the failure when it is ``error``. ``cost_usd`` is the
    run's price (``None``: unknown; see the ``run_end`` event).
    """

    stopped_reason: StoppedReason
    turns_used: int
    usage: Usage = field(factory=Usage)
    final: AssistantMessage | None = None
    error: str | None = None
    cost_usd: float | None = None
