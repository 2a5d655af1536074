"""Agent events: what happens during a run, as data.

Each event is a frozen attrs class whose ``type`` names it. During a run the
:class:`RunEmitter` wraps every event in an :class:`Envelope`
``{run_id, session_id, seq, ts}`` and hands it to the run's subscribers and to
the ``lich_event`` hook. :func:`lich.serialization.envelope_to_json` gives the
JSON form documented in ``docs/events.md`` (schema version
:data:`EVENT_SCHEMA_VERSION`).

Providers and routers emit the events that only they can see (``text_delta``,
``retry``, ``failover``, ``stream_reset``) through
:meth:`lich.types.ChatOptions.emit`.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeAlias

from attrs import field, frozen

from lich.types import AssistantMessage, ChatResult, ToolCall, ToolResult, Usage

__all__ = [
    "EVENT_SCHEMA_VERSION",
    "ApprovalRequested",
    "ApprovalResolved",
    "BudgetExhausted",
    "CompressEnd",
    "CompressSkipped",
    "CompressStart",
    "Envelope",
    "ErrorEvent",
    "Event",
    "EventHandler",
    "Failover",
    "Final",
    "InstructionReport",
    "InstructionsCut",
    "LlmEnd",
    "LlmStart",
    "PromptBlocked",
    "Retry",
    "RunContinued",
    "RunEmitter",
    "RunEnd",
    "RunStart",
    "StoppedReason",
    "StreamReset",
    "TextDelta",
    "ToolCallEnd",
    "ToolCallStart",
    "ToolOutput",
    "TurnEnd",
    "TurnStart",
]

log = logging.getLogger("lich.events")

EVENT_SCHEMA_VERSION = 2
StoppedReason: TypeAlias = Literal["final", "budget", "aborted", "error", "blocked"]


@frozen
class InstructionReport:
    """One section of the run's system prompt as assembled (``lich_instructions``):
    where it came from, its priority, its estimated tokens, and whether it was
    kept or cut to fit ``instructions_budget_tokens``."""

    source: str
    priority: int
    tokens: int
    cacheable: bool = True
    kept: bool = True


@frozen
class RunStart:
    """A run begins. ``instructions`` lists every section of the system prompt, the
    ones cut to fit the budget included (``kept: false``; each cut also has its own
    ``instructions_cut`` event)."""

    input: str
    work_dir: str
    model: str = ""
    instructions: tuple[InstructionReport, ...] = ()
    type: Literal["run_start"] = "run_start"


@frozen
class InstructionsCut:
    """A section of the system prompt was left out: with it the prompt would pass
    ``budget_tokens`` (``instructions_budget_tokens``). Sections are cut lowest
    ``priority`` first, the later of equal ones first."""

    source: str
    priority: int
    tokens: int
    budget_tokens: int
    type: Literal["instructions_cut"] = "instructions_cut"


@frozen
class PromptBlocked:
    """A ``lich_user_prompt`` hook refused what the user submitted: the model is not
    called and the run ends with ``stopped_reason="blocked"``."""

    reason: str
    blocked_by: str
    type: Literal["prompt_blocked"] = "prompt_blocked"


@frozen
class TurnStart:
    """A turn (one model call and the tools it asks for) begins."""

    turn: int
    type: Literal["turn_start"] = "turn_start"


@frozen
class CompressStart:
    """Context compression begins; ``estimated_tokens`` is the estimate that triggered it."""

    estimated_tokens: int
    type: Literal["compress_start"] = "compress_start"


@frozen
class CompressEnd:
    """Compression ended. ``summary_chars`` is 0 when it failed or had nothing to do;
    ``usage`` is what the summarizer call cost (it is part of the run's usage), and
    ``cost_usd`` its price (``None``: unknown, or no summarizer call was made)."""

    summary_chars: int
    estimated_tokens: int = 0
    ok: bool = True
    usage: Usage = field(factory=Usage)
    cost_usd: float | None = None
    type: Literal["compress_end"] = "compress_end"


@frozen
class CompressSkipped:
    """A compression that was due did not happen: ``skipped_by`` (a
    ``lich_before_compress`` hook) vetoed it; it is not tried again for three turns."""

    estimated_tokens: int
    reason: str
    skipped_by: str
    type: Literal["compress_skipped"] = "compress_skipped"


@frozen
class LlmStart:
    """A model call is about to be made."""

    turn: int
    type: Literal["llm_start"] = "llm_start"


@frozen
class TextDelta:
    """A piece of streamed answer text."""

    text: str
    provider: str = ""
    type: Literal["text_delta"] = "text_delta"


@frozen
class StreamReset:
    """Text streamed so far for this model call is void (the router failed over mid-stream)."""

    provider: str
    reason: str
    type: Literal["stream_reset"] = "stream_reset"


@frozen
class Retry:
    """The router retries a provider in place after ``delay_s``."""

    provider: str
    attempt: int
    kind: str
    delay_s: float
    message: str = ""
    type: Literal["retry"] = "retry"


@frozen
class Failover:
    """The router gives up on one provider and moves to the next."""

    from_provider: str
    to_provider: str
    kind: str
    message: str = ""
    type: Literal["failover"] = "failover"


@frozen
class LlmEnd:
    """A model call returned. ``cost_usd`` is its price in US dollars, as the
    ``lich_price_call`` hook answered (``None``: unknown, or nothing prices calls)."""

    turn: int
    result: ChatResult
    cost_usd: float | None = None
    type: Literal["llm_end"] = "llm_end"


@frozen
class ToolCallStart:
    """A tool call is about to go through the hooks and the executor."""

    turn: int
    call: ToolCall
    type: Literal["tool_call_start"] = "tool_call_start"


@frozen
class ToolOutput:
    """Output a running tool reported before it ended (``ctx.output``): ``text`` is
    what came since the previous ``tool_output`` of the same call, ``call_id``
    the call's id.

    For watching a call as it runs, nothing more: the executor coalesces a tool's
    reports into at most one event per :data:`lich.executor.LIVE_OUTPUT_INTERVAL_S`
    and stops at the tool's output cap, the transcript does not keep these, and
    the call's result (``tool_call_end``) is what the model reads. The text is
    what the tool printed, before ``lich_after_tool_call`` hooks see the result.
    """

    call_id: str
    text: str
    type: Literal["tool_output"] = "tool_output"


@frozen
class ToolCallEnd:
    """A tool call finished.

    ``call`` carries the arguments the tool actually received (after every
    rewrite). ``rewritten_by`` names, in order, the plugins whose
    ``lich_before_tool_call`` rewrote the arguments; ``blocked_by`` the plugin
    that blocked the call; ``replaced_by`` the plugin whose
    ``lich_after_tool_call`` replaced the result. ``duration_ms`` is the call's own
    time, without ``approval_wait_ms``, the time it waited for a person's answer (0
    when nobody was asked).
    """

    turn: int
    call: ToolCall
    result: ToolResult
    duration_ms: float = 0.0
    rewritten_by: tuple[str, ...] = ()
    blocked_by: str | None = None
    replaced_by: str | None = None
    approval_wait_ms: float = 0.0
    type: Literal["tool_call_end"] = "tool_call_end"


@frozen
class ApprovalRequested:
    """A tool call waits for a person's approval: a before-hook answered ``Ask``.

    ``id`` is the request's short id (what the gateway's ``/approve`` names);
    ``rules`` what a ``session``/``always`` approval grants; ``timeout_s`` how long
    lich waits (``None``: no limit). Always followed by one ``approval_resolved``
    with the same ``id``.
    """

    id: str
    call: ToolCall
    reason: str
    asked_by: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()
    timeout_s: float | None = None
    type: Literal["approval_requested"] = "approval_requested"


@frozen
class ApprovalResolved:
    """How an approval request ended.

    ``approver`` is who answered (``terminal``, ``tui``, ``--yes``, a chat user,
    ``session`` for a call an earlier ``session``/``always`` approval covers), or
    ``None`` when no one did (no approver, a timeout, a cancel). ``args`` are the
    arguments the person edited (``None``: unchanged); ``message`` the approver's
    message, or for a denial the reason the model receives. ``waited_ms`` is how
    long the decision took.
    """

    id: str
    call_id: str
    approved: bool
    scope: Literal["once", "session", "always"] = "once"
    approver: str | None = None
    args: Mapping[str, Any] | None = None
    message: str | None = None
    waited_ms: float = 0.0
    type: Literal["approval_resolved"] = "approval_resolved"


@frozen
class Final:
    """The model answered without asking for tools."""

    message: AssistantMessage
    result: ChatResult
    type: Literal["final"] = "final"


@frozen
class BudgetExhausted:
    """The run stopped on a budget: it used all its turns (``budget="max_turns"``),
    or a ``lich_before_model_call`` hook stopped it before the next model call.

    ``budget`` names the budget (``max_turns``, ``max_cost_usd``,
    ``max_total_tokens``, or what the stopping plugin calls its own), ``reason``
    says what was spent against what, and ``stopped_by`` is the plugin that
    stopped the run (``None`` for ``max_turns``, which the loop enforces).
    """

    turns_used: int
    budget: str = "max_turns"
    reason: str = ""
    stopped_by: str | None = None
    type: Literal["budget_exhausted"] = "budget_exhausted"


@frozen
class RunContinued:
    """A ``lich_after_final`` hook did not accept the final answer of ``turn``: the run
    goes on, with ``prompt`` as the next user message."""

    turn: int
    prompt: str
    continued_by: str
    type: Literal["run_continued"] = "run_continued"


@frozen
class TurnEnd:
    """A turn ended; every ``turn_start`` has one, whatever ended the turn (its tools
    done, a final answer, a budget, a cancel, an error)."""

    turn: int
    type: Literal["turn_end"] = "turn_end"


@frozen
class ErrorEvent:
    """A model call failed for good; the run ends with ``stopped_reason="error"``."""

    kind: str
    message: str
    type: Literal["error"] = "error"


@frozen
class RunEnd:
    """A run ended, whatever the reason. ``cost_usd`` is the sum of the run's priced
    model calls, ``None`` as soon as one of them had no known price (a partial sum
    would read as the whole cost)."""

    stopped_reason: StoppedReason
    turns_used: int
    usage: Usage
    error: str | None = None
    cost_usd: float | None = None
    type: Literal["run_end"] = "run_end"


Event: TypeAlias = (
    RunStart
    | TurnStart
    | CompressStart
    | CompressSkipped
    | CompressEnd
    | LlmStart
    | TextDelta
    | StreamReset
    | Retry
    | Failover
    | LlmEnd
    | ToolCallStart
    | ToolOutput
    | ApprovalRequested
    | ApprovalResolved
    | ToolCallEnd
    | Final
    | RunContinued
    | BudgetExhausted
    | TurnEnd
    | ErrorEvent
    | InstructionsCut
    | PromptBlocked
    | RunEnd
)


@frozen
class Envelope:
    """An event as delivered: which run, which session, its order and time."""

    run_id: str
    session_id: str
    seq: int
    ts: float
    event: Event

    @property
    def type(self) -> str:
        """The wrapped event's type."""
        return self.event.type


EventHandler: TypeAlias = Callable[[Envelope], None]


class RunEmitter:
    """Numbers and stamps the events of one run and hands them to subscribers.

    Handlers are called synchronously in subscription order. A handler that
    raises is logged and skipped: an observer never breaks a run.
    """

    __slots__ = ("_handlers", "_seq", "run_id", "session_id")

    def __init__(self, run_id: str, session_id: str) -> None:
        self.run_id = run_id
        self.session_id = session_id
        self._seq = itertools.count(1)
        self._handlers: list[EventHandler] = []

    def subscribe(self, handler: EventHandler) -> Callable[[], None]:
        """Add ``handler``; returns a function that removes it."""
        self._handlers.append(handler)

        def unsubscribe() -> None:
            if handler in self._handlers:
                self._handlers.remove(handler)

        return unsubscribe

    def emit(self, event: Event) -> Envelope:
        """Wrap ``event`` and deliver it to every handler."""
        envelope = Envelope(self.run_id, self.session_id, next(self._seq), time.time(), event)
        for handler in tuple(self._handlers):
            try:
                handler(envelope)
            except Exception:
                log.exception("event handler %r raised on %s; skipped", handler, event.type)
        return envelope
