"""The builtin ``approvals`` plugin: the ``[approvals]`` rules, as a before-hook, and
what ``session``/``always`` approvals grant.

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
its primary argument), but hooks receive a call, not the tool: the plugin
looks it up in the run's registry (``RunInfo.tool``), the very registry the
executor runs the call from. A call whose tool is not found (or a ``RunInfo``
built without a registry) is judged by the rules and the mode alone (its
primary argument guessed from the argument names, so that deny rules still
apply).

**Grants.** For any plugin's ``Ask`` the plugin completes the request with the
allow rules a ``session`` or ``always`` approval grants and the tool's preview
(``lich_prepare_approval``), keeps what
such an approval granted, per session (``lich_approval_resolved``, into
:data:`lich.approvals.grants.SESSION_GRANTS`), and answers a later request
those rules cover itself, first of the approvers (``lich_request_approval``:
``Approval(True, scope="session", approver="session")``), so no one is asked
again. The core only asks, obeys and emits.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attrs import evolve, frozen

from lich.approvals.grants import SESSION_GRANTS
from lich.approvals.rules import MODES, Mode, Rule, RuleSet, decide, parse_rule
from lich.hooks import Approval, Ask, Block, hookimpl, runs_inline
from lich.settings import each, one_of, setting, structure_settings
from lich.threads import run_in_daemon_thread

if TYPE_CHECKING:
    from lich.config import LichConfig
    from lich.events import ApprovalResolved
    from lich.hooks import ApprovalRequest, RunInfo
    from lich.settings import ConfigTables
    from lich.types import ToolCall

__all__ = [
    "ApprovalSettings",
    "approval_settings",
    "lich_approval_resolved",
    "lich_before_tool_call",
    "lich_check_config",
    "lich_check_tool_call",
    "lich_prepare_approval",
    "lich_register_config_tables",
    "lich_request_approval",
]

log = logging.getLogger(__name__)

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
    """What the plugin keeps for one config: its parsed settings."""

    def __init__(self, settings: ApprovalSettings) -> None:
        self.settings = settings
        # Built once: the RuleSet remembers which rules name which tool.
        self.rules = settings.rules


# Reentrant: a config that dies while the lock is held (its weakref callback runs in the
# middle of whatever allocation triggered the collection, on this very thread) takes the
# lock again in _forget; a plain Lock deadlocked the run there.
_lock = threading.RLock()
_known: dict[int, tuple[weakref.ref[LichConfig], _Known]] = {}
_DEFAULT = ApprovalSettings()
_DEFAULT_RULES = _DEFAULT.rules


def _forget(key: int) -> Any:
    def callback(ref: weakref.ref[LichConfig]) -> None:
        with _lock:
            entry = _known.get(key)
            if entry is not None and entry[0] is ref:  # not a newer config's entry
                del _known[key]

    return callback


def _for_config(config: LichConfig) -> _Known:
    key = id(config)
    # Read without the lock (one dict lookup, atomic): this runs twice per tool call, and
    # the lock only has to keep two writers from both inserting.
    entry = _known.get(key)
    if entry is not None and entry[0]() is config:
        return entry[1]
    known = _Known(approval_settings(config.table("approvals")))
    with _lock:
        entry = _known.get(key)
        if entry is not None and entry[0]() is config:
            return entry[1]
        _known[key] = (weakref.ref(config, _forget(key)), known)
    return known



@hookimpl
def lich_register_config_tables(tables: ConfigTables) -> None:
    """Claim ``[approvals]``: the mode and the allow and deny rules."""
    tables.claim("approvals", ApprovalSettings, parse=lambda raw, path: approval_settings(raw),
                 help="which tool calls run unasked, ask a person, or are refused")


@hookimpl
def lich_check_config(config: LichConfig) -> None:
    """Check the ``[approvals]`` table: ``mode`` and every rule of ``allow``, ``ask``
    and ``deny`` (``$.approvals.deny[1]: bad rule 'terminal(': ...``)."""
    approval_settings(config.table("approvals"))


def _answer(call: ToolCall, run: RunInfo) -> Block | Ask | None:
    """What both hooks answer: the rules of ``run``'s config applied to ``call``."""
    if run.config is None:
        rules, mode = _DEFAULT_RULES, _DEFAULT.mode
    else:
        known = _for_config(run.config)
        rules, mode = known.rules, known.settings.mode
    verdict = decide(rules, mode, call.name, call.args, run.tool(call.name), run.work_dir)
    if verdict.action == "deny":
        return Block(f"approval_rule: {verdict.reason}")
    if verdict.action == "ask":
        return Ask(verdict.reason)
    return None


@hookimpl
@runs_inline
def lich_before_tool_call(call: ToolCall, run: RunInfo) -> Block | Ask | None:
    """Apply the rules: ``Block`` for a deny rule (or mode ``deny-unlisted``), ``Ask``
    for an ask rule or the default, ``None`` to allow.

    Inline (:func:`lich.hooks.runs_inline`) because it is quick and pure — a rule
    match, at most a ``realpath`` — so it is called on the event loop in the run's
    task: neither a worker thread nor a task of its own per call.
    """
    return _answer(call, run)


@hookimpl
@runs_inline
def lich_check_tool_call(call: ToolCall, run: RunInfo) -> Block | Ask | None:
    """The rules again, on the final arguments: a later plugin's rewrite can get past
    neither a deny rule nor an ask (the same question in both phases is asked once).
    On arguments a person edited while approving, the core counts only the ``Block``."""
    return _answer(call, run)


@hookimpl
async def lich_prepare_approval(request: ApprovalRequest,
                                run: RunInfo) -> ApprovalRequest | None:
    """For any plugin's ``Ask``: the allow rules a ``session`` or ``always`` approval
    grants (one per simple command of a shell line) and the tool's own preview of
    the call (a diff for a file write), unless an earlier plugin gave them."""
    rules = request.rules or SESSION_GRANTS.rules_for(request.call, request.tool,
                                                      run.work_dir)
    preview = request.preview
    if preview is None:
        preview = await _preview(request, run)
    return evolve(request, rules=rules, preview=preview)


async def _preview(request: ApprovalRequest, run: RunInfo) -> str | None:
    """The tool's preview, or ``None``: one that fails or overruns half of
    ``hook_timeout_s`` is left out (it only informs the person; the rules must
    still make it within the hook's own time)."""
    tool = request.tool
    if tool is None or tool.preview is None:
        return None
    budget = (run.config.hook_timeout_s if run.config is not None else 10.0) / 2
    try:
        async with asyncio.timeout(budget):
            # A worker thread: a preview reads files, and may block.
            return await run_in_daemon_thread(tool.preview, dict(request.call.args),
                                              Path(run.work_dir))
    except Exception:
        log.debug("preview of %s failed", tool.name, exc_info=True)
        return None


@hookimpl(tryfirst=True)
@runs_inline
def lich_request_approval(request: ApprovalRequest, run: RunInfo) -> Approval | None:
    """Approve, as ``session``, a request the session's grants already cover (an
    earlier ``session`` or ``always`` approval); else ``None``: a person is asked.

    First of the approvers (``tryfirst``), so that no one is asked again about what
    they granted; the core emits the resolution as for any approver's answer.
    """
    if SESSION_GRANTS.covers(run.session_id, request.call, request.tool, run.work_dir):
        return Approval(True, scope="session", approver="session")
    return None


@hookimpl
@runs_inline
def lich_approval_resolved(request: ApprovalRequest, resolved: ApprovalResolved,
                           run: RunInfo) -> None:
    """Keep the rules of a ``session`` or ``always`` approval for the rest of the
    session (a denial, whatever its scope, grants nothing)."""
    if resolved.approved and resolved.scope in ("session", "always") and request.rules:
        SESSION_GRANTS.grant(run.session_id, request.rules)
