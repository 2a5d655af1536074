"""``run_conversation``: the turn algorithm, its events, and every way it stops."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from lich import context
from lich.cancel import CancelToken
from lich.events import (
    CompressEnd,
    CompressStart,
    ErrorEvent,
    Event,
    ToolCallEnd,
    TurnEnd,
    TurnStart,
)
from lich.loop import (
    COMPRESS_BACKOFF_TURNS,
    LoopDeps,
    LoopParams,
    ToolOutcome,
    run_conversation,
    seed_system_prompt,
)
from lich.testing import Fail, Reply, ScriptedChat, ScriptRequest
from lich.tools import ToolExecutor, ToolRegistry, tool
from lich.types import (
    AssistantMessage,
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

from .conftest import assert_valid_transcript

HANG_S = 60  # "forever" for a test; every wait on it is bounded well below the test timeout


class Runner:
    """A ToolRunner that records calls and answers from a table (default: ok)."""

    def __init__(self, results: dict[str, ToolResult] | None = None) -> None:
        self.calls: list[ToolCall] = []
        self.results = results or {}

    async def __call__(self, call: ToolCall, cancel: CancelToken | None) -> ToolOutcome:
        self.calls.append(call)
        default = ToolResult.success(f"ran {call.name}")
        return ToolOutcome(call, self.results.get(call.name, default))


def deps_for(chat: Any, runner: Any, events: list[Event], defs: Sequence[ToolDefinition] = ()):
    return LoopDeps(chat=chat, tools=runner, definitions=lambda: defs, emit=events.append)


def call(name: str = "echo", id: str = "c1", **args: Any) -> ToolCall:
    return ToolCall(id, name, args)


async def test_tool_turn_then_final_event_order_and_transcript() -> None:
    chat = ScriptedChat([Reply(tool_calls=[call(text="hi")]), Reply("all done")])
    runner = Runner()
    events: list[Event] = []
    seed: list[Message] = [UserMessage("do it")]
    out = await run_conversation(deps_for(chat, runner, events), seed, LoopParams(max_turns=5))

    assert [e.type for e in events] == [
        "turn_start", "llm_start", "llm_end", "tool_call_start", "tool_call_end",
        "turn_end", "turn_start", "llm_start", "llm_end", "final", "turn_end",
    ]  # fmt: skip
    assert out.stopped_reason == "final"
    assert out.turns_used == 2
    assert runner.calls == [call(text="hi")]
    assert out.final == AssistantMessage("all done")
    assert out.result is not None
    assert out.result.message.content == "all done"
    assert [m.role for m in out.messages] == ["user", "assistant", "tool", "assistant"]
    tool_msg = out.messages[2]
    assert tool_msg == ToolMessage("c1", "echo", "ran echo", is_error=False)
    # The caller's list is untouched and the outcome is a copy.
    assert seed == [UserMessage("do it")]
    # The second model call saw the tool result.
    assert chat.calls[1][0][-1] == tool_msg


async def test_usage_is_summed_over_the_runs_model_calls() -> None:
    chat = ScriptedChat(
        [Reply(tool_calls=[call()], usage=Usage(3, 1, 4)), Reply("x", usage=Usage(5, 2, 7))]
    )
    out = await run_conversation(
        deps_for(chat, Runner(), []), [UserMessage("u")], LoopParams(max_turns=3)
    )
    assert out.usage == Usage(8, 3, 11)


async def test_tool_calls_run_sequentially_in_the_order_given() -> None:
    calls = [call("a", "1"), call("b", "2"), call("c", "3")]
    chat = ScriptedChat([Reply(tool_calls=calls), "ok"])
    order: list[str] = []
    running = 0

    async def runner(c: ToolCall, cancel: CancelToken | None) -> ToolOutcome:
        nonlocal running
        running += 1
        assert running == 1, "tools must not overlap"
        await asyncio.sleep(0)
        order.append(c.name)
        running -= 1
        return ToolOutcome(c, ToolResult.success(c.name))

    out = await run_conversation(deps_for(chat, runner, []), [UserMessage("u")], LoopParams(3))
    assert order == ["a", "b", "c"]
    assert [m.tool_call_id for m in out.messages if isinstance(m, ToolMessage)] == ["1", "2", "3"]


async def test_tool_calls_do_not_use_up_turns() -> None:
    chat = ScriptedChat([Reply(tool_calls=[call()]), "done"])
    out = await run_conversation(deps_for(chat, Runner(), []), [UserMessage("u")], LoopParams(2))
    assert out.stopped_reason == "final"
    assert out.turns_used == 2


async def test_budget_stop_answers_last_turn_calls_without_running_them() -> None:
    def always_tools(request: ScriptRequest) -> Reply:
        n = len(request.messages)
        return Reply(tool_calls=[call(id=f"c{n}a"), call("other", id=f"c{n}b")])

    chat = ScriptedChat(responder=always_tools)
    runner = Runner()
    events: list[Event] = []
    out = await run_conversation(deps_for(chat, runner, events), [UserMessage("u")], LoopParams(3))

    assert out.stopped_reason == "budget"
    assert out.turns_used == 3
    assert [e.type for e in events][-2:] == ["budget_exhausted", "turn_end"]
    assert sum(isinstance(e, TurnStart) for e in events) == 3
    assert events[-1] == events[-1].__class__(3)  # turn_end carries max_turns
    # Turns 1 and 2 ran their two tools; the third turn's two calls did not run ...
    assert len(runner.calls) == 4
    # ... but were answered, so the transcript stays valid for the next run.
    assert_valid_transcript(out.messages)
    last_two = [m for m in out.messages if isinstance(m, ToolMessage)][-2:]
    for m in last_two:
        assert m.is_error
        assert '"error": "turn_budget_exhausted"' in m.content
    ends = [e for e in events if isinstance(e, ToolCallEnd)]
    assert [e.result.error for e in ends[-2:]] == ["turn_budget_exhausted"] * 2
    assert out.final is not None
    assert len(out.final.tool_calls) == 2
    assert out.result is None


async def test_max_turns_zero_makes_no_model_call() -> None:
    chat = ScriptedChat(["never"])
    events: list[Event] = []
    deps = deps_for(chat, Runner(), events)
    out = await run_conversation(deps, [UserMessage("u")], LoopParams(0))
    assert out.stopped_reason == "budget"
    assert chat.calls == []


async def test_failed_tool_is_data_for_the_model() -> None:
    chat = ScriptedChat([Reply(tool_calls=[call("broken")]), "recovered"])
    runner = Runner({"broken": ToolResult.failure("boom", output="partial")})
    out = await run_conversation(deps_for(chat, runner, []), [UserMessage("u")], LoopParams(3))
    assert out.stopped_reason == "final"
    tool_msg = out.messages[2]
    assert isinstance(tool_msg, ToolMessage)
    assert tool_msg.is_error
    assert tool_msg.content == '{"ok": false, "output": "partial", "error": "boom"}'


async def test_provider_error_emits_error_and_is_reraised() -> None:
    chat = ScriptedChat([Fail(401)])
    events: list[Event] = []
    with pytest.raises(ProviderError) as info:
        await run_conversation(deps_for(chat, Runner(), events), [UserMessage("u")], LoopParams(2))
    assert info.value.kind == "auth"
    assert [e.type for e in events] == ["turn_start", "llm_start", "error", "turn_end"]
    error = events[-2]
    assert isinstance(error, ErrorEvent)
    assert error.kind == "auth"


async def test_unexpected_chat_exception_emits_error_and_is_reraised() -> None:
    async def chat(*_: Any) -> ChatResult:
        raise RuntimeError("wire melted")

    events: list[Event] = []
    with pytest.raises(RuntimeError):
        await run_conversation(deps_for(chat, Runner(), events), [UserMessage("u")], LoopParams(2))
    error = events[-2]
    assert isinstance(error, ErrorEvent)
    assert isinstance(events[-1], TurnEnd)  # the turn the error ended is ended too
    assert error.kind == "unknown"
    assert "wire melted" in error.message


# ------------------------------------------------------------------ cancellation


async def test_abort_before_a_turn() -> None:
    token = CancelToken()
    token.cancel()
    chat = ScriptedChat(["never"])
    events: list[Event] = []
    prior = AssistantMessage("from an earlier run")
    out = await run_conversation(
        deps_for(chat, Runner(), events),
        [UserMessage("a"), prior, UserMessage("b")],
        LoopParams(5, cancel=token),
    )
    assert out.stopped_reason == "aborted"
    assert out.turns_used == 0
    assert events == []  # no turn_start for a turn that never began; no error event
    assert chat.calls == []
    assert out.final == prior
    assert out.result is None


async def test_abort_between_turns_after_a_tool_turn() -> None:
    token = CancelToken()

    async def runner(c: ToolCall, cancel: CancelToken | None) -> ToolOutcome:
        token.cancel()  # lands after the tool finished: the loop stops before turn 2
        return ToolOutcome(c, ToolResult.success("ok"))

    chat = ScriptedChat([Reply(tool_calls=[call()]), "never"])
    out = await run_conversation(
        deps_for(chat, runner, []), [UserMessage("u")], LoopParams(5, cancel=token)
    )
    assert out.stopped_reason == "aborted"
    assert out.turns_used == 1
    assert len(chat.calls) == 1
    assert_valid_transcript(out.messages)


async def test_abort_during_a_model_call() -> None:
    token = CancelToken()
    entered = asyncio.Event()
    cancelled_inside = asyncio.Event()

    async def chat(messages: Sequence[Message], tools: Any, options: ChatOptions) -> ChatResult:
        entered.set()
        try:
            await asyncio.sleep(HANG_S)
        except asyncio.CancelledError:
            cancelled_inside.set()
            raise
        raise AssertionError("the model call should have been cancelled")

    async def cancel_when_called() -> None:
        await entered.wait()
        token.cancel()

    events: list[Event] = []
    canceller = asyncio.create_task(cancel_when_called())
    out = await asyncio.wait_for(
        run_conversation(
            deps_for(chat, Runner(), events), [UserMessage("u")], LoopParams(5, cancel=token)
        ),
        timeout=20,
    )
    await canceller
    assert out.stopped_reason == "aborted"
    assert out.turns_used == 1
    assert cancelled_inside.is_set(), "the in-flight model call was not cancelled"
    assert [e.type for e in events] == ["turn_start", "llm_start", "turn_end"]
    assert out.messages == (UserMessage("u"),)


async def test_abort_during_a_tool_cancels_it_and_answers_every_call(tmp_path: Path) -> None:
    token = CancelToken()
    started = asyncio.Event()
    tool_cancelled = asyncio.Event()
    ran: list[str] = []

    @tool
    async def slow() -> str:
        """Runs until cancelled."""
        ran.append("slow")
        started.set()
        try:
            await asyncio.sleep(HANG_S)
        except asyncio.CancelledError:
            tool_cancelled.set()
            raise
        return "finished"

    @tool
    def never() -> str:
        """Must not run: the run was cancelled before its turn came."""
        ran.append("never")
        return "ran"

    registry = ToolRegistry()
    registry.register(slow)
    registry.register(never)
    executor = ToolExecutor(registry, work_dir=tmp_path)

    async def runner(c: ToolCall, cancel: CancelToken | None) -> ToolOutcome:
        return ToolOutcome(c, await executor.execute(c, cancel=cancel))

    async def cancel_when_started() -> None:
        await started.wait()
        token.cancel()

    chat = ScriptedChat(
        [Reply(tool_calls=[call("slow", "s1"), call("never", "n1"), call("never", "n2")]), "x"]
    )
    events: list[Event] = []
    canceller = asyncio.create_task(cancel_when_started())
    out = await asyncio.wait_for(
        run_conversation(
            deps_for(chat, runner, events), [UserMessage("u")], LoopParams(5, cancel=token)
        ),
        timeout=20,
    )
    await canceller

    assert out.stopped_reason == "aborted"
    assert out.turns_used == 1
    assert tool_cancelled.is_set(), "cancellation did not reach the running tool"
    assert ran == ["slow"]
    assert_valid_transcript(out.messages)
    answers = [m for m in out.messages if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in answers] == ["s1", "n1", "n2"]
    assert all(m.is_error and '"error": "cancelled"' in m.content for m in answers)
    assert len(chat.calls) == 1
    types = [e.type for e in events]
    assert types.count("tool_call_start") == types.count("tool_call_end") == 3
    assert "final" not in types


# ------------------------------------------------------------------ system prompt


def test_seed_system_prompt_prepends_replaces_and_keeps() -> None:
    u = UserMessage("u")
    assert seed_system_prompt([u], "sys") == [SystemMessage("sys"), u]
    assert seed_system_prompt([SystemMessage("old"), u], "sys") == [SystemMessage("sys"), u]
    same = [SystemMessage("sys"), u]
    assert seed_system_prompt(same, "sys") == same
    assert seed_system_prompt([u], None) == [u]


async def test_system_prompt_is_not_duplicated_across_runs() -> None:
    chat = ScriptedChat(["one", "two"])
    params = LoopParams(3, system_prompt="be brief")
    first = await run_conversation(deps_for(chat, Runner(), []), [UserMessage("a")], params)
    second = await run_conversation(
        deps_for(chat, Runner(), []), [*first.messages, UserMessage("b")], params
    )
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "user", "assistant"]


async def test_definitions_are_asked_for_before_every_model_call() -> None:
    asked = 0
    defs = (ToolDefinition("echo", "Echo.", {"type": "object"}),)

    def definitions() -> Sequence[ToolDefinition]:
        nonlocal asked
        asked += 1
        return defs

    chat = ScriptedChat([Reply(tool_calls=[call()]), "done"])
    deps = LoopDeps(chat=chat, tools=Runner(), definitions=definitions)
    await run_conversation(deps, [UserMessage("u")], LoopParams(3))
    assert asked == 2
    assert chat.requests[0].tools == ("echo",)


async def test_on_message_sees_each_new_message_once() -> None:
    seen: list[Message] = []
    chat = ScriptedChat([Reply(tool_calls=[call()]), "done"])
    deps = LoopDeps(chat=chat, tools=Runner(), definitions=tuple, on_message=seen.append)
    out = await run_conversation(deps, [UserMessage("u")], LoopParams(3))
    assert seen == list(out.messages[1:])


# ------------------------------------------------------------------ compression in the loop


def _padded_history(n: int = 12) -> list[Message]:
    return [UserMessage(f"message {i}: " + "x" * 200) for i in range(n)]


def _is_summary_request(request: ScriptRequest) -> bool:
    first = request.messages[0] if request.messages else None
    return isinstance(first, SystemMessage) and first.content == context.COMPRESSION_SYSTEM_PROMPT


async def test_compression_replaces_older_history_and_reports_it() -> None:
    def respond(request: ScriptRequest) -> Reply:
        if _is_summary_request(request):
            return Reply("SUMMARY-OF-EARLIER", usage=Usage(100, 10, 110))
        return Reply("final answer", usage=Usage(1, 1, 2))

    chat = ScriptedChat(responder=respond)
    events: list[Event] = []
    compacted: list[Sequence[Message]] = []
    deps = LoopDeps(
        chat=chat, tools=Runner(), definitions=tuple, emit=events.append,
        on_compact=compacted.append,
    )
    params = LoopParams(3, context_budget_tokens=100, compress_threshold=0.8)
    out = await run_conversation(deps, _padded_history(), params)

    types = [e.type for e in events]
    assert types[:4] == ["turn_start", "compress_start", "compress_end", "llm_start"]
    end = events[2]
    assert isinstance(end, CompressEnd)
    assert end.ok
    assert end.summary_chars == len("SUMMARY-OF-EARLIER")
    summary = [m for m in out.messages if "[context summary of earlier turns]" in m.content]
    assert len(summary) == 1
    assert "SUMMARY-OF-EARLIER" in summary[0].content
    # The latest user message survives verbatim; the model call saw the compressed history.
    assert out.messages[-2] == _padded_history()[-1]
    assert len(chat.calls[1][0]) < 12
    assert compacted
    assert list(compacted[0]) == list(out.messages[:-1])
    # The summarizer's tokens are part of the run's usage.
    assert out.usage == Usage(101, 11, 112)


async def test_failed_compression_keeps_history_and_backs_off_three_turns() -> None:
    def respond(request: ScriptRequest) -> Reply | Fail:
        if _is_summary_request(request):
            return Fail(500)
        n = len(request.messages)
        return Reply(tool_calls=[call(id=f"c{n}")])

    chat = ScriptedChat(responder=respond)
    events: list[Event] = []
    history = _padded_history()
    params = LoopParams(9, context_budget_tokens=100, compress_threshold=0.8)
    out = await run_conversation(deps_for(chat, Runner(), events), history, params)

    turn = 0
    attempts = []
    for e in events:
        if isinstance(e, TurnStart):
            turn = e.turn
        if isinstance(e, CompressStart):
            attempts.append(turn)
    step = COMPRESS_BACKOFF_TURNS + 1
    assert attempts == [1, 1 + step, 1 + 2 * step]
    ends = [e for e in events if isinstance(e, CompressEnd)]
    assert all(not e.ok and e.summary_chars == 0 for e in ends)
    # History unchanged: every original message is still there, in order, at the front.
    assert list(out.messages[: len(history)]) == history
    assert out.stopped_reason == "budget"


async def test_compression_that_helps_does_not_back_off() -> None:
    summaries = 0

    def respond(request: ScriptRequest) -> Reply:
        nonlocal summaries
        if _is_summary_request(request):
            summaries += 1
            return Reply("short")
        n = len(request.messages)
        # Every reply is long enough to push the estimate over the threshold again.
        return Reply("y" * 400, tool_calls=[call(id=f"c{n}")])

    events: list[Event] = []
    params = LoopParams(6, context_budget_tokens=400, compress_threshold=0.8, keep_recent=2)
    await run_conversation(
        deps_for(ScriptedChat(responder=respond), Runner(), events), _padded_history(), params
    )
    starts = [e for e in events if isinstance(e, CompressStart)]
    assert summaries == len(starts)
    turn = 0
    compressed_on: list[int] = []
    for e in events:
        if isinstance(e, TurnStart):
            turn = e.turn
        elif isinstance(e, CompressStart):
            compressed_on.append(turn)
    assert len(compressed_on) >= 2
    # It fired again sooner than a backoff would allow: no backoff after a success.
    gaps = [b - a for a, b in itertools.pairwise(compressed_on)]
    assert min(gaps) <= COMPRESS_BACKOFF_TURNS


async def test_a_long_single_task_run_keeps_its_request_through_every_compression() -> None:
    # One request, then tool turns until the budget: compression fires again and again,
    # and every model call still sees the user's request verbatim.
    request = UserMessage("the one request")

    def respond(request_: ScriptRequest) -> Reply:
        if _is_summary_request(request_):
            return Reply("short")
        n = len(request_.messages)
        return Reply("y" * 400, tool_calls=[call(id=f"c{n}")])

    chat = ScriptedChat(responder=respond)
    events: list[Event] = []
    params = LoopParams(8, context_budget_tokens=400, compress_threshold=0.8, keep_recent=2)
    out = await run_conversation(deps_for(chat, Runner(), events), [request], params)

    assert len([e for e in events if isinstance(e, CompressEnd) and e.ok]) >= 2
    model_calls = [c[0] for c in chat.calls if not (
        c[0] and c[0][0] == SystemMessage(context.COMPRESSION_SYSTEM_PROMPT)
    )]  # fmt: skip
    assert len(model_calls) == 8
    assert all(request in messages for messages in model_calls)
    assert out.messages[0] == request
    assert sum(context.is_summary(m) for m in out.messages) == 1
    assert_valid_transcript(list(out.messages))


async def test_no_compression_without_a_budget() -> None:
    events: list[Event] = []
    chat = ScriptedChat(["ok"])
    await run_conversation(deps_for(chat, Runner(), events), _padded_history(), LoopParams(2))
    assert "compress_start" not in [e.type for e in events]


async def test_abort_during_compression() -> None:
    token = CancelToken()

    async def chat(messages: Sequence[Message], tools: Any, options: ChatOptions) -> ChatResult:
        token.cancel()
        await asyncio.sleep(HANG_S)
        raise AssertionError("unreachable")

    events: list[Event] = []
    out = await asyncio.wait_for(
        run_conversation(
            deps_for(chat, Runner(), events),
            _padded_history(),
            LoopParams(3, context_budget_tokens=100, cancel=token),
        ),
        timeout=20,
    )
    assert out.stopped_reason == "aborted"
    assert [e.type for e in events] == ["turn_start", "compress_start", "compress_end",
                                        "turn_end"]
    assert list(out.messages) == _padded_history()


def test_pending_tool_calls_are_the_last_answers_calls_without_a_result() -> None:
    from lich.loop import pending_tool_calls

    calls = (ToolCall("a", "t", {}), ToolCall("b", "t", {}), ToolCall("c", "t", {}))
    asked = [UserMessage("go"), AssistantMessage("", calls)]
    assert [c.id for c in pending_tool_calls(asked)] == ["a", "b", "c"]
    one = [*asked, ToolMessage("a", "t", "ok")]
    assert [c.id for c in pending_tool_calls(one)] == ["b", "c"]
    done = [*one, ToolMessage("b", "t", "ok"), ToolMessage("c", "t", "ok")]
    assert pending_tool_calls(done) == []
    # A turn waiting for the model, or one already answered, has nothing pending.
    assert pending_tool_calls([UserMessage("go")]) == []
    assert pending_tool_calls([*done, AssistantMessage("final")]) == []
    assert pending_tool_calls([*asked, UserMessage("next")]) == []
async def test_unless_cancelled_cancels_the_work_even_when_its_on_cancel_raises() -> None:
    # on_cancel runs first when the token fires; one that raises must not leave the
    # work running on (a hung tool would then hang the cancelled run). Its error goes
    # to the event loop's exception handler, as any failing loop callback's does.
    from lich.cancel import Cancelled
    from lich.loop import unless_cancelled

    loop = asyncio.get_running_loop()
    reported: list[BaseException | None] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(context.get("exception")))
    token = CancelToken()
    seen: list[str] = []

    def failing_on_cancel() -> None:
        raise RuntimeError("on_cancel failed")

    async def hangs() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("work cancelled")
            raise

    try:
        call = asyncio.ensure_future(unless_cancelled(hangs(), token, failing_on_cancel))
        await asyncio.sleep(0)
        token.cancel()
        # (Not wait_for: its own cancellation at the bound would end the call too.)
        done, _ = await asyncio.wait({call}, timeout=10)
        assert done, "the work went on after the token fired"
        with pytest.raises(Cancelled):
            call.result()
    finally:
        call.cancel()
        loop.set_exception_handler(previous)
    assert seen == ["work cancelled"]
    assert [str(exc) for exc in reported] == ["on_cancel failed"]


@pytest.mark.parametrize("first", ["token", "outsider"])
async def test_unless_cancelled_never_takes_a_cancellation_from_elsewhere_for_the_tokens(
    first: str,
) -> None:
    # The token fires and someone else cancels the same task in the same loop round,
    # in either order: the outsider's cancellation must reach the caller as a
    # CancelledError (it is not the token's to swallow), still counted on the task.
    from lich.loop import unless_cancelled

    token = CancelToken()
    outcome: list[str] = []

    async def caller() -> None:
        try:
            await unless_cancelled(asyncio.Event().wait(), token)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            assert task is not None
            outcome.append(f"CancelledError, cancelling={task.cancelling()}")
            raise

    call = asyncio.ensure_future(caller())
    await asyncio.sleep(0)  # it waits under the token now
    if first == "token":
        token.cancel()
        call.cancel()
    else:
        call.cancel()
        token.cancel()
    done, _ = await asyncio.wait({call}, timeout=10)
    assert done
    assert call.cancelled()
    assert outcome == ["CancelledError, cancelling=1"]


async def test_unless_cancelled_leaves_nothing_registered_on_the_token() -> None:
    # A run's token lives as long as the run and sees every model call, tool call and
    # hook: each awaited call's registration must go when the call ends, however.
    from lich.loop import unless_cancelled

    token = CancelToken()

    async def answers() -> int:
        return 1

    async def waits_then_fails() -> None:
        await asyncio.sleep(0)
        raise ValueError("failed")

    for _ in range(200):
        assert await unless_cancelled(answers(), token) == 1
        with pytest.raises(ValueError, match="failed"):
            await unless_cancelled(waits_then_fails(), token)
    cancelled_from_outside = asyncio.ensure_future(
        unless_cancelled(asyncio.Event().wait(), token))
    await asyncio.sleep(0)
    cancelled_from_outside.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled_from_outside
    assert not token._callbacks
