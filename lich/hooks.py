"""What hook implementations receive and return.

``hookimpl`` marks a plugin's functions; :class:`Block`, :class:`Ask` and
:class:`Rewrite` are the answers a ``lich_before_tool_call`` may give
(``lich_check_tool_call`` may only block); :class:`ApprovalRequest` is what an
approver (``lich_request_approval``) is shown and :class:`Approval` its answer;
:class:`RunInfo` and :class:`RunOutcome` describe the run to the run-time hooks.
:class:`InstructionSection` is what ``lich_instructions`` gives,
:class:`PromptEdit` an answer of ``lich_user_prompt``, :class:`Compression` one of
``lich_before_compress`` and :class:`FollowUp` one of ``lich_after_final``
(:class:`Block` refuses a prompt or a compression).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeVar

import attrs
import pluggy
from attrs import field, frozen

from lich.types import AssistantMessage, ChatFn, ToolCall, Usage

if TYPE_CHECKING:
    from lich.config import LichConfig
    from lich.events import StoppedReason
    from lich.tools import Tool, ToolRegistry

__all__ = [
    "CORE_RECORD_KINDS",
    "PROJECT",
    "Approval",
    "ApprovalRequest",
    "ApprovalScope",
    "Ask",
    "Block",
    "Compression",
    "FollowUp",
    "InstructionSection",
    "PromptEdit",
    "Rewrite",
    "RunInfo",
    "RunOutcome",
    "Stop",
    "hookimpl",
    "hookspec",
    "needed_when",
    "runs_inline",
]

PROJECT = "lich"

hookspec = pluggy.HookspecMarker(PROJECT)
"""Marks a hook specification (only :mod:`lich.hookspecs` uses it)."""

hookimpl = pluggy.HookimplMarker(PROJECT)
"""Marks a plugin's hook implementation: ``@hookimpl`` above a ``lich_*`` function."""

_F = TypeVar("_F", bound=Callable[..., Any])
#: The attribute :func:`needed_when` sets on a hook implementation.
NEEDED_WHEN_ATTR = "lich_needed_when"


def needed_when(predicate: Callable[[LichConfig], bool]) -> Callable[[_F], _F]:
    """Declare that a per-turn hook implementation does nothing unless ``predicate(config)``.

    For the hooks lich calls on every model call, tool call or event of a run
    (``lich_before_model_call``, ``lich_price_call``, ``lich_before_tool_call``,
    ``lich_check_tool_call``, ``lich_after_tool_call``, ``lich_event``): when
    every implementation of such a hook is declared idle for a run's config, the
    run does not call the hook at all — as if no plugin implemented it. A
    plugin that is loaded but not configured then costs its runs nothing::

        @hookimpl
        @needed_when(lambda config: config.max_total_tokens is not None)
        async def lich_before_model_call(run, usage, cost_usd): ...

    It is a promise, not a filter: when another plugin's implementation is
    needed, this one is called too and must answer as it would (``None``).
    ``predicate`` is asked once per run (so it must be cheap and pure); one that
    raises counts as needed.
    """

    def mark(function: _F) -> _F:
        setattr(function, NEEDED_WHEN_ATTR, predicate)
        return function

    return mark


#: The attribute :func:`runs_inline` sets on a hook implementation.
RUNS_INLINE_ATTR = "lich_runs_inline"

def runs_inline(function: _F) -> _F:
    """Declare that a plain ``def`` run-time hook implementation is quick and never
    waits: lich calls it directly on the event loop, in the run's own task.

    A plain ``def`` hook otherwise runs in a worker thread, and an ``async def``
    one as a task of its own; both cost a few event-loop rounds or a task per
    call (~10–15 µs each), more than a pure check itself (a rule match, a
    counter). An inline hook costs a function call::

        @hookimpl
        @runs_inline
        def lich_check_tool_call(call, run):
            return Block("no deletes") if call.name.startswith("delete_") else None

    For pure, quick code only: no I/O, no lock that another thread may hold for
    long, no waiting of any kind. Nothing can interrupt synchronous code, so an
    inline hook that blocks freezes the whole event loop (every run, the
    gateway, the TUI) until it returns; its deadline cannot cut it short. It is
    still held to it: one that returns after its deadline (``hook_timeout_s``)
    counts as timed out, whatever it answered — a before- or check-hook then
    blocks the call — as an ``async def`` hook whose first step holds the loop
    past its deadline does. Its exceptions are hook failures like any hook's
    (``CancelledError`` and ``GeneratorExit`` raised by its code included);
    ``KeyboardInterrupt`` and ``SystemExit`` propagate. It must answer a value,
    not an awaitable: one that hands back a coroutine fails (a hook that waits
    is an ``async def``, unmarked).

    For the run-time hooks lich calls under a deadline (``hook_timeout_s``;
    ``approval_timeout_s`` for the approver): ``lich_before_tool_call``,
    ``lich_check_tool_call``, ``lich_after_tool_call``, ``lich_request_approval``,
    ``lich_before_model_call``, ``lich_run_start``, ``lich_run_end``,
    ``lich_shutdown`` — every row of :mod:`lich.plugins.policy` not called inline
    already. On an ``async def``, or on any other hook, the plugin fails to load
    (phase ``validate``).
    """
    setattr(function, RUNS_INLINE_ATTR, True)
    return function


@frozen
class Block:
    """Answer of ``lich_before_tool_call`` or ``lich_check_tool_call``: do not run the tool.

    The model receives ``blocked_by_plugin: <reason>``.
    """

    reason: str = "blocked"


@frozen
class Ask:
    """Answer of ``lich_before_tool_call``: run the tool only if a person approves.

    ``reason`` is shown to the approver (``lich_request_approval``). Later
    before-hooks still run: a later ``Block`` wins, a later ``Rewrite`` changes
    what the person is asked about.
    """

    reason: str = "approval required"


ApprovalScope: TypeAlias = Literal["once", "session", "always"]
"""What an :class:`Approval` covers: this call, the same tool and pattern for the rest of
the session, or from now on (an allow rule written to the config the person chose)."""

_SCOPES = ("once", "session", "always")


def _check_scope(_instance: Any, _attribute: Any, value: str) -> None:
    if value not in _SCOPES:
        raise ValueError(f"scope must be one of {', '.join(_SCOPES)}, not {value!r}")


def _optional_dict(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if value is None else dict(value)


@frozen
class Approval:
    """Answer of ``lich_request_approval``: the person's decision on one call.

    :param approved: run the call (``True``) or not.
    :param scope: ``once`` covers this call; ``session`` also every later call of
        the session matching the request's :attr:`ApprovalRequest.rules`; ``always``
        the same, after the approver wrote those rules to a config file's
        ``[approvals] allow`` (the approver writes it, having shown it first).
        A scope on a denial is recorded and otherwise ignored.
    :param args: the arguments edited by the person, replacing the call's; they
        are checked against the tool's schema and by ``lich_check_tool_call``
        again, and the call is refused if they fail.
    :param message: for a denial, what the model is told (``approval_denied:
        <message>``); for an approval, recorded only.
    :param approver: who answered, for the record (``terminal``, ``tui``,
        ``telegram:<user>``, ``--yes``); the plugin's name when left out.
    """

    approved: bool
    scope: ApprovalScope = field(default="once", validator=_check_scope)
    args: Mapping[str, Any] | None = field(default=None, converter=_optional_dict)
    message: str | None = None
    approver: str | None = None


@frozen
class ApprovalRequest:
    """What an approver is asked: one tool call that some before-hook answered
    :class:`Ask` for.

    :param id: a short id for this request, unique among the pending ones of the
        process (the gateway's ``/approve <id>``).
    :param call: the call with its arguments as the tool would receive them.
    :param reason: the ``Ask`` reasons, joined with ``; ``.
    :param asked_by: the plugins that answered ``Ask``, in the order they ran.
    :param rules: what a ``session`` or ``always`` approval grants, as a
        ``lich_prepare_approval`` plugin filled them in (the approvals plugin's
        ``[approvals]`` rules, ``terminal(git status*)``, one per simple command of
        a shell line); empty when no plugin offers any.
    :param tool: the tool that would run (``None`` for an unknown name).
    :param preview: what the call would do (a diff for a file write), if the tool
        can tell and a ``lich_prepare_approval`` plugin asked it (the approvals
        plugin does).
    :param timeout_s: how long lich waits for the answer (``None``: no limit); the
        call is denied when it passes.
    """

    id: str
    call: ToolCall
    reason: str
    asked_by: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()
    tool: Tool | None = field(default=None, eq=False, repr=False)
    preview: str | None = None
    timeout_s: float | None = None


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
    finds its own table in ``config.table("<table>")``.

    ``tools`` is the :class:`~lich.tools.ToolRegistry` the run's calls are looked
    up in — the very registry the executor runs them from, so
    :meth:`tool` (``run.tool(call.name)``) is the :class:`~lich.tools.Tool` a call
    will run, with its declarations (``read_only``, ``requires_approval``, its
    schema). A hook reads it and must not change it. ``None`` where whoever built
    the ``RunInfo`` gave none (code constructing one by hand).
    """

    run_id: str
    session_id: str
    input: str
    work_dir: str
    config: LichConfig | None = field(default=None, eq=False, repr=False)
    tools: ToolRegistry | None = field(default=None, eq=False, repr=False, kw_only=True)
    #: What :meth:`chat_for` asks (the agent's; ``None`` in a ``RunInfo`` built by hand).
    models: Callable[[str], ChatFn] | None = field(
        default=None, eq=False, repr=False, kw_only=True)
    #: The plugins' per-run state (:meth:`state_for`), one mapping per plugin name.
    plugin_state: dict[str, dict[str, Any]] = field(
        factory=dict, eq=False, repr=False, kw_only=True)
    #: Appends one record to the run's transcript (:meth:`append_record`); ``None`` when
    #: the run keeps none (``persist_sessions = false``, a ``RunInfo`` built by hand).
    recorder: Callable[..., None] | None = field(
        default=None, eq=False, repr=False, kw_only=True)

    def append_record(self, kind: str, **fields: Any) -> bool:
        """Append a plugin's own record ``{"kind": kind, **fields}`` to the run's
        transcript, in order with the run's own records; whether the run keeps one.

        How a plugin leaves what it did beside the conversation (the ``checkpoints``
        plugin's ``checkpoint`` records) for its own commands to read back from the
        session store. Readers that do not know ``kind`` skip it. ``fields`` must be
        JSON values. Call it from the event loop (an ``async def`` hook), as the run's
        own records are written there. Like the run's writer it never raises for an
        unwritable store (the run goes on without its transcript).

        :raises ValueError: ``kind`` is one of the run's own (:data:`CORE_RECORD_KINDS`)
            or not a short lower-case name.
        """
        if kind in CORE_RECORD_KINDS or not _RECORD_KIND.fullmatch(kind):
            raise ValueError(f"a plugin's record kind must be a lower-case name other than "
                             f"{', '.join(sorted(CORE_RECORD_KINDS))}: got {kind!r}")
        if self.recorder is None:
            return False
        self.recorder(kind, **fields)
        return True

    def state_for(self, plugin_name: str) -> dict[str, Any]:
        """A mutable mapping private to ``plugin_name`` for this run, empty at first and
        gone with the run: where a plugin keeps what one hook of a run hands to
        another (``lich_run_start`` to ``lich_event``), instead of a module global
        keyed by run id. The same mapping in every hook of the run."""
        return self.plugin_state.setdefault(plugin_name, {})

    def chat_for(self, role: str) -> ChatFn:
        """The chat function of the auxiliary model role ``role``: the
        ``[models.<role>]`` table's provider and model, or the run's own model (its
        providers, router and failover) when the config has no such table.

        ``compress`` is the summariser's role; a plugin may name its own (a judge,
        a subagent). Its calls are not the run's turns: no events, no budget check,
        no usage in the run's totals unless the caller adds them. Built once per
        agent and role, on first use.

        :raises lich.config.ConfigError: the role's table names no configured
            provider (a loaded config never does) or its provider cannot be built.
        :raises LookupError: this ``RunInfo`` was built by hand, with no models.
        """
        if self.models is None:
            raise LookupError("this RunInfo has no models (it was not made by an agent's run)")
        return self.models(role)

    def settings_for(self, plugin_name: str) -> Mapping[str, Any]:
        """The ``[<plugin_name>]`` table (or the deprecated
        ``[plugin_settings.<plugin_name>]``), or an empty mapping."""
        if self.config is None:
            return {}
        return self.config.table(plugin_name)

    def tool(self, name: str) -> Tool | None:
        """The tool registered as ``name`` in the run's :attr:`tools`, or ``None``
        (no such tool, or no registry given)."""
        return self.tools.get(name) if self.tools is not None else None


#: The record kinds a run writes itself, which :meth:`RunInfo.append_record` refuses.
CORE_RECORD_KINDS = frozenset({"message", "compact", "event", "meta", "rewind"})
_RECORD_KIND = re.compile(r"[a-z][a-z0-9_]{0,39}")


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


def _non_empty_text(_instance: Any, attribute: Any, value: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{attribute.name} must be a non-empty string")


@frozen
class InstructionSection:
    """One section of the system prompt, as ``lich_instructions`` gives it.

    :param text: the section's text, put into the system prompt verbatim.
    :param source: where it comes from, for the reports (a file path, ``skills``,
        the plugin's name): what a cut names.
    :param priority: which sections stay when the prompt is over its budget
        (``instructions_budget_tokens``): the lowest priority is cut first, the
        later of two equal ones first. ``system_prompt`` itself is never cut.
    :param cacheable: whether the text is the same from one run to the next (a
        file, a catalog) rather than changing (today's date, a clock). Cacheable
        sections come first, in the order given, so that the prompt's stable
        prefix stays byte-identical for a provider's prompt cache; the others
        follow it.
    """

    text: str = field(validator=_non_empty_text)
    source: str = field(validator=_non_empty_text)
    priority: int = 0
    cacheable: bool = True


@frozen
class PromptEdit:
    """Answer of ``lich_user_prompt``: change what the user submitted.

    ``text`` replaces the message (``None``: keep it); ``context`` is added after
    it, as its own paragraph (``None``: nothing). Both are what the model sees and
    what the transcript records. An empty ``text`` is refused (to refuse the
    message, answer :class:`Block`).
    """

    text: str | None = field(default=None, validator=attrs.validators.optional(_non_empty_text))
    context: str | None = None


def _positive(_instance: Any, attribute: Any, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or value < 1):
        raise ValueError(f"{attribute.name} must be a positive integer, not {value!r}")


@frozen
class Compression:
    """Answer of ``lich_before_compress``: compress, shaped this way.

    ``keep_recent`` is how many of the latest messages stay verbatim (``None``:
    the run's own, 8); ``focus`` is what the summary must keep in particular (it
    is added to the summariser's instruction).
    """

    keep_recent: int | None = field(default=None, validator=_positive)
    focus: str | None = None


@frozen
class FollowUp:
    """Answer of ``lich_after_final``: do not end the run on this answer; go on with
    ``prompt`` as the next user message (while turns are left)."""

    prompt: str = field(validator=_non_empty_text)
