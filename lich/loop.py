"""The think–act–observe loop. It knows a :data:`~lich.types.ChatFn` and a
:class:`ToolRunner`, nothing else: no plugins, no providers, no files.

Each turn: check for cancellation, compress if the estimate crosses the
threshold, call the model, append its reply, run the tools it asked for (one
at a time, in the order given) and append one tool message per call. A reply
without tool calls ends the run (``final``); running out of turns ends it
(``budget``), as does a ``before_call`` answer at a turn boundary; a cancel
ends it (``aborted``) wherever it lands. Tool failures
are data for the model. The caller's message list is never mutated.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, TypeVar

import attrs
from attrs import field, frozen

from lich import context
from lich.cancel import Cancelled, CancelToken
from lich.events import (
    BudgetExhausted,
    CompressEnd,
    CompressStart,
    ErrorEvent,
    Event,
    Final,
    LlmEnd,
    LlmStart,
    StoppedReason,
    ToolCallEnd,
    ToolCallStart,
    TurnEnd,
    TurnStart,
)
from lich.types import (
    AssistantMessage,
    ChatFn,
    ChatOptions,
    ChatResult,
    Message,
    ProviderError,
    SystemMessage,
    ToolCall,
    ToolDefinition,
    ToolMessage,
    ToolResult,
    Usage,
)

__all__ = [
    "COMPRESS_BACKOFF_TURNS",
    "BudgetStop",
    "LoopDeps",
    "LoopOutcome",
    "LoopParams",
    "ToolOutcome",
    "ToolRunner",
    "continue_conversation",
    "last_assistant",
    "pending_tool_calls",
    "run_conversation",
    "seed_system_prompt",
    "unless_cancelled",
]

T = TypeVar("T")


async def unless_cancelled(
    awaitable: Awaitable[T], token: CancelToken | None,
    on_cancel: Callable[[], None] | None = None,
) -> T:
    """``await awaitable`` in the calling task, unless ``token`` fires first: then
    ``on_cancel`` is called, the task is cancelled — the awaited code gets the
    ``CancelledError`` at its await and may clean up (a tool kills its process group)
    — and :class:`~lich.cancel.Cancelled` is raised. Without a token, a plain await.

    :func:`lich.cancel.race` with the same outcome and no task instead of two plus an
    ``asyncio.wait`` for every model call, tool call and hook the loop makes (B1 in
    docs/performance.md): a callback registered on the token
    (:meth:`~lich.cancel.CancelToken.on_cancel`) waits for it, the work runs where it is
    awaited, and the cancellation is made as :func:`asyncio.timeout` makes its own
    (counted with ``uncancel``), so a cancellation from elsewhere — the caller's, a
    deadline's around this — is never taken for the token's, nor swallowed.
    """
    if token is None:
        return await awaitable
    if token.cancelled:
        if inspect.iscoroutine(awaitable):
            awaitable.close()  # never started: no "never awaited" warning
        if on_cancel is not None:
            on_cancel()
        raise Cancelled
    task = asyncio.current_task()
    assert task is not None
    fired = False

    def fire() -> None:
        # Runs from the event loop, never while the awaited code runs; once it has
        # ended the registration is removed, so there is nothing left to cancel.
        nonlocal fired
        fired = True
        try:
            if on_cancel is not None:
                on_cancel()
        finally:
            # Even when on_cancel raised (its error goes to the loop's exception
            # handler): uncancel below counts on this cancel having been made.
            task.cancel()

    registration = token.on_cancel(fire)
    try:
        result = await awaitable
    except asyncio.CancelledError:
        if fired and task.uncancel() == 0:
            raise Cancelled from None
        raise
    finally:
        registration.remove()
    if fired:
        # The awaited code caught the cancellation and returned anyway: the token still
        # won, as with race (which discards such a result too).
        task.uncancel()
        raise Cancelled
    return result


COMPRESS_BACKOFF_TURNS = 3
BUDGET_EXHAUSTED_ERROR = "turn_budget_exhausted"


@frozen
class ToolOutcome:
    """What a :class:`ToolRunner` reports for one call.

    ``call`` carries the arguments the tool actually received; the plugin
    names record who rewrote, blocked or replaced.
    """

    call: ToolCall
    result: ToolResult
    rewritten_by: tuple[str, ...] = ()
    blocked_by: str | None = None
    replaced_by: str | None = None


class ToolRunner(Protocol):
    """Runs one tool call to completion; never raises (failures are results)."""

    async def __call__(self, call: ToolCall, cancel: CancelToken | None) -> ToolOutcome: ...


@frozen
class BudgetStop:
    """Why the run stops before its next model call (see :attr:`LoopDeps.before_call`)."""

    budget: str
    reason: str
    stopped_by: str | None = None


@frozen
class LoopDeps:
    """What the loop calls out to.

    ``definitions`` is asked again before every model call. ``emit`` receives
    every event; ``on_message`` every message the loop appends (for the
    transcript); ``on_compact`` the whole history after a compression.
    ``price`` gives the cost of one model answer (``None``: unknown); without
    it every cost is unknown. ``before_call(turn, usage, cost_usd)`` is awaited
    at each turn boundary and may end the run on a budget.
    """

    chat: ChatFn
    tools: ToolRunner
    definitions: Callable[[], Sequence[ToolDefinition]]
    emit: Callable[[Event], None] = lambda _event: None
    on_message: Callable[[Message], None] = lambda _message: None
    on_compact: Callable[[Sequence[Message]], None] = lambda _messages: None
    price: Callable[[ChatResult], float | None] | None = None
    before_call: (
        Callable[[int, Usage, float | None], Awaitable[BudgetStop | None]] | None
    ) = None


@frozen
class LoopParams:
    """How the loop runs. ``context_budget_tokens=None`` disables compression."""

    max_turns: int
    system_prompt: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    context_budget_tokens: int | None = None
    compress_threshold: float = 0.8
    keep_recent: int = context.KEEP_RECENT
    stream: bool = False
    cancel: CancelToken | None = field(default=None, eq=False)


@frozen
class LoopOutcome:
    """How the loop ended.

    ``messages`` is the working transcript (each message once); ``final`` the
    last assistant message; ``result`` the last model answer when the run
    ended on ``final``; ``usage`` the run's own token usage; ``cost_usd`` its
    price (``None`` once a call had no known price); ``budget`` the budget
    stop, when a ``before_call`` ended the run.
    """

    messages: tuple[Message, ...]
    final: AssistantMessage | None
    result: ChatResult | None
    turns_used: int
    stopped_reason: StoppedReason
    usage: Usage = field(factory=Usage)
    cost_usd: float | None = None
    budget: BudgetStop | None = None


def seed_system_prompt(messages: Sequence[Message], system_prompt: str | None) -> list[Message]:
    """A copy of ``messages`` whose first system message is ``system_prompt``.

    Prepended when there is none, replaced when it differs, left alone when equal.
    """
    out = list(messages)
    if system_prompt is None:
        return out
    for i, m in enumerate(out):
        if isinstance(m, SystemMessage):
            if m.content != system_prompt:
                out[i] = SystemMessage(system_prompt)
            return out
    return [SystemMessage(system_prompt), *out]


def last_assistant(messages: Sequence[Message]) -> AssistantMessage | None:
    """The latest assistant message of ``messages``, if any."""
    for m in reversed(messages):
        if isinstance(m, AssistantMessage):
            return m
    return None


class _History:
    """The working transcript with a running token estimate (no re-counting per turn)."""

    __slots__ = ("messages", "tokens")

    def __init__(self, messages: list[Message]) -> None:
        self.messages = messages
        self.tokens = sum(context.message_tokens(m) for m in messages)

    def append(self, message: Message) -> None:
        self.messages.append(message)
        self.tokens += context.message_tokens(message)

    def replace(self, messages: Sequence[Message]) -> None:
        self.messages = list(messages)
        self.tokens = sum(context.message_tokens(m) for m in self.messages)

    def non_system(self) -> int:
        return sum(1 for m in self.messages if not isinstance(m, SystemMessage))


async def run_conversation(
    deps: LoopDeps, messages: Sequence[Message], params: LoopParams
) -> LoopOutcome:
    """Run the loop over a copy of ``messages``; see the module docstring.

    A model call that fails for good emits ``error`` and re-raises the
    :class:`~lich.types.ProviderError`; everything else ends in a
    :class:`LoopOutcome`.
    """
    history = _History(seed_system_prompt(messages, params.system_prompt))
    cancel = params.cancel
    emit = deps.emit
    usage = Usage()
    options = ChatOptions(
        temperature=params.temperature,
        max_tokens=params.max_tokens,
        stream=params.stream,
        on_event=emit,
    )
    schema_cache: tuple[int, int] = (0, 0)  # (id of definitions, tokens)
    next_compress_turn = 1
    turn = 0
    price = deps.price
    # Nothing prices calls: every cost is unknown, from the start.
    cost: float | None = 0.0 if price is not None else None

    def outcome(
        reason: StoppedReason,
        turns: int,
        result: ChatResult | None = None,
        budget_stop: BudgetStop | None = None,
    ) -> LoopOutcome:
        return LoopOutcome(
            tuple(history.messages), last_assistant(history.messages), result, turns, reason,
            usage, cost, budget_stop,
        )

    def priced(answer: ChatResult) -> float | None:
        nonlocal cost
        call_cost = price(answer) if price is not None else None
        cost = None if cost is None or call_cost is None else cost + call_cost
        return call_cost

    def append(message: Message) -> None:
        history.append(message)
        deps.on_message(message)

    for turn in range(1, max(0, params.max_turns) + 1):
        if cancel is not None and cancel.cancelled:
            return outcome("aborted", turn - 1)
        if deps.before_call is not None:
            # At the turn boundary, before compression and the model call: a budget never
            # cuts a call or a stream short, and the transcript ends on a whole turn.
            try:
                stop = await unless_cancelled(deps.before_call(turn, usage, cost), cancel)
            except Cancelled:
                return outcome("aborted", turn - 1)
            if stop is not None:
                emit(BudgetExhausted(turn - 1, stop.budget, stop.reason, stop.stopped_by))
                if turn > 1:
                    emit(TurnEnd(turn - 1))
                return outcome("budget", turn - 1, budget_stop=stop)
        emit(TurnStart(turn))
        definitions = deps.definitions()
        if id(definitions) != schema_cache[0]:
            schema_cache = (id(definitions), context.schema_tokens(definitions))

        budget = params.context_budget_tokens
        if budget is not None and turn >= next_compress_turn:
            estimate = history.tokens + schema_cache[1]
            if (
                estimate >= budget * params.compress_threshold
                and history.non_system() > params.keep_recent
            ):
                emit(CompressStart(estimate))
                try:
                    compressed = await unless_cancelled(
                        context.compress_messages(
                            deps.chat, history.messages, keep_recent=params.keep_recent
                        ),
                        cancel,
                    )
                except Cancelled:
                    emit(CompressEnd(0, estimate, ok=False))
                    return outcome("aborted", turn)
                usage = usage + compressed.usage
                compress_cost = (priced(compressed.result) if compressed.result is not None
                                 else None)
                if compressed.ok and compressed.summary_chars:
                    history.replace(compressed.messages)
                    # A snapshot: the working list keeps growing after this call.
                    deps.on_compact(tuple(history.messages))
                after = history.tokens + schema_cache[1]
                emit(
                    CompressEnd(
                        compressed.summary_chars, after, ok=compressed.ok, usage=compressed.usage,
                        cost_usd=compress_cost,
                    )
                )
                if after >= budget * params.compress_threshold:
                    # It did not help (or failed): do not pay for a summary every turn.
                    next_compress_turn = turn + COMPRESS_BACKOFF_TURNS + 1

        emit(LlmStart(turn))
        try:
            result = await unless_cancelled(
                deps.chat(list(history.messages), definitions, options), cancel)
        except Cancelled:
            # The turn began (turn_start was emitted): it counts, as it does for a
            # cancel during a tool. Only a cancel seen before a turn starts does not.
            return outcome("aborted", turn)
        except ProviderError as exc:
            emit(ErrorEvent(exc.kind, str(exc)))
            raise
        except Exception as exc:
            emit(ErrorEvent("unknown", f"{type(exc).__name__}: {exc}"))
            raise
        if not result.usage.reported:
            # No usage from the provider: estimate it (marked so), or --max-tokens,
            # --max-cost and a gateway's daily budget would count this call as free.
            result = attrs.evolve(result, usage=context.estimate_usage(
                history.tokens + schema_cache[1], result.message))
        usage = usage + result.usage
        emit(LlmEnd(turn, result, priced(result)))
        message = result.message
        append(message)

        if not message.tool_calls:
            emit(Final(message, result))
            emit(TurnEnd(turn))
            return outcome("final", turn, result)

        last_turn = turn >= params.max_turns
        for index, call in enumerate(message.tool_calls):
            emit(ToolCallStart(turn, call))
            started = time.perf_counter()
            if last_turn:
                ran = ToolOutcome(call, ToolResult.failure(BUDGET_EXHAUSTED_ERROR))
            elif cancel is not None and cancel.cancelled:
                ran = ToolOutcome(call, ToolResult.failure("cancelled"))
            else:
                ran = await deps.tools(call, cancel)
            result_msg = ToolMessage(
                tool_call_id=call.id,
                name=call.name,
                content=ran.result.to_content(),
                is_error=not ran.result.ok,
            )
            append(result_msg)
            emit(
                ToolCallEnd(
                    turn,
                    ran.call,
                    ran.result,
                    duration_ms=round((time.perf_counter() - started) * 1000, 3),
                    rewritten_by=ran.rewritten_by,
                    blocked_by=ran.blocked_by,
                    replaced_by=ran.replaced_by,
                )
            )
            if cancel is not None and cancel.cancelled:
                # Close the remaining calls so the transcript stays valid, then stop.
                for rest in message.tool_calls[index + 1 :]:
                    emit(ToolCallStart(turn, rest))
                    cancelled = ToolResult.failure("cancelled")
                    append(ToolMessage(rest.id, rest.name, cancelled.to_content(), True))
                    emit(ToolCallEnd(turn, rest, cancelled))
                return outcome("aborted", turn)

    turns = max(0, params.max_turns)
    emit(BudgetExhausted(params.max_turns, "max_turns",
                         f"max_turns: all {turns} turn{'s' if turns != 1 else ''} used"))
    emit(TurnEnd(params.max_turns))
    return outcome("budget", params.max_turns)


def pending_tool_calls(messages: Sequence[Message]) -> list[ToolCall]:
    """The tool calls of the last assistant message that have no result after it.

    What a run that died in the middle of its tools leaves (the loop runs them in
    order, so the calls without a result are the last ones).
    """
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AssistantMessage):
            answered = {m.tool_call_id for m in messages[index + 1:]
                        if isinstance(m, ToolMessage)}
            return [c for c in message.tool_calls if c.id not in answered]
        if not isinstance(message, ToolMessage):
            return []
    return []


async def continue_conversation(
    deps: LoopDeps,
    messages: Sequence[Message],
    params: LoopParams,
    *,
    rerun: Callable[[ToolCall], bool],
    interrupted_result: ToolResult,
) -> LoopOutcome:
    """Finish a turn an earlier run began and did not end, then run the loop on.

    ``messages`` is the conversation as recorded, ending inside the turn. First
    the calls of its last assistant message that have no result are settled, in
    order, as turn 0: a call ``rerun`` allows runs (through ``deps.tools``, as
    the loop would run it); any other gets ``interrupted_result``, without
    running. Then, when the history already ends in an answer without tool
    calls, that answer is the turn's: the outcome is ``final`` with no model
    call. Otherwise :func:`run_conversation` goes on from there (with a fresh
    ``max_turns``).
    """
    history = seed_system_prompt(messages, params.system_prompt)
    cancel = params.cancel
    pending = pending_tool_calls(history)
    for call in pending:
        deps.emit(ToolCallStart(0, call))
        started = time.perf_counter()
        if cancel is not None and cancel.cancelled:
            ran = ToolOutcome(call, ToolResult.failure("cancelled"))
        elif rerun(call):
            ran = await deps.tools(call, cancel)
        else:
            ran = ToolOutcome(call, interrupted_result)
        result_msg = ToolMessage(call.id, call.name, ran.result.to_content(), not ran.result.ok)
        history.append(result_msg)
        deps.on_message(result_msg)
        deps.emit(ToolCallEnd(
            0, ran.call, ran.result, duration_ms=round((time.perf_counter() - started) * 1000, 3),
            rewritten_by=ran.rewritten_by, blocked_by=ran.blocked_by, replaced_by=ran.replaced_by))
    if cancel is not None and cancel.cancelled:
        return LoopOutcome(tuple(history), last_assistant(history), None, 0, "aborted",
                           Usage(), 0.0 if deps.price is not None else None)
    last = history[-1] if history else None
    if not pending and isinstance(last, AssistantMessage) and not last.tool_calls:
        # The answer was recorded before the run stopped: it is the turn's answer.
        return LoopOutcome(tuple(history), last, None, 0, "final", Usage(),
                           0.0 if deps.price is not None else None)
    return await run_conversation(deps, history, params)
