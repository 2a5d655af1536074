"""The TUI state machine, without Textual."""

from __future__ import annotations

import subprocess
import sys

import attrs
import pytest

from lich.events import (
    BudgetExhausted,
    CompressEnd,
    CompressStart,
    ErrorEvent,
    Failover,
    Final,
    LlmEnd,
    LlmStart,
    Retry,
    RunEnd,
    RunStart,
    StreamReset,
    TextDelta,
    ToolCallEnd,
    ToolCallStart,
    TurnEnd,
    TurnStart,
)
from lich.tui import state as st
from lich.types import AssistantMessage, ChatResult, ToolCall, ToolResult, Usage

CALL = ToolCall("c1", "shout", {"text": "hi"})


def llm_end(turn: int, total: int) -> LlmEnd:
    usage = Usage(total - 1, 1, total)
    return LlmEnd(turn, ChatResult(AssistantMessage("x"), usage))


def busy() -> st.UiState:
    return st.start_run(st.UiState(session_id="s1"))


def test_initial_state_is_idle() -> None:
    state = st.UiState()
    assert state.phase == "idle"
    assert not state.busy
    assert state.total_usage == Usage()


def test_start_run_enters_thinking_and_resets_run_fields() -> None:
    before = attrs.evolve(
        st.UiState(session_id="s1"), turns_used=4, last_error="old", runs=2
    )
    state = st.start_run(before)
    assert state.phase == "thinking"
    assert state.busy
    assert state.turns_used == 0
    assert state.last_error is None
    assert state.runs == 3
    assert state.session_id == "s1"


def test_start_run_refuses_a_second_run() -> None:
    with pytest.raises(RuntimeError, match="already in flight"):
        st.start_run(busy())


def test_llm_start_is_thinking_and_clears_the_tool() -> None:
    state = attrs.evolve(busy(), phase="tool", active_tool=CALL)
    state = st.apply_event(state, LlmStart(2))
    assert state.phase == "thinking"
    assert state.active_tool is None


def test_llm_end_adds_usage_to_the_run() -> None:
    state = st.apply_event(busy(), llm_end(1, 10))
    state = st.apply_event(state, llm_end(2, 5))
    assert state.run_usage.total_tokens == 15
    assert state.total_usage.total_tokens == 15
    assert state.usage.total_tokens == 0


def test_tool_call_start_and_end() -> None:
    state = st.apply_event(busy(), ToolCallStart(1, CALL))
    assert state.phase == "tool"
    assert state.active_tool == CALL
    state = st.apply_event(state, ToolCallEnd(1, CALL, ToolResult.success("HI")))
    assert state.phase == "thinking"
    assert state.active_tool is None
    assert state.last_error is None


def test_failed_tool_sets_last_error() -> None:
    failed = st.apply_event(busy(), ToolCallEnd(1, CALL, ToolResult.failure("missing_arg: x")))
    assert failed.last_error == "missing_arg: x"
    no_code = st.apply_event(busy(), ToolCallEnd(1, CALL, ToolResult(ok=False)))
    assert no_code.last_error == "tool failed"
    # a later success keeps the error visible
    later = st.apply_event(failed, ToolCallEnd(1, CALL, ToolResult.success("ok")))
    assert later.last_error == "missing_arg: x"


def test_turns_follow_turn_start_and_turn_end() -> None:
    state = st.apply_event(busy(), TurnStart(1))
    assert state.turns_used == 1
    state = st.apply_event(state, TurnStart(2))
    assert state.turns_used == 2
    state = st.apply_event(state, TurnEnd(3))
    assert state.turns_used == 3


def test_compress_start_counts() -> None:
    state = st.apply_event(busy(), CompressStart(900))
    state = st.apply_event(state, CompressStart(950))
    assert state.compress_count == 2
    # compress_end changes nothing in the state (the app shows a notice)
    assert st.apply_event(state, CompressEnd(100, 300)) == state


def test_budget_exhausted_is_sticky() -> None:
    state = st.apply_event(busy(), BudgetExhausted(3))
    assert state.budget_exhausted
    state = st.apply_event(state, RunEnd("budget", 3, Usage()))
    state = st.start_run(state)
    assert state.budget_exhausted


def test_error_event_sets_last_error() -> None:
    state = st.apply_event(busy(), ErrorEvent("rate_limit", "main: rate_limit 429: slow down"))
    assert state.last_error == "main: rate_limit 429: slow down"
    assert st.apply_event(busy(), ErrorEvent("unknown", "")).last_error == "unknown"


@pytest.mark.parametrize(
    "event",
    [
        RunStart("hi", "/tmp"),
        TextDelta("x"),
        StreamReset("a", "failover"),
        Retry("a", 1, "network", 0.5),
        Failover("a", "b", "auth"),
        Final(AssistantMessage("x"), ChatResult(AssistantMessage("x"))),
    ],
)
def test_other_events_leave_the_state_alone(event: object) -> None:
    state = busy()
    assert st.apply_event(state, event) == state  # type: ignore[arg-type]


def test_full_cycle_idle_thinking_tool_thinking_idle() -> None:
    state = st.UiState(session_id="s1")
    phases = [state.phase]
    state = st.start_run(state)
    events = [
        RunStart("hi", "/w"),
        TurnStart(1),
        LlmStart(1),
        llm_end(1, 10),
        ToolCallStart(1, CALL),
        ToolCallEnd(1, CALL, ToolResult.success("HI")),
        TurnStart(2),
        LlmStart(2),
        llm_end(2, 20),
        Final(AssistantMessage("done"), ChatResult(AssistantMessage("done"))),
        TurnEnd(2),
        RunEnd("final", 2, Usage(25, 5, 30)),
    ]
    for event in events:
        state = st.apply_event(state, event)  # type: ignore[arg-type]
        phases.append(state.phase)
    assert phases == [
        "idle", "thinking", "thinking", "thinking", "thinking", "tool", "thinking",
        "thinking", "thinking", "thinking", "thinking", "thinking", "idle",
    ]
    assert state.turns_used == 2
    # run_end's usage (which includes compression) settles the run's tally
    assert state.usage.total_tokens == 30
    assert state.run_usage == Usage()
    assert state.last_error is None


def test_usage_accumulates_across_runs() -> None:
    state = st.UiState()
    for _ in range(3):
        state = st.start_run(state)
        state = st.apply_event(state, llm_end(1, 7))
        state = st.apply_event(state, RunEnd("final", 1, Usage(6, 1, 7)))
    assert state.usage.total_tokens == 21
    assert state.runs == 3


def test_cancel_request_then_aborted_run_end() -> None:
    assert st.request_cancel(st.UiState()) == st.UiState()  # idle: nothing to cancel
    state = st.request_cancel(busy())
    assert state.cancelling
    state = st.apply_event(state, RunEnd("aborted", 1, Usage()))
    assert state.phase == "idle"
    assert not state.cancelling
    assert state.last_error == st.CANCELLED_ERROR


def test_error_run_end_keeps_the_specific_error() -> None:
    state = st.apply_event(busy(), ErrorEvent("auth", "main: auth 401: bad key"))
    state = st.apply_event(state, RunEnd("error", 1, Usage(), "ProviderError: bad key"))
    assert state.phase == "idle"
    assert state.last_error == "main: auth 401: bad key"
    bare = st.apply_event(busy(), RunEnd("error", 0, Usage(), "ValueError: boom"))
    assert bare.last_error == "ValueError: boom"


def test_apply_run_error_settles_a_run_without_run_end() -> None:
    state = st.apply_event(busy(), llm_end(1, 10))
    state = st.apply_run_error(state, "OSError: disk full")
    assert state.phase == "idle"
    assert state.usage.total_tokens == 10
    assert state.last_error == "OSError: disk full"
    # after run_end it only fills an empty error
    settled = st.apply_event(busy(), RunEnd("final", 1, Usage()))
    assert st.apply_run_error(settled, "late").last_error == "late"
    errored = attrs.evolve(settled, last_error="first")
    assert st.apply_run_error(errored, "late").last_error == "first"


def test_new_session_resets_the_conversation_fields_only() -> None:
    state = attrs.evolve(
        st.UiState(session_id="old"),
        turns_used=5,
        usage=Usage(1, 2, 3),
        compress_count=2,
        budget_exhausted=True,
        last_error="x",
    )
    state = st.new_session(state, "new")
    assert state.session_id == "new"
    assert state.turns_used == 0
    assert not state.budget_exhausted
    assert state.last_error is None
    assert state.usage == Usage(1, 2, 3)
    assert state.compress_count == 2
    with pytest.raises(RuntimeError):
        st.new_session(busy(), "other")


def test_state_and_format_modules_do_not_import_textual() -> None:
    code = (
        "import sys, lich.tui, lich.tui.state, lich.tui.format, lich.tui.input_history\n"
        "assert 'textual' not in sys.modules, sorted(m for m in sys.modules if 'textual' in m)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
