"""The approval contract in the loop: ``Ask`` from before-hooks, ``lich_request_approval``,
what each answer does, and what is recorded.

Every test runs a real :class:`lich.Agent` with the scripted chat and in-process
plugins: the approver is a plugin like a front end's, scripted per test.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from approval_tools import Tools

import lich
from lich import Approval, ApprovalRequest, Ask, Block, Rewrite, ToolCall, hookimpl, tool
from lich.cancel import CancelToken
from lich.events import ApprovalRequested, ApprovalResolved, Envelope, ToolCallEnd
from lich.executor import APPROVAL_UNAVAILABLE
from lich.serialization import event_to_dict
from lich.sessions import JsonlSessionStore
from lich.testing import (
    AskFor,
    ScriptedApprover,
    ScriptedChat,
    async_wait_for,
    calls_responder,
    make_test_config,
)
from lich.types import ToolMessage


def tool_contents(messages: Sequence[Any]) -> list[str]:
    return [m.content for m in messages if isinstance(m, ToolMessage)]


def error_of(content: str) -> str:
    return str(json.loads(content)["error"])


async def run_agent(
    work: Path,
    objects: list[tuple[str, object]],
    *calls: tuple[str, dict[str, Any]],
    **config: Any,
) -> tuple[lich.RunResult, list[Envelope]]:
    events: list[Envelope] = []
    agent = lich.Agent(make_test_config(work, **config), plugins=objects,
                       chat=ScriptedChat(responder=calls_responder(*calls)))
    result = await agent.run("go", on_event=events.append)
    return result, events


def of_type(events: list[Envelope], cls: type[Any]) -> list[Any]:
    return [e.event for e in events if isinstance(e.event, cls)]


# ---------------------------------------------------------------------------
# The hook and its answers
# ---------------------------------------------------------------------------


async def test_an_approved_call_runs_and_both_events_are_emitted(tmp_path: Path) -> None:
    tools = Tools()
    approver = ScriptedApprover(lambda _r: Approval(True, approver="tester"))
    result, events = await run_agent(
        tmp_path, [("tools", tools), ("ask", AskFor("echo")), ("ui", approver)],
        ("echo", {"text": "hi"}))
    assert tools.ran == [("echo", {"text": "hi"})]
    assert tool_contents(result.messages) == ["echo: hi"]
    (request,) = approver.requests
    assert request.reason == "needs a human"
    assert request.asked_by == ("ask",)
    assert request.call.args == {"text": "hi"}
    assert request.tool is not None
    assert request.timeout_s == 300
    (asked,) = of_type(events, ApprovalRequested)
    (resolved,) = of_type(events, ApprovalResolved)
    assert asked.id == request.id == resolved.id
    assert len(asked.id) >= 4
    assert (resolved.approved, resolved.scope, resolved.approver, resolved.args) == (
        True, "once", "tester", None)
    types = [e.event.type for e in events]
    assert types.index("approval_requested") < types.index("approval_resolved") < types.index(
        "tool_call_end")


async def test_the_wait_for_a_person_is_reported_apart_from_the_run_time(
    tmp_path: Path
) -> None:
    tools = Tools()

    class Slow:
        @hookimpl
        def lich_request_approval(self) -> Approval:
            time.sleep(0.5)  # a person taking their time (at least this long)
            return Approval(True)

    started = time.perf_counter()
    _, events = await run_agent(tmp_path, [("tools", tools), ("ask", AskFor("echo")),
                                           ("ui", Slow())], ("echo", {"text": "hi"}))
    total_ms = (time.perf_counter() - started) * 1000
    (end,) = of_type(events, ToolCallEnd)
    (resolved,) = of_type(events, ApprovalResolved)
    # The wait is its own figure, at least the answer's time; the call's duration is what
    # is left of the call's time once the wait is taken out (both inside the run's time).
    assert end.approval_wait_ms >= 500
    assert end.approval_wait_ms >= resolved.waited_ms
    assert end.duration_ms + end.approval_wait_ms <= total_ms
    assert end.duration_ms <= total_ms - 500
    line = json.loads(json.dumps(event_to_dict(end)))
    assert line["approval_wait_ms"] == end.approval_wait_ms
    # A call nobody was asked about waited for nobody.
    _, plain = await run_agent(tmp_path, [("tools", Tools())], ("echo", {"text": "hi"}))
    (quick,) = of_type(plain, ToolCallEnd)
    assert quick.approval_wait_ms == event_to_dict(quick)["approval_wait_ms"] == 0


async def test_a_denial_tells_the_model_the_persons_message(tmp_path: Path) -> None:
    tools = Tools()
    approver = ScriptedApprover(lambda _r: Approval(False, message="not on a Friday"))
    result, events = await run_agent(
        tmp_path, [("tools", tools), ("ask", AskFor("echo")), ("ui", approver)],
        ("echo", {"text": "hi"}))
    assert tools.ran == []
    assert error_of(tool_contents(result.messages)[0]) == "approval_denied: not on a Friday"
    (resolved,) = of_type(events, ApprovalResolved)
    assert (resolved.approved, resolved.approver, resolved.message) == (
        False, "ui", "approval_denied: not on a Friday")
    assert result.stopped_reason == "final"  # a denial is data for the model


async def test_a_denial_without_message_says_the_user_denied(tmp_path: Path) -> None:
    result, _ = await run_agent(
        tmp_path, [("tools", Tools()), ("ask", AskFor("echo")),
                   ("ui", ScriptedApprover(lambda _r: Approval(False)))],
        ("echo", {"text": "hi"}))
    assert error_of(tool_contents(result.messages)[0]) == (
        "approval_denied: the user denied this call")


async def test_no_approver_denies_with_the_documented_reason(tmp_path: Path) -> None:
    tools = Tools()
    declining = ScriptedApprover(lambda _r: None)  # present, but cannot ask (no terminal)
    result, events = await run_agent(
        tmp_path, [("tools", tools), ("ask", AskFor("echo")), ("ui", declining)],
        ("echo", {"text": "hi"}))
    assert tools.ran == []
    assert error_of(tool_contents(result.messages)[0]) == APPROVAL_UNAVAILABLE
    assert APPROVAL_UNAVAILABLE.startswith("approval_unavailable: ")
    # It suggests no flag: --yes is the one-shot command line's, and neither `lich mcp
    # serve` nor the gateway takes it (the CLI's renderer adds the hint where it applies).
    assert "--yes" not in APPROVAL_UNAVAILABLE
    (resolved,) = of_type(events, ApprovalResolved)
    assert resolved.approver is None
    assert resolved.approved is False
    # And with no implementation of the hook at all.
    result, _ = await run_agent(tmp_path, [("tools", Tools()), ("ask", AskFor("echo"))],
                                ("echo", {"text": "hi"}))
    assert error_of(tool_contents(result.messages)[0]) == APPROVAL_UNAVAILABLE


async def test_the_first_approver_that_answers_decides(tmp_path: Path) -> None:
    tools = Tools()
    first = ScriptedApprover(lambda _r: None)
    second = ScriptedApprover(lambda _r: Approval(True, approver="second"))
    third = ScriptedApprover(lambda _r: Approval(False))
    # Registered last = asked first: first, then second; third is never asked.
    _, events = await run_agent(
        tmp_path, [("tools", tools), ("ask", AskFor("echo")), ("third", third),
                   ("second", second), ("first", first)],
        ("echo", {"text": "hi"}))
    assert tools.ran
    assert len(first.requests) == len(second.requests) == 1
    assert third.requests == []
    assert of_type(events, ApprovalResolved)[0].approver == "second"


@pytest.mark.parametrize(
    ("behaviour", "expected"),
    [
        ("raise", "approval_error (ui): RuntimeError: display gone"),
        ("junk", "approval_error (ui): lich_request_approval returned str; "
                 "expected Approval or None"),
    ],
)
async def test_a_failing_approver_denies(tmp_path: Path, behaviour: str, expected: str) -> None:
    class Broken:
        @hookimpl
        def lich_request_approval(self) -> Any:
            if behaviour == "raise":
                raise RuntimeError("display gone")
            return "yes"

    tools = Tools()
    result, _ = await run_agent(
        tmp_path, [("tools", tools), ("ask", AskFor("echo")), ("ui", Broken())],
        ("echo", {"text": "hi"}))
    assert tools.ran == []
    assert error_of(tool_contents(result.messages)[0]) == expected


def test_an_approval_scope_must_be_known() -> None:
    with pytest.raises(ValueError, match="scope must be one of once, session, always"):
        Approval(True, scope="forever")  # type: ignore[arg-type]
    assert Approval(True, args={"a": 1}).args == {"a": 1}


# ---------------------------------------------------------------------------
# Precedence across plugins
# ---------------------------------------------------------------------------


class Rewriter:
    @hookimpl
    def lich_before_tool_call(self, call: ToolCall) -> Rewrite | None:
        if call.name == "echo":
            return Rewrite({"text": str(call.args["text"]).upper()})
        return None


class Blocker:
    @hookimpl
    def lich_before_tool_call(self, call: ToolCall) -> Block | None:
        return Block("never") if call.args.get("text") in ("stop", "STOP") else None


@pytest.mark.parametrize("order", [
    ("ask", "rewrite", "block"), ("block", "ask", "rewrite"), ("rewrite", "block", "ask"),
    ("ask", "block", "rewrite"),
])
async def test_a_block_wins_over_an_ask_whatever_the_order(
    tmp_path: Path, order: tuple[str, ...]
) -> None:
    made = {"ask": AskFor("echo"), "rewrite": Rewriter(), "block": Blocker()}
    approver = ScriptedApprover(lambda _r: Approval(True))
    tools = Tools()
    # The plugins list is registration order; pluggy calls the last registered first,
    # so reverse it to make `order` the calling order.
    plugins = [("tools", tools), ("ui", approver),
               *[(name, made[name]) for name in reversed(order)]]
    result, events = await run_agent(tmp_path, plugins, ("echo", {"text": "stop"}))
    assert tools.ran == []
    assert approver.requests == []
    assert error_of(tool_contents(result.messages)[0]) == "blocked_by_plugin: never"
    assert of_type(events, ApprovalRequested) == []
    assert of_type(events, ToolCallEnd)[0].blocked_by == "block"


async def test_the_person_is_asked_about_the_rewritten_arguments(tmp_path: Path) -> None:
    approver = ScriptedApprover(lambda _r: Approval(True))
    tools = Tools()
    # Calling order: ask (sees "hi"), then rewrite: the person sees "HI", what will run.
    _, events = await run_agent(
        tmp_path, [("tools", tools), ("ui", approver), ("rewrite", Rewriter()),
                   ("ask", AskFor("echo"))],
        ("echo", {"text": "hi"}))
    assert approver.requests[0].call.args == {"text": "HI"}
    assert tools.ran == [("echo", {"text": "HI"})]
    assert of_type(events, ToolCallEnd)[0].rewritten_by == ("rewrite",)


async def test_several_asks_ask_once_with_every_reason(tmp_path: Path) -> None:
    approver = ScriptedApprover(lambda _r: Approval(True))
    await run_agent(
        tmp_path, [("tools", Tools()), ("ui", approver),
                   ("a1", AskFor("echo", reason="first")),
                   ("a2", AskFor("echo", reason="second"))],
        ("echo", {"text": "hi"}))
    (request,) = approver.requests
    assert request.asked_by == ("a2", "a1")
    assert request.reason == "second; first"


async def test_a_check_hook_refuses_before_anyone_is_asked(tmp_path: Path) -> None:
    class Guard:
        @hookimpl
        def lich_check_tool_call(self, call: ToolCall) -> Block | None:
            return Block("guarded") if call.args.get("text") == "secret" else None

    approver = ScriptedApprover(lambda _r: Approval(True))
    result, _ = await run_agent(
        tmp_path, [("tools", Tools()), ("ui", approver), ("ask", AskFor("echo")),
                   ("guard", Guard())],
        ("echo", {"text": "secret"}))
    assert approver.requests == []
    assert error_of(tool_contents(result.messages)[0]) == "blocked_by_plugin: guarded"


# ---------------------------------------------------------------------------
# Edited arguments
# ---------------------------------------------------------------------------


async def test_edited_arguments_run_and_are_recorded(tmp_path: Path) -> None:
    tools = Tools()
    approver = ScriptedApprover(lambda r: Approval(True, args={**r.call.args, "text": "edited"}))
    result, events = await run_agent(
        tmp_path, [("tools", tools), ("ask", AskFor("echo")), ("ui", approver)],
        ("echo", {"text": "hi"}))
    assert tools.ran == [("echo", {"text": "edited"})]
    (resolved,) = of_type(events, ApprovalResolved)
    assert resolved.args == {"text": "edited"}
    assert of_type(events, ToolCallEnd)[0].call.args == {"text": "edited"}
    assert tool_contents(result.messages) == ["echo: edited"]


@pytest.mark.parametrize(("edited", "problem"), [
    ({"text": 3}, "invalid_arg: text: expected string, got integer"),
    ({}, "missing_arg: text"),
    ({"text": "x", "extra": 1}, "extra"),
])
async def test_edited_arguments_are_checked_against_the_schema(
    tmp_path: Path, edited: dict[str, Any], problem: str
) -> None:
    tools = Tools()
    approver = ScriptedApprover(lambda _r: Approval(True, args=edited))
    result, _ = await run_agent(
        tmp_path, [("tools", tools), ("ask", AskFor("echo")), ("ui", approver)],
        ("echo", {"text": "hi"}))
    assert tools.ran == []
    error = error_of(tool_contents(result.messages)[0])
    assert error.startswith("approval_invalid_args: the edited arguments fail the tool's schema")
    assert problem in error


async def test_edited_arguments_go_through_the_check_hooks_again(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []

    class Guard:
        @hookimpl
        def lich_check_tool_call(self, call: ToolCall) -> Block | None:
            seen.append(dict(call.args))
            return Block("no secrets") if call.args.get("text") == "secret" else None

    tools = Tools()
    approver = ScriptedApprover(lambda _r: Approval(True, args={"text": "secret"}))
    result, events = await run_agent(
        tmp_path, [("tools", tools), ("ask", AskFor("echo")), ("ui", approver),
                   ("guard", Guard())],
        ("echo", {"text": "hi"}))
    assert seen == [{"text": "hi"}, {"text": "secret"}]
    assert tools.ran == []
    assert error_of(tool_contents(result.messages)[0]) == "blocked_by_plugin: no secrets"
    (resolved,) = of_type(events, ApprovalResolved)
    assert resolved.approved is False
    assert resolved.args == {"text": "secret"}
    assert of_type(events, ToolCallEnd)[0].blocked_by == "guard"


# ---------------------------------------------------------------------------
# Time: the approval timeout, not the hook timeout; cancellation
# ---------------------------------------------------------------------------


async def test_an_approver_that_never_answers_is_denied_at_the_approval_timeout(
    tmp_path: Path,
) -> None:
    class Silent:
        @hookimpl
        async def lich_request_approval(self) -> Approval:
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

    tools = Tools()
    result, events = await run_agent(
        tmp_path, [("tools", tools), ("ask", AskFor("echo")), ("ui", Silent())],
        ("echo", {"text": "hi"}), approval_timeout_s=0.2)
    assert tools.ran == []
    error = error_of(tool_contents(result.messages)[0])
    assert error == "approval_timeout: no answer within 0.2s; the call was not run"
    (resolved,) = of_type(events, ApprovalResolved)
    assert resolved.approved is False
    assert resolved.approver is None


async def test_a_person_may_take_longer_than_the_hook_timeout(tmp_path: Path) -> None:
    """``hook_timeout_s`` is for hooks; a person answering after it still counts."""

    class Slow:
        @hookimpl
        def lich_request_approval(self) -> Approval:
            time.sleep(0.3)  # a plain def: in a worker thread, past hook_timeout_s
            return Approval(True)

    tools = Tools()
    await run_agent(tmp_path, [("tools", tools), ("ask", AskFor("echo")), ("ui", Slow())],
                    ("echo", {"text": "hi"}), hook_timeout_s=0.05, approval_timeout_s=0)
    assert tools.ran == [("echo", {"text": "hi"})]


async def test_a_blocking_approver_does_not_block_the_event_loop(tmp_path: Path) -> None:
    release = threading.Event()
    ticks: list[float] = []

    class Blocking:
        @hookimpl
        def lich_request_approval(self) -> Approval:
            release.wait(10)
            return Approval(True)

    async def ticker() -> None:
        while not release.is_set():
            ticks.append(time.monotonic())
            if len(ticks) >= 3:
                release.set()
            await asyncio.sleep(0.01)

    tools = Tools()
    tick = asyncio.create_task(ticker())
    await run_agent(tmp_path, [("tools", tools), ("ask", AskFor("echo")), ("ui", Blocking())],
                    ("echo", {"text": "hi"}))
    await tick
    assert len(ticks) >= 3
    assert tools.ran


async def test_cancelling_the_run_stops_waiting_for_the_person(tmp_path: Path) -> None:
    waiting = asyncio.Event()

    class Waiting:
        @hookimpl
        async def lich_request_approval(self) -> Approval:
            waiting.set()
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

    tools = Tools()
    cancel = CancelToken()
    events: list[Envelope] = []
    agent = lich.Agent(
        make_test_config(tmp_path, approval_timeout_s=0),
        plugins=[("tools", tools), ("ask", AskFor("echo")), ("ui", Waiting())],
        chat=ScriptedChat(responder=calls_responder(("echo", {"text": "hi"}))))
    task = asyncio.create_task(agent.run("go", cancel=cancel, on_event=events.append))
    await asyncio.wait_for(waiting.wait(), 10)
    cancel.cancel()
    result = await asyncio.wait_for(task, 10)
    assert result.stopped_reason == "aborted"
    assert tools.ran == []
    (resolved,) = of_type(events, ApprovalResolved)
    assert (resolved.approved, resolved.message) == (False, "cancelled")


# ---------------------------------------------------------------------------
# What the approver is shown
# ---------------------------------------------------------------------------


# The preview (as the rules) is the approvals plugin's (lich_prepare_approval), for any
# plugin's Ask: loaded here with rules that allow everything, AskFor asks.
WITH_APPROVALS = {"plugins": ("approvals",), "approvals": {"mode": "allow"}}


async def test_the_request_carries_the_tools_preview(tmp_path: Path) -> None:
    approver = ScriptedApprover(lambda _r: Approval(True))
    await run_agent(tmp_path, [("tools", Tools()), ("ask", AskFor("note")), ("ui", approver)],
                    ("note", {"path": "a.txt", "text": "hello"}), **WITH_APPROVALS)
    (request,) = approver.requests
    assert request.preview == f"would write 5 chars to {tmp_path / 'a.txt'}"
    assert request.tool is not None
    assert request.tool.name == "note"


async def test_a_failing_preview_is_left_out(tmp_path: Path) -> None:
    def broken(_args: Any, _work_dir: Path) -> str:
        raise OSError("unreadable")

    class Plugin:
        @hookimpl
        def lich_register_tools(self, registry: Any) -> None:
            @tool(preview=broken)
            def risky(x: str) -> str:
                """Risky."""
                return x

            registry.register(risky)

    approver = ScriptedApprover(lambda _r: Approval(True))
    result, _ = await run_agent(
        tmp_path, [("p", Plugin()), ("ask", AskFor("risky")), ("ui", approver)],
        ("risky", {"x": "1"}), **WITH_APPROVALS)
    assert approver.requests[0].preview is None
    assert approver.requests[0].rules == ("risky(1)",)  # the rules made it all the same
    assert tool_contents(result.messages) == ["1"]


async def test_pending_requests_have_distinct_ids(tmp_path: Path) -> None:
    """Parallel runs (the gateway) wait at the same time: their ids never collide."""
    seen: list[str] = []
    gate = asyncio.Event()

    class Gate:
        @hookimpl
        async def lich_request_approval(self, request: ApprovalRequest) -> Approval:
            seen.append(request.id)
            await gate.wait()
            return Approval(True)

    agent = lich.Agent(
        make_test_config(tmp_path),
        plugins=[("tools", Tools()), ("ask", AskFor("echo")), ("ui", Gate())],
        chat=ScriptedChat(responder=calls_responder(("echo", {"text": "hi"}))))
    runs = [asyncio.create_task(agent.run("go")) for _ in range(20)]
    await async_wait_for(lambda: len(seen) == 20, timeout=30)
    assert len(set(seen)) == 20
    gate.set()
    for result in await asyncio.gather(*runs):
        assert result.stopped_reason == "final"


# ---------------------------------------------------------------------------
# Recorded
# ---------------------------------------------------------------------------


async def test_the_transcript_records_each_request_and_resolution(tmp_path: Path) -> None:
    agent = lich.Agent(
        make_test_config(tmp_path),
        plugins=[("tools", Tools()), ("ask", AskFor("echo")),
                 ("ui", ScriptedApprover(lambda _r: Approval(True, args={"text": "b"},
                                                     approver="alice")))],
        chat=ScriptedChat(responder=calls_responder(("echo", {"text": "a"}))))
    result = await agent.run("go")
    assert result.session_path is not None
    text = await asyncio.to_thread(Path(result.session_path).read_text)
    records = [json.loads(line) for line in text.splitlines()]
    events = [r["event"] for r in records if r.get("kind") == "event"]
    types = [e["type"] for e in events]
    assert types[:3] == ["approval_requested", "approval_resolved", "tool_call_end"]
    requested, resolved = events[0], events[1]
    assert requested["call"]["args"] == {"text": "a"}
    assert requested["reason"] == "needs a human"
    assert resolved["approver"] == "alice"
    assert resolved["args"] == {"text": "b"}
    assert resolved["scope"] == "once"
    assert resolved["waited_ms"] >= 0
    # The session still resumes: the new records do not upset reading it back.
    assert JsonlSessionStore(str(tmp_path / ".lich" / "sessions")).history(result.session_id)


# ---------------------------------------------------------------------------
# Scopes: once, session, always
# ---------------------------------------------------------------------------


async def test_a_once_approval_covers_only_that_call(tmp_path: Path) -> None:
    approver = ScriptedApprover(lambda _r: Approval(True))
    _, events = await run_agent(
        tmp_path, [("tools", Tools()), ("ask", AskFor("echo")), ("ui", approver)],
        ("echo", {"text": "hi"}), ("echo", {"text": "hi"}))
    assert len(approver.requests) == 2
    assert [r.approver for r in of_type(events, ApprovalResolved)] == ["ui", "ui"]


# Session grants are the approvals plugin's: it offers the rules with its Ask, keeps what
# a session/always approval granted (lich_approval_resolved), and answers the requests
# they cover itself (approver "session").
ASK_ECHO_AND_NOTE = {"ask": ["echo", "note"]}


@pytest.mark.parametrize("scope", ["session", "always"])
async def test_a_session_approval_covers_the_same_call_for_the_rest_of_the_session(
    tmp_path: Path, scope: str
) -> None:
    from lich.approvals.grants import SESSION_GRANTS

    approver = ScriptedApprover(lambda _r: Approval(True, scope=scope))  # type: ignore[arg-type]
    tools = Tools()
    agent = lich.Agent(
        make_test_config(tmp_path, plugins=("approvals",), approvals=ASK_ECHO_AND_NOTE),
        plugins=[("tools", tools), ("ui", approver)],
        chat=ScriptedChat(responder=calls_responder(
            ("echo", {"text": "hi"}), ("echo", {"text": "hi"}),
            ("note", {"path": "a", "text": "t"}))))
    events: list[Envelope] = []
    first = await agent.run("go", on_event=events.append)
    # Asked for the first echo and for note (another tool); the second echo was covered.
    assert [r.call.name for r in approver.requests] == ["echo", "note"]
    assert approver.requests[0].rules == ("echo(hi)",)
    covered = of_type(events, ApprovalResolved)[1]
    assert (covered.approved, covered.approver, covered.scope) == (True, "session", "session")
    assert len(tools.ran) == 3
    assert SESSION_GRANTS.granted(first.session_id) == ("echo(hi)", *approver.requests[1].rules)
    # A later run of the same session is covered too; another session is asked again.
    approver.requests.clear()
    await agent.run("again", session_id=first.session_id)
    assert approver.requests == []
    await agent.run("elsewhere")
    assert [r.call.name for r in approver.requests] == ["echo", "note"]


async def test_a_session_denial_grants_nothing(tmp_path: Path) -> None:
    approver = ScriptedApprover(lambda _r: Approval(False, scope="session"))
    agent = lich.Agent(
        make_test_config(tmp_path, plugins=("approvals",), approvals=ASK_ECHO_AND_NOTE),
        plugins=[("tools", Tools()), ("ui", approver)],
        chat=ScriptedChat(responder=calls_responder(
            ("echo", {"text": "hi"}), ("echo", {"text": "hi"}))))
    await agent.run("go")
    assert len(approver.requests) == 2


async def test_an_ask_that_offers_no_rules_grants_nothing_for_the_session(
        tmp_path: Path) -> None:
    """Without the approvals plugin nothing keeps grants: a third-party Ask offers no
    rules, and a session approval covers only that call."""
    approver = ScriptedApprover(lambda _r: Approval(True, scope="session"))
    _, events = await run_agent(
        tmp_path, [("tools", Tools()), ("ask", AskFor("echo")), ("ui", approver)],
        ("echo", {"text": "hi"}), ("echo", {"text": "hi"}))
    assert [(r.rules, r.preview) for r in approver.requests] == [((), None), ((), None)]
    assert [r.approver for r in of_type(events, ApprovalResolved)] == ["ui", "ui"]


async def test_a_model_switch_keeps_the_sessions_approvals(tmp_path: Path) -> None:
    """``/model`` makes a new agent (``with_model``): what the person granted stays."""
    from lich.config import ProviderConfig
    from lich.testing import ScriptedModel, ScriptedServer

    model = ScriptedModel(responder=calls_responder(("echo", {"text": "hi"})))
    with ScriptedServer(model) as server:
        config = make_test_config(
            tmp_path, plugins=("openai_compat", "approvals"), approvals=ASK_ECHO_AND_NOTE,
            providers=(ProviderConfig(kind="openai_compat", name="s", model="m1",
                                      base_url=server.base_url),))
        approver = ScriptedApprover(lambda _r: Approval(True, scope="session"))
        first = lich.Agent(config, plugins=[("tools", Tools()), ("ui", approver)])
        done = await first.run("go")
        second = first.with_model("m2")
        try:
            await second.run("again", session_id=done.session_id)
        finally:
            await first.aclose()
            await second.aclose()
    assert len(approver.requests) == 1


# ---------------------------------------------------------------------------
# Asks from the check phase
# ---------------------------------------------------------------------------


class CheckAsk:
    """Asks in the check phase about echo calls saying ``final``."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    @hookimpl
    def lich_check_tool_call(self, call: ToolCall) -> Ask | None:
        self.seen.append(dict(call.args))
        return Ask("checked: final") if call.args.get("text") == "final" else None


async def test_a_check_hook_ask_judges_the_final_arguments(tmp_path: Path) -> None:
    approver = ScriptedApprover(lambda _r: Approval(True))
    check = CheckAsk()
    await run_agent(tmp_path, [("tools", Tools()), ("ui", approver), ("check", check)],
                    ("echo", {"text": "final"}))
    (request,) = approver.requests
    assert (request.asked_by, request.reason) == (("check",), "checked: final")


async def test_the_same_question_in_both_phases_is_asked_once(tmp_path: Path) -> None:
    class Both:
        @hookimpl
        def lich_before_tool_call(self, call: ToolCall) -> Ask:
            return Ask("echo needs a yes")

        @hookimpl
        def lich_check_tool_call(self, call: ToolCall) -> Ask:
            return Ask("echo needs a yes")

    approver = ScriptedApprover(lambda _r: Approval(True))
    await run_agent(tmp_path, [("tools", Tools()), ("ui", approver), ("both", Both())],
                    ("echo", {"text": "hi"}))
    (request,) = approver.requests
    assert (request.asked_by, request.reason) == (("both",), "echo needs a yes")


async def test_edited_arguments_are_not_asked_about_again(tmp_path: Path) -> None:
    """The person said yes to the edited arguments: a check-hook Ask on them does not
    ask again (nor loop); only a Block would refuse them."""
    check = CheckAsk()
    approver = ScriptedApprover(lambda _r: Approval(True, args={"text": "final"}))
    tools = Tools()
    await run_agent(tmp_path, [("tools", tools), ("ui", approver), ("ask", AskFor("echo")),
                               ("check", check)],
                    ("echo", {"text": "hi"}))
    assert len(approver.requests) == 1
    assert check.seen == [{"text": "hi"}, {"text": "final"}]
    assert tools.ran == [("echo", {"text": "final"})]


async def test_a_call_to_an_unknown_tool_is_not_asked_about(tmp_path: Path) -> None:
    approver = ScriptedApprover(lambda _r: Approval(True))
    result, events = await run_agent(
        tmp_path, [("tools", Tools()), ("ask", AskFor("nope")), ("ui", approver)],
        ("nope", {"x": 1}))
    assert approver.requests == []
    assert of_type(events, ApprovalRequested) == []
    assert error_of(tool_contents(result.messages)[0]) == "unknown_tool: nope"


async def test_an_async_approver_that_holds_the_loop_past_the_timeout_is_denied(
    tmp_path: Path,
) -> None:
    # Synchronous code cannot be interrupted: this approver freezes the event loop
    # (a bug in it) and answers yes only after approval_timeout_s. A yes in hand only
    # after the deadline does not count.
    class Frozen:
        @hookimpl
        async def lich_request_approval(self) -> Approval:
            time.sleep(0.3)  # noqa: ASYNC251 (the attack: it blocks the loop)
            return Approval(True)

    tools = Tools()
    result, events = await run_agent(
        tmp_path, [("tools", tools), ("ask", AskFor("echo")), ("ui", Frozen())],
        ("echo", {"text": "hi"}), approval_timeout_s=0.1)
    assert tools.ran == []
    error = error_of(tool_contents(result.messages)[0])
    assert error == "approval_timeout: no answer within 0.1s; the call was not run"
    (resolved,) = of_type(events, ApprovalResolved)
    assert resolved.approved is False


async def test_an_approver_whose_own_wait_is_cancelled_denies_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    # The front end's answer future is cancelled by the front end itself (its dialog
    # torn down), not by lich: the approver's await raises CancelledError. That is the
    # approver failing — the call is denied — not the run being cancelled.
    class TornDown:
        @hookimpl
        async def lich_request_approval(self) -> Approval:
            answer: asyncio.Future[Approval] = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(answer.cancel)
            return await answer

    tools = Tools()
    result, events = await run_agent(
        tmp_path, [("tools", tools), ("ask", AskFor("echo")), ("ui", TornDown())],
        ("echo", {"text": "hi"}))
    assert result.stopped_reason == "final"
    assert tools.ran == []
    assert error_of(tool_contents(result.messages)[0]) == (
        "approval_error (ui): RuntimeError: CancelledError() raised in a plugin function")
    (resolved,) = of_type(events, ApprovalResolved)
    assert resolved.approved is False


# ---------------------------------------------------------------------------
# The core knows only the Ask contract
# ---------------------------------------------------------------------------


def test_a_config_without_the_approvals_plugin_imports_nothing_of_it(tmp_path: Path) -> None:
    """An agent that asks, is answered, runs the call, and grants a session (nobody
    keeps it) — in a fresh interpreter, where nothing of ``lich.approvals`` is loaded."""
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "no_approvals.py"
    script.write_text(textwrap.dedent("""
        import asyncio, sys
        import lich
        from lich.testing import (AskFor, ScriptedApprover, ScriptedChat, calls_responder,
                                  make_test_config)

        @lich.tool
        def echo(text: str) -> str:
            "Echo."
            return "echo: " + text

        class Tools:
            @lich.hookimpl
            def lich_register_tools(self, registry):
                registry.register(echo)

        approver = ScriptedApprover(lambda _r: lich.Approval(True, scope="session"))
        agent = lich.Agent(make_test_config(sys.argv[1], plugins=("builtin_tools",)),
                           plugins=[("tools", Tools()), ("ask", AskFor("echo")),
                                    ("ui", approver)],
                           chat=ScriptedChat(responder=calls_responder(
                               ("echo", {"text": "hi"}), ("echo", {"text": "hi"}))))
        result = asyncio.run(agent.run("go"))
        assert len(approver.requests) == 2, approver.requests
        print([m.content for m in result.messages if m.role == "tool"])
        print(sorted(m for m in sys.modules if m.startswith("lich.approvals")))
    """))
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    ran, imported = proc.stdout.strip().splitlines()[-2:]
    assert ran == "['echo: hi', 'echo: hi']"
    assert imported == "[]"
