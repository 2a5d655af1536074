"""The TUI's state machine: pure functions from (state, event) to a new state.

Nothing here imports Textual, so every transition is unit-tested on its own.
The transitions follow the reference TUI (``llm_start`` → thinking,
``tool_call_start`` → tool, ``tool_call_end`` → thinking, …) and add what
lich's TUI needs on top: the session id, per-run usage that is settled when
the run ends (so compression tokens count too), the turn shown live from
``turn_start``, and cancellation.

The app keeps exactly one :class:`UiState` and replaces it with the result of
a transition; a run is in flight exactly when :attr:`UiState.busy` is true.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import attrs
from attrs import field, frozen

from lich.events import (
    BudgetExhausted,
    CompressStart,
    ErrorEvent,
    Event,
    LlmEnd,
    LlmStart,
    RunEnd,
    ToolCallEnd,
    ToolCallStart,
    TurnEnd,
    TurnStart,
)
from lich.types import ToolCall, Usage

__all__ = [
    "CANCELLED_ERROR",
    "Phase",
    "UiState",
    "apply_event",
    "apply_run_error",
    "new_session",
    "request_cancel",
    "start_run",
]

Phase: TypeAlias = Literal["idle", "thinking", "tool"]

CANCELLED_ERROR = "run cancelled"
"""``last_error`` after a run that ended ``aborted``."""


@frozen
class UiState:
    """Everything the status bar and the busy guard need to know.

    :param phase: ``idle`` (no run), ``thinking`` (waiting for the model) or
        ``tool`` (a tool is running).
    :param turns_used: the turn of the current run, or the turns the last run used.
    :param usage: tokens of the finished runs of this TUI session.
    :param run_usage: tokens of the run in flight (model calls so far).
    :param session_id: the conversation runs are recorded in.
    :param compress_count: how many times the context was compressed.
    :param budget_exhausted: a run hit ``max_turns`` in this conversation (sticky).
    :param last_error: the latest failure (a tool error, a model error, a cancel).
    :param active_tool: the call running now (phase ``tool``).
    :param cancelling: a cancel was requested and the run has not ended yet.
    :param runs: how many runs were started in this TUI session.
    """

    phase: Phase = "idle"
    turns_used: int = 0
    usage: Usage = field(factory=Usage)
    run_usage: Usage = field(factory=Usage)
    session_id: str | None = None
    compress_count: int = 0
    budget_exhausted: bool = False
    last_error: str | None = None
    active_tool: ToolCall | None = None
    cancelling: bool = False
    runs: int = 0
    #: US dollars of the finished runs of this TUI session (``None``: one was unknown),
    #: and of the run in flight (its priced model calls so far).
    cost_usd: float | None = 0.0
    run_cost_usd: float | None = 0.0
    #: Why the last run stopped on a budget other than the turn cap (cost, tokens…).
    budget_reason: str | None = None

    @property
    def busy(self) -> bool:
        """Whether a run is in flight (no second run may start)."""
        return self.phase != "idle"

    @property
    def total_usage(self) -> Usage:
        """Tokens of the whole TUI session, the run in flight included."""
        return self.usage + self.run_usage

    @property
    def total_cost_usd(self) -> float | None:
        """Cost of the whole TUI session, the run in flight included (``None``: unknown)."""
        return _add_cost(self.cost_usd, self.run_cost_usd)


def _add_cost(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def start_run(state: UiState) -> UiState:
    """A message was sent: the run begins in the thinking phase.

    Callers check :attr:`UiState.busy` first; starting a run while one is in
    flight is a programming error.
    """
    if state.busy:
        raise RuntimeError("a run is already in flight")
    return attrs.evolve(
        state,
        phase="thinking",
        turns_used=0,
        run_usage=Usage(),
        run_cost_usd=0.0,
        budget_reason=None,
        active_tool=None,
        cancelling=False,
        last_error=None,
        runs=state.runs + 1,
    )


def request_cancel(state: UiState) -> UiState:
    """Esc was pressed: remember that a cancel is under way (no-op when idle)."""
    if not state.busy:
        return state
    return attrs.evolve(state, cancelling=True)


def apply_event(state: UiState, event: Event) -> UiState:
    """The state after ``event``; events without a transition leave it unchanged."""
    if isinstance(event, TurnStart):
        return attrs.evolve(state, turns_used=event.turn)
    if isinstance(event, LlmStart):
        return attrs.evolve(state, phase="thinking", active_tool=None)
    if isinstance(event, LlmEnd):
        return attrs.evolve(state, run_usage=state.run_usage + event.result.usage,
                            run_cost_usd=_add_cost(state.run_cost_usd, event.cost_usd))
    if isinstance(event, ToolCallStart):
        return attrs.evolve(state, phase="tool", active_tool=event.call)
    if isinstance(event, ToolCallEnd):
        error = state.last_error
        if not event.result.ok:
            error = event.result.error or "tool failed"
        return attrs.evolve(state, phase="thinking", active_tool=None, last_error=error)
    if isinstance(event, TurnEnd):
        return attrs.evolve(state, turns_used=event.turn)
    if isinstance(event, CompressStart):
        return attrs.evolve(state, compress_count=state.compress_count + 1)
    if isinstance(event, BudgetExhausted):
        reason = event.reason if event.budget != "max_turns" else None
        return attrs.evolve(state, budget_exhausted=True, budget_reason=reason)
    if isinstance(event, ErrorEvent):
        return attrs.evolve(state, last_error=event.message or event.kind)
    if isinstance(event, RunEnd):
        return _end_run(state, event)
    return state


def _end_run(state: UiState, event: RunEnd) -> UiState:
    # The run's own usage (compression included) replaces the live per-call tally.
    error = state.last_error
    if event.stopped_reason == "aborted":
        error = CANCELLED_ERROR
    elif event.stopped_reason == "error":
        error = state.last_error or event.error or "run failed"
    return attrs.evolve(
        state,
        phase="idle",
        turns_used=event.turns_used,
        usage=state.usage + event.usage,
        run_usage=Usage(),
        # The run's own total (compression included) replaces the live per-call tally.
        cost_usd=_add_cost(state.cost_usd, event.cost_usd),
        run_cost_usd=0.0,
        active_tool=None,
        cancelling=False,
        last_error=error,
    )


def apply_run_error(state: UiState, message: str) -> UiState:
    """The run raised before or without a ``run_end`` event: back to idle, keep the error.

    Idempotent with the ``run_end`` transition: when ``run_end`` already
    settled the run, only ``last_error`` is filled in if it was empty.
    """
    if not state.busy:
        return state if state.last_error else attrs.evolve(state, last_error=message)
    return attrs.evolve(
        state,
        phase="idle",
        usage=state.usage + state.run_usage,
        run_usage=Usage(),
        cost_usd=state.total_cost_usd,
        run_cost_usd=0.0,
        active_tool=None,
        cancelling=False,
        last_error=message,
    )


def new_session(state: UiState, session_id: str) -> UiState:
    """Switch to another conversation (``/new``, ``/resume``).

    Per-conversation fields reset; the token usage of the TUI session and
    the compression count are kept.
    """
    if state.busy:
        raise RuntimeError("cannot switch sessions while a run is in flight")
    return attrs.evolve(
        state,
        session_id=session_id,
        turns_used=0,
        budget_exhausted=False,
        last_error=None,
        active_tool=None,
    )
