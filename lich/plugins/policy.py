"""How each hook is called: one :class:`HookPolicy` row per ``lich_*`` hook.

The host has one caller (:meth:`lich.plugins.calling.HookCaller.call_hook`, and
:meth:`~lich.plugins.calling.HookCaller.call_hook_sync` for the hooks called
outside a run's event loop); what differs from hook to hook is data, written
here once per hook:

* which answers it accepts, and what each does: ``"stop"`` ends the chain with
  that answer (``firstresult``), ``"collect"`` keeps it and goes on, ``"chain"``
  replaces an argument the next implementation sees (a ``Rewrite``, a replaced
  ``ToolResult``);
* what a failure does (an exception, a timeout, an answer of the wrong type):
  ``"report"`` logs it and skips the plugin (fail open), ``"block"`` ends the
  chain with a reason (fail closed: the tool call does not run), ``"unload"``
  fails the plugin in its load report and unloads it, ``"raise"`` raises a
  configuration error (the command or run does not start), ``"ignore"`` drops it;
* the time limit: ``"hook"`` (the host's ``hook_timeout_s`` per implementation),
  ``"given"`` (one deadline the call site passes for all implementations
  together: the approver's ``approval_timeout_s``) or ``"none"``;
* the wording of every report, as :meth:`str.format` templates over ``hook``,
  ``plugin``, ``error`` (the failure: ``ErrorType: message`` or ``timed out
  after 10s``), ``type`` (the answer's type name), ``answer`` and ``problem``.

Adding a hook is its spec in :mod:`lich.hookspecs` and one row in
:data:`HOOK_POLICIES` (a test holds the two to each other), then a call site:
``await host.call_hook("lich_x", run=run, ...)``, whose
:class:`~lich.plugins.calling.HookOutcome` says what the plugins answered.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Literal

from attrs import evolve, field, frozen

from lich.hooks import (
    Approval,
    ApprovalRequest,
    Ask,
    Block,
    Compression,
    FollowUp,
    InstructionSection,
    PromptEdit,
    Rewrite,
    Stop,
)
from lich.types import ToolDefinition, ToolResult

__all__ = [
    "HOOK_POLICIES",
    "Action",
    "HookPolicy",
    "OnFailure",
    "RefusedAnswer",
    "UnloadPhase",
    "inline_hooks",
    "observer",
    "policy_table",
    "registration",
]

#: What an accepted answer does (see the module docstring).
Action = Literal["stop", "collect", "chain"]
#: What a failure does (see the module docstring).
OnFailure = Literal["report", "block", "unload", "raise", "ignore"]
#: The load-report phase of a plugin a row unloads.
UnloadPhase = Literal["register", "validate"]


class RefusedAnswer(Exception):
    """Raised by a policy's ``chain`` when it cannot take an answer: a failure of
    the plugin that gave it, reported with this message as its ``error``."""


def _answers(value: Mapping[type, Action]) -> Mapping[type, Action]:
    return MappingProxyType(dict(value))


@frozen
class HookPolicy:
    """How the caller calls one hook (one row of :data:`HOOK_POLICIES`).

    :param name: the hook (``lich_*``), as in :mod:`lich.hookspecs`.
    :param answers: the accepted answer types and what each does; ``None`` is
        always "no answer" (the next implementation is asked). Looked up by exact
        type first, then by ``isinstance`` in this order.
    :param check: a further check of an accepted answer: a problem (a short
        phrase, ``{problem}`` in ``bad_answer``) makes it a bad answer.
    :param chain: for ``"chain"`` answers: the arguments the answer replaces
        (``{"result": answer}``); may raise :class:`RefusedAnswer`.
    :param on_error: what an exception or a timeout of an implementation does.
    :param on_bad_answer: what an answer of another type (or failing ``check``) does.
    :param timeout: ``"hook"``, ``"given"`` or ``"none"`` (see the module docstring).
    :param sync: called with :meth:`~lich.plugins.calling.HookCaller.call_hook_sync`,
        each implementation inline (registration, ``lich_price_call``, ``lich_event``).
    :param awaitable: in the sync path, what an implementation's awaitable answer
        gets: ``"run"`` (run to its end on a loop of its own: registration),
        ``"schedule"`` (a task on the running loop, drained before the run
        returns: ``lich_event``) or ``"refuse"`` (a failure: the hook must be a
        plain ``def``).
    :param own_call: each implementation gets its own copy of the ``call``
        argument; changing it in place is a failure (``"refuse"``) or a warning
        (``"warn"``).
    :param config_error: what a :class:`lich.config.ConfigError` raised by an
        implementation is: a ``"failure"`` like any other, an ``"answer"``
        (collected: ``lich_check_config``'s problems) or ``"raise"``\\ d as it is.
    :param phase: the load-report phase of an ``"unload"``.
    :param once_per_run: report a plugin's failures once per run, the rest at
        debug level (an observer of every event fails on every token).
    :param failed: the report of an exception or a timeout.
    :param bad_answer: the report of a bad answer.
    :param timed_out: with ``timeout="given"``: the reason when the deadline
        passes (``{timeout}`` is the limit in seconds).
    """

    name: str
    answers: Mapping[type, Action] = field(factory=dict, converter=_answers)
    check: Callable[[Any], str | None] | None = None
    chain: Callable[[Mapping[str, Any], Any], Mapping[str, Any]] | None = None
    on_error: OnFailure = "report"
    on_bad_answer: OnFailure = "report"
    timeout: Literal["hook", "given", "none"] = "hook"
    sync: bool = False
    awaitable: Literal["run", "schedule", "refuse"] = "run"
    own_call: Literal["refuse", "warn"] | None = None
    config_error: Literal["failure", "answer", "raise"] = "failure"
    phase: UnloadPhase = "register"
    once_per_run: bool = False
    failed: str = "{hook} of plugin {plugin} failed (skipped): {error}"
    bad_answer: str = "{hook} of plugin {plugin} returned {type} (ignored)"
    timed_out: str = "timed out after {timeout:g}s"

    def action(self, answer: Any) -> Action | None:
        """What ``answer`` (not ``None``) does, or ``None`` when it is not accepted."""
        found = self.answers.get(type(answer))
        if found is not None:
            return found
        for kind, action in self.answers.items():
            if isinstance(answer, kind):
                return action
        return None


def registration(name: str, **overrides: Any) -> HookPolicy:
    """A registration hook: called once while something is assembled, outside a
    run; a plugin whose implementation raises is unloaded whole."""
    row = HookPolicy(name, sync=True, timeout="none", on_error="unload",
                     on_bad_answer="ignore")
    return evolve(row, **overrides)


def observer(name: str, **overrides: Any) -> HookPolicy:
    """An observer: every implementation is called; a failure is logged and skipped."""
    return evolve(HookPolicy(name, on_bad_answer="ignore"), **overrides)


def _callable(answer: Any) -> str | None:
    return None if callable(answer) else "not callable"


def _session_store(answer: Any) -> str | None:
    from lich.sessions import SessionStore

    return None if isinstance(answer, SessionStore) else "not a store"


def _process_runner(answer: Any) -> str | None:
    return None if callable(getattr(answer, "launch", None)) else "no launch method"


def _cost(answer: Any) -> str | None:
    if isinstance(answer, bool) or not math.isfinite(answer) or answer < 0:
        return "not a cost"
    return None


def _prepared(kwargs: Mapping[str, Any], answer: ApprovalRequest) -> Mapping[str, Any]:
    request: ApprovalRequest = kwargs["request"]
    if answer.id != request.id or answer.call != request.call or answer.tool is not request.tool:
        raise RefusedAnswer("its request changed the id, the call or the tool; only what "
                            "is shown (rules, preview) may change")
    return {"request": answer}


def _rewrite(kwargs: Mapping[str, Any], answer: Rewrite) -> Mapping[str, Any]:
    # A deep copy: the hook keeps no handle on the arguments that run.
    try:
        args = copy.deepcopy(dict(answer.args))
    except Exception as exc:
        message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise RefusedAnswer(f"its Rewrite arguments cannot be copied: {message}") from exc
    return {"call": evolve(kwargs["call"], args=args)}


def _replace_result(_kwargs: Mapping[str, Any], answer: ToolResult) -> Mapping[str, Any]:
    return {"result": answer}


def _sections(answer: Any) -> str | None:
    if isinstance(answer, InstructionSection):
        return None
    if all(isinstance(item, InstructionSection) for item in answer):
        return None
    return "not all InstructionSection"


def _edit_prompt(kwargs: Mapping[str, Any], answer: PromptEdit) -> Mapping[str, Any]:
    text = kwargs["message"] if answer.text is None else answer.text
    return {"message": f"{text}\n\n{answer.context}" if answer.context else text}


def _definitions(answer: Any) -> str | None:
    if all(isinstance(item, ToolDefinition) for item in answer):
        return None
    return "not all ToolDefinition"


def _offer(_kwargs: Mapping[str, Any], answer: Any) -> Mapping[str, Any]:
    # A name offered twice keeps its first place (and definition): one name, one tool.
    offered: dict[str, ToolDefinition] = {}
    for item in answer:
        offered.setdefault(item.name, item)
    return {"tools": tuple(offered.values())}


#: One row per ``lich_*`` hook of :mod:`lich.hookspecs`, in the order of that module.
HOOK_POLICIES: tuple[HookPolicy, ...] = (
    # -- a plugin's own hooks and tables -----------------------------------
    # Historic: pluggy calls it as each plugin registers (PluginLoader); a failure
    # there fails that plugin's registration. The row says so for the reference.
    registration("lich_add_hookspecs"),
    registration("lich_register_config_tables"),
    # -- registration ------------------------------------------------------
    registration("lich_register_tools"),
    registration("lich_register_providers"),
    registration(
        "lich_make_router", answers={object: "stop"}, check=_callable,
        config_error="raise", on_error="raise",
        failed="$.plugins: {hook} of plugin {plugin!r} failed: {error}",
        # Caught here, with the plugin's name, rather than as a bare TypeError at the
        # first model call; the next router (or none) decides instead.
        on_bad_answer="unload",
        bad_answer="{hook} returned {type}, not a chat function (an async callable "
                   "(messages, tools, options) -> ChatResult)"),
    registration(
        "lich_make_session_store", answers={object: "stop"}, check=_session_store,
        config_error="raise", on_error="raise",
        failed="$.session_store: {hook} of plugin {plugin!r} failed: {error}",
        on_bad_answer="unload",
        bad_answer="{hook} returned {type}, not a session store (see "
                   "lich.sessions.SessionStore)"),
    registration(
        "lich_make_process_runner", answers={object: "stop"}, check=_process_runner,
        config_error="raise", on_error="raise",
        failed="$.plugins: {hook} of plugin {plugin!r} failed: {error}",
        # Caught here, with the plugin's name, not at the first process start; the
        # next runner (or the direct one) decides instead.
        on_bad_answer="unload",
        bad_answer="{hook} returned {type}, not a process runner (see "
                   "lich.processes.ProcessRunner: a launch(spec) method returning an "
                   "async context manager)"),
    registration("lich_check_config", config_error="answer", phase="validate"),
    registration("lich_register_slash_commands"),
    registration("lich_register_commands"),
    # -- run time ----------------------------------------------------------
    observer("lich_run_start"),
    HookPolicy(
        # Inline, once per model call and before llm_end: a plain, fast def.
        "lich_price_call", answers={int: "stop", float: "stop"}, check=_cost,
        sync=True, timeout="none", awaitable="refuse",
        bad_answer="{hook} of plugin {plugin} returned {answer!r} (skipped); expected a "
                   "cost >= 0 in US dollars or None"),
    HookPolicy(
        # Fail open: a broken observer must not end every run (a budget plugin that
        # must fail closed catches its own errors and answers Stop).
        "lich_before_model_call", answers={Stop: "stop"},
        bad_answer="{hook} of plugin {plugin} returned {type} (ignored); expected Stop "
                   "or None"),
    HookPolicy(
        # Not decided at an Ask: a later hook may still block (a Block wins over every
        # Ask) or rewrite what the person will be asked about.
        "lich_before_tool_call", answers={Block: "stop", Ask: "collect", Rewrite: "chain"},
        chain=_rewrite, on_error="block", on_bad_answer="block", own_call="refuse",
        failed="hook_error ({plugin}): {error}",
        bad_answer="hook_error ({plugin}): {hook} returned {type}; expected Block, Ask, "
                   "Rewrite or None"),
    HookPolicy(
        # A person is slower than a hook: approval_timeout_s for all of them together.
        "lich_request_approval", answers={Approval: "stop"}, timeout="given",
        on_error="block", on_bad_answer="block",
        failed="approval_error ({plugin}): {error}",
        bad_answer="approval_error ({plugin}): {hook} returned {type}; expected Approval "
                   "or None",
        timed_out="no answer within {timeout:g}s"),
    HookPolicy(
        # It only informs the person: a failure leaves the request as it was.
        "lich_prepare_approval", answers={ApprovalRequest: "chain"}, chain=_prepared,
        bad_answer="{hook} of plugin {plugin} returned {type} (ignored); expected "
                   "ApprovalRequest or None"),
    observer("lich_approval_resolved"),
    HookPolicy(
        # Fail closed, as the before-hooks: a guard that cannot answer blocks the call.
        "lich_check_tool_call", answers={Block: "stop", Ask: "collect"},
        on_error="block", on_bad_answer="block", own_call="refuse",
        failed="hook_error ({plugin}): {error}",
        bad_answer="hook_error ({plugin}): {hook} returned {type}; expected Block, Ask or "
                   "None (it cannot rewrite)"),
    HookPolicy(
        # Its own copy of the call, as for the before-hooks: one after-hook changing
        # call.args in place must not alter what a later one (an audit log) records.
        "lich_after_tool_call", answers={ToolResult: "chain"}, chain=_replace_result,
        own_call="warn"),
    observer("lich_run_end"),
    observer("lich_shutdown"),
    observer(
        # Synchronous, as the event happens; an async implementation is scheduled.
        "lich_event", sync=True, timeout="none", awaitable="schedule", once_per_run=True,
        failed="{hook} of plugin {plugin} failed (skipped; further failures in this run "
               "are logged at debug level): {error}"),
    HookPolicy(
        # Fail open: a plugin that cannot give its sections leaves the rest of the prompt.
        "lich_instructions",
        answers={InstructionSection: "collect", list: "collect", tuple: "collect"},
        check=_sections,
        bad_answer="{hook} of plugin {plugin} returned {type} (ignored); expected an "
                   "InstructionSection, a list of them or None"),
    HookPolicy(
        # Fail closed: a prompt filter that broke must not let through what it stops.
        "lich_user_prompt", answers={Block: "stop", PromptEdit: "chain"}, chain=_edit_prompt,
        on_error="block", on_bad_answer="block", failed="hook_error ({plugin}): {error}",
        bad_answer="hook_error ({plugin}): {hook} returned {type}; expected PromptEdit, "
                   "Block or None"),
    HookPolicy(
        # Fail open: what a turn offers is not a guard (lich_check_tool_call is).
        "lich_prepare_tools", answers={list: "chain", tuple: "chain"}, check=_definitions,
        chain=_offer,
        bad_answer="{hook} of plugin {plugin} returned {type} (ignored); expected a list "
                   "of ToolDefinition or None"),
    HookPolicy(
        # Fail open: without an answer the compression happens as configured.
        "lich_before_compress", answers={Block: "stop", Compression: "stop"},
        bad_answer="{hook} of plugin {plugin} returned {type} (ignored); expected "
                   "Compression, Block or None"),
    HookPolicy(
        # Fail open: the answer stands.
        "lich_after_final", answers={FollowUp: "stop"},
        bad_answer="{hook} of plugin {plugin} returned {type} (ignored); expected "
                   "FollowUp or None"),
)


def policy_table(rows: tuple[HookPolicy, ...] = HOOK_POLICIES) -> dict[str, HookPolicy]:
    """``rows`` by hook name.

    :raises ValueError: two rows name the same hook.
    """
    table: dict[str, HookPolicy] = {}
    for row in rows:
        if row.name in table:
            raise ValueError(f"two hook policies for {row.name}")
        table[row.name] = row
    return table


def inline_hooks(table: Mapping[str, HookPolicy]) -> frozenset[str]:
    """The hooks an implementation may mark :func:`lich.hooks.runs_inline`: those
    called under a deadline (the others are called inline already)."""
    return frozenset(name for name, row in table.items() if not row.sync)
