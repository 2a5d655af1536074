"""Cost in the TUI: the state adds it up, the status bar shows it, a budget stop says why."""

from __future__ import annotations

import pytest

from lich.events import BudgetExhausted, LlmEnd, RunEnd
from lich.tui import state as st
from lich.tui.format import budget_notice, run_end_notice, status_parts
from lich.types import AssistantMessage, ChatResult, Usage


def call(cost: float | None) -> LlmEnd:
    return LlmEnd(1, ChatResult(AssistantMessage("x"), Usage(1, 1, 2)), cost)


def test_the_cost_adds_up_across_calls_and_runs() -> None:
    state = st.start_run(st.UiState())
    state = st.apply_event(state, call(0.01))
    state = st.apply_event(state, call(0.02))
    assert state.total_cost_usd == pytest.approx(0.03)
    # The run's own total (compression included) settles it.
    state = st.apply_event(state, RunEnd("final", 2, Usage(2, 2, 4), None, 0.035))
    assert (state.cost_usd, state.run_cost_usd) == (pytest.approx(0.035), 0.0)
    state = st.apply_event(st.start_run(state), call(0.005))
    assert state.total_cost_usd == pytest.approx(0.04)
    # One unknown price makes the session's cost unknown, and it stays so.
    state = st.apply_event(state, RunEnd("final", 1, Usage(1, 1, 2), None, None))
    assert state.total_cost_usd is None
    state = st.apply_event(st.start_run(state), call(0.01))
    assert state.total_cost_usd is None


def test_the_status_bar_shows_the_cost_when_calls_are_priced() -> None:
    def texts(**kwargs: object) -> list[str]:
        return [p.text for p in status_parts(model="m", provider="", turns=1, tokens=10,
                                             phase="idle", **kwargs)]  # type: ignore[arg-type]

    assert texts() == ["m", "run turns 1", "tui tokens 10", "idle"]
    assert texts(priced=True, cost_usd=0.0031) == [
        "m", "run turns 1", "tui tokens 10", "tui $0.0031", "idle"]
    assert "tui cost ?" in texts(priced=True, cost_usd=None)


def test_a_budget_stop_says_which_budget() -> None:
    state = st.apply_event(st.start_run(st.UiState()), BudgetExhausted(
        2, "max_cost_usd", "max_cost_usd: $0.5210 spent of $0.5000", "budgets"))
    end = RunEnd("budget", 2, Usage())
    notice = run_end_notice(end, state.budget_reason)
    assert notice is not None
    assert notice.text == "· budget exhausted: max_cost_usd: $0.5210 spent of $0.5000"
    # The turn cap keeps its own wording.
    turns = st.apply_event(st.start_run(st.UiState()), BudgetExhausted(
        25, "max_turns", "max_turns: all 25 turns used"))
    assert run_end_notice(end, turns.budget_reason) == budget_notice()
