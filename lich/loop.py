"""The think–act–observe loop. It knows a :data:`~lich.types.ChatFn` and a
:class:`ToolRunner`, nothing else: no plugins, no providers, no files.

Each turn: check for cancellation, compress if the estimate crosses the
threshold, call the model, append its reply, run the tools it asked for (one
at a time, in the order given) and append one tool message per call. A reply
without tool calls ends the run (``final``); running out of turns ends it
(``budget``), as does a ``before_call`` answer at a turn boundary; a cancel
ends it (``aborted``) wherever it lands. Tool failures
are data for the model. The caller's message list is never mutated.

Every ``turn_start`` is paired with one ``turn_end``. The plugins' say in a run
comes in through :class:`LoopDeps` callbacks only (the loop knows no plugin):
which tools a turn offers (``prepare_tools``), whether and how a compression
happens (``before_compress``), whether a final answer ends the run
(``after_final``), and a budget stop (``before_call``).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol, TypeVar

import attrs
from attrs import field, frozen

from lich import context
from lich.cancel import Cancelled, CancelToken
from lich.events import (
    BudgetExhausted,
    CompressEnd,
    CompressSkipped,
    CompressStart,
    ErrorEvent,
    Event,
    Final,
    LlmEnd,
    LlmStart,
    RunContinued,
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
    UserMessage,
)

__all__ = [
    "COMPRESS_BACKOFF_TURNS",
    "BudgetStop",
    "CompressPlan",
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
    names record who rewrote, blocked or replaced. ``approval_wait_ms`` is how long
    the call waited for a person's answer (0 when nobody was asked): the loop reports
    it apart from the call's own run time.
    """

    call: ToolCall
    result: ToolResult
    rewritten_by: tuple[str, ...] = ()
    blocked_by: str | None = None
    replaced_by: str | None = None
    approval_wait_ms: float = 0.0


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
class CompressPlan:
    """What :attr:`LoopDeps.before_compress` decides about one compression.

    ``skipped_by`` set: the compression does not happen (``reason`` says why, on
    the ``compress_skipped`` event) and is not tried again for
    :data:`COMPRESS_BACKOFF_TURNS` turns. Otherwise it happens, keeping
    ``keep_recent`` messages verbatim (``None``: the run's own) and telling the
    summariser to keep ``focus`` in particular (``None``: nothing more).
    """

    skipped_by: str | None = None
    reason: str | None = None
    keep_recent: int | None = None
    focus: str | None = None


@frozen
class LoopDeps:
    """What the loop calls out to.

    ``definitions`` is asked again before every model call. ``emit`` receives
    every event; ``on_message`` every message the loop appends (for the
    transcript); ``on_compact`` the whole history after a compression.
    ``price`` gives the cost of one model answer (``None``: unknown); without
    it every cost is unknown. ``before_call(turn, usage, cost_usd)`` is awaited
    at each turn boundary and may end the run on a budget.

    The optional steps plugins take part in (``None``: the step is not taken):

    * ``prepare_tools(turn, definitions)`` gives the definitions offered this
      turn. A call of a name not offered is answered ``unknown_tool`` without
      running; a definition whose :attr:`~lich.types.ToolDefinition.alias_of` is
      set runs that tool (a rename).
    * ``before_compress(messages)`` decides a compression that is due
      (:class:`CompressPlan`).
    * ``after_final(turn, outcome)`` is asked after a final answer while turns
      are left: ``(prompt, plugin)`` continues the run with ``prompt`` as the next
      user message (``run_continued`` is emitted), ``None`` accepts the answer.
    * ``compress_chat`` is the summariser's model (``chat`` by default).
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
    prepare_tools: (
        Callable[[int, Sequence[ToolDefinition]], Awaitable[Sequence[ToolDefinition]]] | None
    ) = None
    before_compress: Callable[[Sequence[Message]], Awaitable[CompressPlan]] | None = None
    after_final: (
        Callable[[int, LoopOutcome], Awaitable[tuple[str, str] | None]] | None
    ) = None
    compress_chat: ChatFn | None = None


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


def _cancelled(token: CancelToken | None) -> bool:
    return token is not None and token.cancelled


async def _settle_call(
    deps: LoopDeps,
    turn: int,
    call: ToolCall,
    append: Callable[[Message], None],
    decide: Callable[[ToolCall], ToolOutcome | None],
    cancel: CancelToken | None,
    route: Callable[[ToolCall], ToolCall | ToolResult] | None = None,
) -> None:
    """One tool call from ``tool_call_start`` to its tool message and ``tool_call_end``:
    what both the loop and a continued turn do for every call.

    ``decide`` may settle the call without running it (the turn budget is spent, the
    run was cancelled, a continued turn's call must not run twice); otherwise it runs
    through ``deps.tools``. ``route`` maps the name the model used to the tool that
    runs (:attr:`LoopDeps.prepare_tools`), or answers a call of a tool not offered.
    The tool message carries the model's own call id and name.
    """
    deps.emit(ToolCallStart(turn, call))
    started = time.perf_counter()
    ran = decide(call)
    if ran is None:
        routed = route(call) if route is not None else call
        if isinstance(routed, ToolResult):
            ran = ToolOutcome(call, routed)
        else:
            ran = await deps.tools(routed, cancel)
    append(ToolMessage(call.id, call.name, ran.result.to_content(), not ran.result.ok))
    # The call's own time: a person's answer may take minutes for a 10 ms write.
    took_ms = (time.perf_counter() - started) * 1000 - ran.approval_wait_ms
    deps.emit(ToolCallEnd(
        turn, ran.call, ran.result, duration_ms=round(max(0.0, took_ms), 3),
        rewritten_by=ran.rewritten_by, blocked_by=ran.blocked_by, replaced_by=ran.replaced_by,
        approval_wait_ms=ran.approval_wait_ms))


class _Offer:
    """The tools offered to the model this turn, and where a call of each name goes."""

    __slots__ = ("definitions", "routes", "tokens")

    def __init__(self, definitions: Sequence[ToolDefinition], tokens: int,
                 routes: Mapping[str, str] | None) -> None:
        self.definitions = definitions
        self.tokens = tokens
        #: offered name -> registered name; ``None``: every registered tool, as named.
        self.routes = routes

    def route(self, call: ToolCall) -> ToolCall | ToolResult:
        assert self.routes is not None
        target = self.routes.get(call.name)
        if target is None:
            return ToolResult.failure(f"unknown_tool: {call.name} (not offered this turn)")
        return call if target == call.name else attrs.evolve(call, name=target)


class _Loop:
    """One run of the loop over its working history (see :func:`run_conversation`).

    Each step is a method: :meth:`_boundary` (cancel and budget checks at a turn
    boundary), :meth:`_compress`, :meth:`_call_model` and :meth:`_run_tools`.
    Every ``turn_start`` is paired with one ``turn_end``, whatever ends the turn:
    a turn that goes on to the next one ends at the next boundary (after its budget
    check, so a budget stop reads ``budget_exhausted, turn_end``), and one the run
    ends in is ended on the way out (:meth:`run`'s ``finally``).
    """

    def __init__(self, deps: LoopDeps, messages: Sequence[Message], params: LoopParams) -> None:
        self.deps = deps
        self.params = params
        self.cancel = params.cancel
        self.history = _History(seed_system_prompt(messages, params.system_prompt))
        self.usage = Usage()
        # Nothing prices calls: every cost is unknown, from the start.
        self.cost: float | None = 0.0 if deps.price is not None else None
        self.options = ChatOptions(temperature=params.temperature, max_tokens=params.max_tokens,
                                   stream=params.stream, on_event=deps.emit)
        self.next_compress_turn = 1
        self.open_turn: int | None = None
        self._schema: tuple[int, int] = (0, 0)  # (id of definitions, their tokens)

    # -- bookkeeping -------------------------------------------------------------------

    def outcome(self, reason: StoppedReason, turns: int, result: ChatResult | None = None,
                budget: BudgetStop | None = None) -> LoopOutcome:
        messages = self.history.messages
        return LoopOutcome(tuple(messages), last_assistant(messages), result, turns, reason,
                           self.usage, self.cost, budget)

    def priced(self, answer: ChatResult) -> float | None:
        price = self.deps.price
        call_cost = price(answer) if price is not None else None
        self.cost = None if self.cost is None or call_cost is None else self.cost + call_cost
        return call_cost

    def append(self, message: Message) -> None:
        self.history.append(message)
        self.deps.on_message(message)

    def end_turn(self) -> None:
        if self.open_turn is not None:
            self.deps.emit(TurnEnd(self.open_turn))
            self.open_turn = None

    # -- the loop ----------------------------------------------------------------------

    async def run(self) -> LoopOutcome:
        try:
            return await self._turns()
        finally:
            self.end_turn()

    async def _turns(self) -> LoopOutcome:
        params = self.params
        for turn in range(1, max(0, params.max_turns) + 1):
            stopped = await self._boundary(turn)
            if stopped is not None:
                return stopped
            self.end_turn()
            self.open_turn = turn
            self.deps.emit(TurnStart(turn))
            offer = await self._offer(turn)
            if not await self._compress(turn, offer):
                return self.outcome("aborted", turn)
            result = await self._call_model(turn, offer)
            if result is None:
                # The turn began (turn_start was emitted): it counts, as it does for a
                # cancel during a tool. Only a cancel seen before a turn starts does not.
                return self.outcome("aborted", turn)
            message = result.message
            if not message.tool_calls:
                self.deps.emit(Final(message, result))
                if turn < params.max_turns and await self._follow_up(turn, result):
                    continue
                return self.outcome("final", turn, result)
            if not await self._run_tools(turn, message.tool_calls, offer):
                return self.outcome("aborted", turn)
        turns = max(0, params.max_turns)
        self.deps.emit(BudgetExhausted(
            params.max_turns, "max_turns",
            f"max_turns: all {turns} turn{'s' if turns != 1 else ''} used"))
        return self.outcome("budget", params.max_turns)

    async def _boundary(self, turn: int) -> LoopOutcome | None:
        """Before turn ``turn``: the outcome that ends the run here (a cancel, a budget
        stop), or ``None`` to go on."""
        if _cancelled(self.cancel):
            return self.outcome("aborted", turn - 1)
        before_call = self.deps.before_call
        if before_call is None:
            return None
        # Before compression and the model call: a budget never cuts a call or a
        # stream short, and the transcript ends on a whole turn.
        try:
            stop = await unless_cancelled(before_call(turn, self.usage, self.cost), self.cancel)
        except Cancelled:
            return self.outcome("aborted", turn - 1)
        if stop is None:
            return None
        self.deps.emit(BudgetExhausted(turn - 1, stop.budget, stop.reason, stop.stopped_by))
        return self.outcome("budget", turn - 1, budget=stop)

    async def _offer(self, turn: int) -> _Offer:
        """The tool definitions of this turn (asked again every turn), with their tokens
        counted once per definitions object."""
        definitions: Sequence[ToolDefinition] = self.deps.definitions()
        routes: dict[str, str] | None = None
        if self.deps.prepare_tools is not None:
            definitions = await self.deps.prepare_tools(turn, definitions)
            routes = {d.name: d.alias_of or d.name for d in definitions}
        if id(definitions) != self._schema[0]:
            self._schema = (id(definitions), context.schema_tokens(definitions))
        return _Offer(definitions, self._schema[1], routes)

    async def _compress(self, turn: int, offer: _Offer) -> bool:
        """Compress the history when its estimate crosses the threshold; ``False``:
        cancelled meanwhile."""
        params, deps, history = self.params, self.deps, self.history
        budget = params.context_budget_tokens
        if budget is None or turn < self.next_compress_turn:
            return True
        estimate = history.tokens + offer.tokens
        if (estimate < budget * params.compress_threshold
                or history.non_system() <= params.keep_recent):
            return True
        plan = CompressPlan()
        if deps.before_compress is not None:
            try:
                plan = await unless_cancelled(
                    deps.before_compress(tuple(history.messages)), self.cancel)
            except Cancelled:
                return False
            if plan.skipped_by is not None:
                deps.emit(CompressSkipped(estimate, plan.reason or "", plan.skipped_by))
                self.next_compress_turn = turn + COMPRESS_BACKOFF_TURNS + 1
                return True
        deps.emit(CompressStart(estimate))
        try:
            compressed = await unless_cancelled(
                context.compress_messages(
                    deps.compress_chat or deps.chat, history.messages,
                    keep_recent=plan.keep_recent or params.keep_recent, focus=plan.focus),
                self.cancel,
            )
        except Cancelled:
            deps.emit(CompressEnd(0, estimate, ok=False))
            return False
        self.usage = self.usage + compressed.usage
        cost = self.priced(compressed.result) if compressed.result is not None else None
        if compressed.ok and compressed.summary_chars:
            # The system prompt (the instructions in it) is pinned: put back verbatim
            # whatever a summary does, never summarised away.
            history.replace(seed_system_prompt(compressed.messages, params.system_prompt))
            # A snapshot: the working list keeps growing after this call.
            deps.on_compact(tuple(history.messages))
        after = history.tokens + offer.tokens
        deps.emit(CompressEnd(compressed.summary_chars, after, ok=compressed.ok,
                              usage=compressed.usage, cost_usd=cost))
        if after >= budget * params.compress_threshold:
            # It did not help (or failed): do not pay for a summary every turn.
            self.next_compress_turn = turn + COMPRESS_BACKOFF_TURNS + 1
        return True

    async def _call_model(self, turn: int, offer: _Offer) -> ChatResult | None:
        """The turn's model call; its answer is appended. ``None``: cancelled."""
        emit = self.deps.emit
        emit(LlmStart(turn))
        try:
            result = await unless_cancelled(
                self.deps.chat(list(self.history.messages), offer.definitions, self.options),
                self.cancel)
        except Cancelled:
            return None
        except ProviderError as exc:
            emit(ErrorEvent(exc.kind, str(exc)))
            raise
        except Exception as exc:
            emit(ErrorEvent("unknown", f"{type(exc).__name__}: {exc}"))
            raise
        usage = result.usage
        if not usage.estimated and not (usage.prompt_tokens and usage.completion_tokens):
            # No usage from the provider, or only part of it (a cached prompt's count
            # left out, a lost final stream chunk, `total_tokens: 1`): each missing
            # count is estimated (marked so), or --max-tokens, --max-cost and a
            # gateway's daily budget would count this call as (nearly) free.
            guess = context.estimate_usage(self.history.tokens + offer.tokens,
                                           result.message)
            if not usage.reported:
                usage = guess
            elif guess.completion_tokens or not usage.prompt_tokens:
                prompt = usage.prompt_tokens or guess.prompt_tokens
                completion = usage.completion_tokens or guess.completion_tokens
                usage = attrs.evolve(usage, prompt_tokens=prompt,
                                     completion_tokens=completion,
                                     total_tokens=max(usage.total_tokens, prompt + completion),
                                     estimated=True)
            result = attrs.evolve(result, usage=usage)
        self.usage = self.usage + result.usage
        emit(LlmEnd(turn, result, self.priced(result)))
        self.append(result.message)
        return result

    async def _follow_up(self, turn: int, result: ChatResult) -> bool:
        """Ask :attr:`LoopDeps.after_final` whether the run goes on after this answer;
        when it does, its prompt is the next user message."""
        after_final = self.deps.after_final
        if after_final is None:
            return False
        try:
            follow = await unless_cancelled(after_final(turn, self.outcome("final", turn, result)),
                                            self.cancel)
        except Cancelled:
            return False
        if follow is None:
            return False
        prompt, plugin = follow
        self.deps.emit(RunContinued(turn, prompt, plugin))
        self.append(UserMessage(prompt))
        return True

    async def _run_tools(self, turn: int, calls: Sequence[ToolCall], offer: _Offer) -> bool:
        """Run the answer's calls in order; ``False``: the run was cancelled (every call
        still gets its result, so the transcript stays valid)."""
        last_turn = turn >= self.params.max_turns
        cancel = self.cancel
        route = offer.route if offer.routes is not None else None

        def decide(call: ToolCall) -> ToolOutcome | None:
            if last_turn:
                return ToolOutcome(call, ToolResult.failure(BUDGET_EXHAUSTED_ERROR))
            if _cancelled(cancel):
                return ToolOutcome(call, ToolResult.failure("cancelled"))
            return None

        for call in calls:
            await _settle_call(self.deps, turn, call, self.append, decide, cancel, route)
        return not _cancelled(cancel)


async def run_conversation(
    deps: LoopDeps, messages: Sequence[Message], params: LoopParams
) -> LoopOutcome:
    """Run the loop over a copy of ``messages``; see the module docstring.

    A model call that fails for good emits ``error`` and re-raises the
    :class:`~lich.types.ProviderError`; everything else ends in a
    :class:`LoopOutcome`.
    """
    return await _Loop(deps, messages, params).run()


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

    def append(message: Message) -> None:
        history.append(message)
        deps.on_message(message)

    def decide(call: ToolCall) -> ToolOutcome | None:
        if _cancelled(cancel):
            return ToolOutcome(call, ToolResult.failure("cancelled"))
        return None if rerun(call) else ToolOutcome(call, interrupted_result)

    for call in pending:
        await _settle_call(deps, 0, call, append, decide, cancel)
    unpriced = 0.0 if deps.price is not None else None
    if _cancelled(cancel):
        return LoopOutcome(tuple(history), last_assistant(history), None, 0, "aborted",
                           Usage(), unpriced)
    last = history[-1] if history else None
    if not pending and isinstance(last, AssistantMessage) and not last.tool_calls:
        # The answer was recorded before the run stopped: it is the turn's answer.
        return LoopOutcome(tuple(history), last, None, 0, "final", Usage(), unpriced)
    return await run_conversation(deps, history, params)
