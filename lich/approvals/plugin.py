"""The builtin ``approvals`` plugin: the ``[approvals]`` rules, as a before-hook.

::

    [approvals]
    mode = "ask"          # ask | allow | deny-unlisted: what a call no rule meets gets
    allow = ["terminal(git status*)", "write_file(src/*)"]
    ask   = ["http_request"]
    deny  = ["terminal(rm -rf *)", "write_file(.github/*)", "mcp__*__delete_*"]

Precedence deny > ask > allow > the default (:func:`lich.approvals.rules.decide`):
a read-only tool is allowed unless a deny or ask rule meets the call; any
other follows ``mode``, and a tool declaring ``requires_approval`` is asked
about even in mode ``allow``. ``lich_before_tool_call`` answers
``Block("approval_rule: denied by deny rule <rule>")``, ``Ask(...)`` or
``None``; ``lich_check_tool_call`` gives the same answer on the final
arguments, so neither a later plugin's rewrite nor arguments a person edited
get past a deny rule, and a rewrite cannot turn an allowed call into one that
runs unasked.

**Which tool a call is.** The rules read the tool's declarations (read-only,
its primary argument), but hooks receive a call, not the tool. The plugin
keeps the registry ``lich_register_tools`` hands it — the very object the
agent's executor looks tools up in, final once the host has applied
``tools_enabled``/``tools_disabled`` in place — under the config it was built
for; a run's ``RunInfo.config`` is that config, so the call's name finds the
tool the executor will run. Held weakly (an agent that is gone leaves nothing
behind); a config shared by several agents is looked up in each of their
registries, and where they disagree the stricter tool wins. A call whose tool
is not found is judged by the rules and the mode alone (its primary argument
guessed from the argument names, so that deny rules still apply).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from attrs import frozen

from lich.approvals.rules import MODES, Mode, Rule, RuleSet, decide, parse_rule
from lich.hooks import Ask, Block, hookimpl
from lich.settings import each, one_of, setting, structure_settings

if TYPE_CHECKING:
    from lich.config import LichConfig
    from lich.hooks import RunInfo
    from lich.tools import Tool, ToolRegistry
    from lich.types import ToolCall

__all__ = [
    "ApprovalSettings",
    "approval_settings",
    "lich_before_tool_call",
    "lich_check_config",
    "lich_check_tool_call",
    "lich_register_tools",
]

_RULES = each(parse_rule, what='an array of rules like "terminal(git status*)"')


@frozen
class ApprovalSettings:
    """The ``[approvals]`` table."""

    # A Literal of strings is as immutable as str (RUF009 cannot see through the alias).
    mode: Mode = setting("ask", check=one_of(*MODES),  # noqa: RUF009
                         help="what a call no rule meets gets: ask, allow or deny-unlisted")
    allow: tuple[Rule, ...] = setting(factory=tuple, parse=_RULES,
                                      help="rules whose calls run without asking")
    ask: tuple[Rule, ...] = setting(factory=tuple, parse=_RULES,
                                    help="rules whose calls always need approval")
    deny: tuple[Rule, ...] = setting(factory=tuple, parse=_RULES,
                                     help="rules whose calls never run")

    @property
    def rules(self) -> RuleSet:
        """The three lists as a :class:`~lich.approvals.rules.RuleSet`."""
        return RuleSet(self.allow, self.ask, self.deny)


def approval_settings(table: Mapping[str, Any] | None) -> ApprovalSettings:
    """The ``[approvals]`` table ``table``, checked.

    :raises lich.config.ConfigError: every problem, as ``$.approvals.allow[2]: ...``.
    """
    return structure_settings(table or {}, ApprovalSettings, "$.approvals")


class _Known:
    """What the plugin keeps for one config: its parsed settings and the registries
    built for it (weakly)."""

    def __init__(self, settings: ApprovalSettings) -> None:
        self.settings = settings
        # Built once: the RuleSet remembers which rules name which tool.
        self.rules = settings.rules
        self.registries: list[weakref.ref[ToolRegistry]] = []

    def tool(self, name: str) -> Tool | None:
        registries = self.registries
        if len(registries) == 1:  # one agent on this config: the usual case, per call
            registry = registries[0]()
            return registry.get(name) if registry is not None else None
        found: list[Tool] = []
        for ref in self.registries:
            registry = ref()
            item = registry.get(name) if registry is not None else None
            if item is not None and all(item is not f for f in found):
                found.append(item)
        if len(found) <= 1:
            return found[0] if found else None
        # Two agents on one config with different tools of this name: the strictest.
        return min(found, key=lambda t: (not t.requires_approval, t.read_only))


_lock = threading.Lock()
_known: dict[int, tuple[weakref.ref[LichConfig], _Known]] = {}
_DEFAULT = ApprovalSettings()
_DEFAULT_RULES = _DEFAULT.rules


def _forget(key: int) -> Any:
    def callback(_ref: weakref.ref[LichConfig]) -> None:
        with _lock:
            _known.pop(key, None)

    return callback


def _for_config(config: LichConfig) -> _Known:
    key = id(config)
    # Read without the lock (one dict lookup, atomic): this runs twice per tool call, and
    # the lock only has to keep two writers from both inserting.
    entry = _known.get(key)
    if entry is not None and entry[0]() is config:
        return entry[1]
    known = _Known(approval_settings(config.approvals))
    with _lock:
        entry = _known.get(key)
        if entry is not None and entry[0]() is config:
            return entry[1]
        _known[key] = (weakref.ref(config, _forget(key)), known)
    return known


@hookimpl
def lich_check_config(config: LichConfig) -> None:
    """Check the ``[approvals]`` table: ``mode`` and every rule of ``allow``, ``ask``
    and ``deny`` (``$.approvals.deny[1]: bad rule 'terminal(': ...``)."""
    approval_settings(config.approvals)


@hookimpl
def lich_register_tools(registry: ToolRegistry, config: LichConfig) -> None:
    """Register nothing: keep ``registry`` to know which tool a call is (see the module
    docs)."""
    known = _for_config(config)
    with _lock:
        known.registries = [r for r in known.registries if r() is not None]
        known.registries.append(weakref.ref(registry))


def _answer(call: ToolCall, run: RunInfo) -> Block | Ask | None:
    """What both hooks answer: the rules of ``run``'s config applied to ``call``."""
    if run.config is None:
        verdict = decide(_DEFAULT_RULES, _DEFAULT.mode, call.name, call.args, None,
                         run.work_dir)
    else:
        known = _for_config(run.config)
        verdict = decide(known.rules, known.settings.mode, call.name, call.args,
                         known.tool(call.name), run.work_dir)
    if verdict.action == "deny":
        return Block(f"approval_rule: {verdict.reason}")
    if verdict.action == "ask":
        return Ask(verdict.reason)
    return None


@hookimpl
async def lich_before_tool_call(call: ToolCall, run: RunInfo) -> Block | Ask | None:
    """Apply the rules: ``Block`` for a deny rule (or mode ``deny-unlisted``), ``Ask``
    for an ask rule or the default, ``None`` to allow.

    ``async`` because it is quick and pure: on the event loop, not a worker thread.
    """
    return _answer(call, run)


@hookimpl
async def lich_check_tool_call(call: ToolCall, run: RunInfo) -> Block | Ask | None:
    """The rules again, on the final arguments: a later plugin's rewrite can get past
    neither a deny rule nor an ask (the same question in both phases is asked once).
    On arguments a person edited while approving, the core counts only the ``Block``."""
    return _answer(call, run)
