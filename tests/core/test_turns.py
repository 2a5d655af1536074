"""Durable turns on the JSONL store: the records a turn writes, and continuing a turn a
dead run left unfinished (``Agent.continue_turn``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lich import hookimpl, tool
from lich.agent import Agent
from lich.testing import Reply, ScriptedChat, ScriptRequest, make_test_config
from lich.tools import ToolRegistry
from lich.turns import CANCELLED_RUNNING_ERROR, INTERRUPTED_ERROR, DurableTurn, find_turn
from lich.types import AssistantMessage, Message, ToolCall, ToolMessage, UserMessage

#: What each tool saw of the transcript when it ran: (tool, the meta events recorded so far).
RAN: list[tuple[str, list[str]]] = []
SESSION: dict[str, Agent] = {}


def _meta_events(agent: Agent, session_id: str) -> list[str]:
    records = agent.sessions.read(session_id).records
    return [str(r.get("event")) for r in records if r.get("kind") == "meta"]


def _saw(name: str) -> None:
    agent = SESSION["agent"]
    RAN.append((name, _meta_events(agent, "s1") if agent.sessions.exists("s1") else []))


@tool
def charge(amount: int) -> str:
    """Charge a card (not idempotent)."""
    _saw("charge")
    return f"charged {amount}"


@tool(idempotent=True)
def put(key: str) -> str:
    """Set a key (idempotent)."""
    _saw("put")
    return f"set {key}"


class Tools:
    @hookimpl
    def lich_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(charge)
        registry.register(put)


def make_agent(tmp_path: Path, chat: Any) -> Agent:
    RAN.clear()
    agent = Agent(make_test_config(tmp_path), plugins=[("tools", Tools())], chat=chat)
    SESSION["agent"] = agent
    return agent


def turn_records(agent: Agent, session_id: str = "s1") -> list[dict[str, Any]]:
    return [r for r in agent.sessions.read(session_id).records
            if r.get("kind") == "meta" and "admission" in r]


async def test_a_durable_turn_records_its_start_tool_starts_end_and_reply_in_order(
    tmp_path: Path,
) -> None:
    seen: list[list[str]] = []

    def responder(request: ScriptRequest) -> Reply:
        # What the transcript holds when the model is called.
        seen.append(_meta_events(SESSION["agent"], "s1"))
        if not request.tool_results_since_user():
            return Reply(tool_calls=[ToolCall("c1", "put", {"key": "k"}),
                                     ToolCall("c2", "charge", {"amount": 5})])
        return Reply("paid")

    agent = make_agent(tmp_path, ScriptedChat(responder=responder))
    turn = DurableTurn("adm-1")
    result = await agent.run("pay", session_id="s1", turn=turn)
    assert result.text == "paid"
    assert turn.started
    assert turn.recorded
    assert not turn.stale
    assert await turn.end("reply", result.text)
    assert await turn.reply_sent()

    # turn_start is stored before the first model call; tool_start before the tool that
    # is not idempotent runs, and only for it.
    assert seen[0] == ["run_start", "turn_start"]
    assert RAN == [("put", ["run_start", "turn_start"]),
                   ("charge", ["run_start", "turn_start", "tool_start"])]
    records = turn_records(agent)
    assert [r["event"] for r in records] == ["turn_start", "tool_start", "turn_end", "reply_sent"]
    assert records[0]["run_id"] == result.run_id
    assert (records[1]["call_id"], records[1]["tool"]) == ("c2", "charge")
    assert records[2]["reply"] == {"kind": "reply", "text": "paid", "run_id": result.run_id}
    # turn_end and reply_sent come after the run's own end.
    events = _meta_events(agent, "s1")
    assert events.index("run_end") < events.index("turn_end")

    found = find_turn(agent.sessions.read("s1").records, "adm-1")
    assert found.state == "answered"
    assert found.reply is not None
    assert found.reply["text"] == "paid"
    assert found.started_calls == {"c2"}
    assert find_turn(agent.sessions.read("s1").records, "other").state == "new"
    await agent.aclose()


async def test_without_a_durable_turn_nothing_is_recorded(tmp_path: Path) -> None:
    chat = ScriptedChat([Reply(tool_calls=[ToolCall("c1", "charge", {"amount": 1})]), "ok"])
    agent = make_agent(tmp_path, chat)
    await agent.run("pay", session_id="s1")
    assert turn_records(agent) == []
    assert RAN == [("charge", ["run_start"])]
    await agent.aclose()


async def test_find_turn_tells_the_states_apart() -> None:
    def meta(event: str, **fields: Any) -> dict[str, Any]:
        return {"v": 2, "kind": "meta", "event": event, "admission": "a", **fields}

    started = [meta("turn_start", run_id="r")]
    assert find_turn([], "a").state == "new"
    assert find_turn(started, "a").state == "running"
    ended = [*started, meta("turn_end", reply={"kind": "reply", "text": "x"})]
    assert find_turn(ended, "a").state == "ended"
    assert find_turn([*ended, meta("reply_sent")], "a").state == "answered"
    # Another admission's records, and a malformed reply, are not this turn's end.
    assert find_turn([*started, meta("turn_end", reply="x")], "a").state == "running"
    assert find_turn(ended, "b").state == "new"
    # The turn's user message recorded (with its admission), its turn_start not yet: a
    # turn to continue, not to start again.
    begun = find_turn([{"v": 2, "kind": "message", "admission": "a",
                        "message": {"role": "user", "content": "x"}}], "a")
    assert (begun.state, begun.started, begun.begun) == ("running", False, True)


def _interrupted_session(tmp_path: Path, calls: list[ToolCall],
                         results: list[ToolMessage]) -> tuple[Agent, list[Message]]:
    """A session whose run died after the model asked for ``calls`` (with ``results``
    recorded), written as the dead run's writer left it."""
    chat = ScriptedChat(responder=lambda request: Reply(
        f"after {[m.content for m in request.tool_results_since_user()]}"))
    agent = make_agent(tmp_path, chat)
    writer = agent.sessions.open("s1")
    history: list[Message] = [UserMessage("earlier"), AssistantMessage("earlier answer"),
                              UserMessage("do it"), AssistantMessage("", tuple(calls)), *results]
    writer.append("meta", event="run_start", run_id="dead", input="do it")
    for message in history:
        writer.message(message)
    writer.append("meta", event="turn_start", admission="adm", run_id="dead")
    for call in calls:
        if call.name == "charge":
            writer.append("meta", event="tool_start", admission="adm", call_id=call.id,
                          tool="charge")
    writer.close()
    return agent, history


async def test_continue_turn_reruns_idempotent_calls_and_never_reruns_a_started_one(
    tmp_path: Path,
) -> None:
    calls = [ToolCall("c1", "put", {"key": "a"}), ToolCall("c2", "charge", {"amount": 9}),
             ToolCall("c3", "put", {"key": "b"})]
    done = ToolMessage("c1", "put", "set a")
    agent, _ = _interrupted_session(tmp_path, calls, [done])
    contents = agent.sessions.read("s1")
    state = find_turn(contents.records, "adm", contents.messages)
    assert state.state == "running"
    assert state.started_calls == {"c2"}

    turn = DurableTurn("adm", resume=state)
    result = await agent.continue_turn(list(state.messages), "s1",
                                       interrupted=state.started_calls, turn=turn)
    # c1 had its result; c2 (not idempotent, started) is not run again; c3 is.
    assert [name for name, _ in RAN] == ["put"]
    chat = agent.chat
    assert isinstance(chat, ScriptedChat)
    assert len(chat.requests) == 1
    told = chat.requests[0].tool_results_since_user()
    assert [m.tool_call_id for m in told] == ["c1", "c2", "c3"]
    assert INTERRUPTED_ERROR in told[1].content
    assert told[1].is_error
    assert result.text.startswith("after ")
    # No second user message, no second turn_start; the run says it continued.
    after = agent.sessions.read("s1")
    users = [m for m in after.messages if isinstance(m, UserMessage)]
    assert [m.content for m in users] == ["earlier", "do it"]
    assert [r["event"] for r in turn_records(agent)] == ["turn_start", "tool_start"]
    starts = [r for r in after.records if r.get("event") == "run_start"]
    assert starts[-1].get("continued") is True
    assert starts[-1]["input"] == "do it"
    assert turn.started
    assert await turn.end("reply", result.text)
    assert find_turn(agent.sessions.read("s1").records, "adm").state == "ended"
    await agent.aclose()


async def test_continue_turn_runs_a_call_that_never_started(tmp_path: Path) -> None:
    # A charge without a tool_start never ran (tool_start is stored before it runs).
    agent, history = _interrupted_session(tmp_path, [ToolCall("c9", "put", {"key": "z"})], [])
    agent2 = make_agent(tmp_path, agent.chat)
    history[-1] = AssistantMessage("", (ToolCall("c9", "charge", {"amount": 1}),))
    result = await agent2.continue_turn(history, "s1", interrupted=set())
    assert [name for name, _ in RAN] == ["charge"]
    assert "charged 1" in result.text
    # Without knowing what started, every call of a tool that is not idempotent counts
    # as maybe started.
    RAN.clear()
    result = await agent2.continue_turn(history, "s1")
    assert RAN == []
    assert "interrupted" in result.text
    await agent.aclose()
    await agent2.aclose()


async def test_continue_turn_with_a_recorded_answer_makes_no_model_call(tmp_path: Path) -> None:
    chat = ScriptedChat(["must not be asked"])
    agent = make_agent(tmp_path, chat)
    history: list[Message] = [UserMessage("hi"), AssistantMessage("hello there")]
    result = await agent.continue_turn(history, "s1")
    assert result.text == "hello there"
    assert result.stopped_reason == "final"
    assert chat.requests == []
    # The turn waiting on the model's first answer calls it, once.
    result = await agent.continue_turn([UserMessage("again")], "s2")
    assert result.text == "must not be asked"
    assert len(chat.requests) == 1
    await agent.aclose()


async def test_continue_turn_needs_a_turn(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, ScriptedChat())
    with pytest.raises(ValueError, match="no user message"):
        await agent.continue_turn([AssistantMessage("x")], "s1")
    await agent.aclose()


async def test_a_resumed_turn_longer_than_the_history_cap_keeps_its_user_message(
    tmp_path: Path,
) -> None:
    # The gateway caps the history it hands a run *before* the turn; the turn itself grows
    # past the cap as its tools run. A resumed turn is capped the same way: the earlier
    # turns are cut, never the turn's own user message (it would become the "earlier
    # messages were left out" stub, and the model would no longer know what was asked).
    from lich.gateway.bus import HISTORY_STUB, GatewayBus, InboundMessage

    chat = ScriptedChat(responder=lambda request: Reply(f"answer to {request.last_user()}"))
    agent = make_agent(tmp_path, chat)
    bus = GatewayBus(agent, history_cap=2)
    session = bus.session_id_for("webhook", "c1")
    writer = agent.sessions.open(session)
    writer.append("meta", event="run_start", run_id="dead", input="do it")
    history: list[Message] = [UserMessage("first"), AssistantMessage("first answer"),
                              UserMessage("second"), AssistantMessage("second answer"),
                              UserMessage("do it")]
    for n in range(3):  # three rounds of tools: the turn alone is over the cap
        history += [AssistantMessage("", (ToolCall(f"c{n}", "put", {"key": str(n)}),)),
                    ToolMessage(f"c{n}", "put", f"set {n}")]
    for message in history[:5]:
        writer.message(message)
    writer.append("meta", event="turn_start", admission="adm", run_id="dead")
    for message in history[5:]:
        writer.message(message)
    writer.close()
    contents = agent.sessions.read(session)
    state = find_turn(contents.records, "adm", contents.messages)
    try:
        reply = await bus.handle(InboundMessage("webhook", "c1", "u1", "do it", "m1"),
                                 turn=DurableTurn("adm", resume=state))
        assert (reply.kind, reply.text) == ("reply", "answer to do it")
        [request] = chat.requests
        users = [m.content for m in request.messages if isinstance(m, UserMessage)]
        # The earlier turns are capped (to the last one), the turn's own message kept.
        assert users == ["second", "do it"]
        assert HISTORY_STUB not in users
        # The whole turn so far is there, in order, after its user message.
        assert [m.tool_call_id for m in request.messages if isinstance(m, ToolMessage)] == [
            "c0", "c1", "c2"]
    finally:
        await bus.drain(0)
        await agent.aclose()


async def test_a_continued_turn_runs_its_calls_through_the_guard_hooks_again(
    tmp_path: Path,
) -> None:
    # An idempotent call left without a result runs again on a continued turn: through
    # the before/check hooks like any call (a guard says what it says on a resume too),
    # and a blocked one does not run.
    from lich import Block

    checked: list[str] = []

    class Guard:
        @hookimpl
        def lich_check_tool_call(self, call: ToolCall) -> Block | None:
            checked.append(call.id)
            return Block("not today") if call.args.get("key") == "blocked" else None

    calls = [ToolCall("c1", "put", {"key": "blocked"}), ToolCall("c2", "put", {"key": "ok"})]
    agent, history = _interrupted_session(tmp_path, calls, [])
    await agent.aclose()
    agent = Agent(make_test_config(tmp_path), plugins=[("tools", Tools()), ("guard", Guard())],
                  chat=ScriptedChat(responder=lambda request: Reply(
                      f"after {[m.content for m in request.tool_results_since_user()]}")))
    SESSION["agent"] = agent
    RAN.clear()
    result = await agent.continue_turn(history, "s1", interrupted=set())
    assert checked == ["c1", "c2"]
    assert [name for name, _ in RAN] == ["put"]  # c2 only
    told = result.messages[-3:-1]
    assert [(m.tool_call_id, m.is_error) for m in told if isinstance(m, ToolMessage)] == [
        ("c1", True), ("c2", False)]
    assert "not today" in told[0].content
    await agent.aclose()


async def test_a_turn_compacted_before_its_crash_is_continued_from_the_compacted_history(
    tmp_path: Path,
) -> None:
    # Compression replaced the history mid-turn (a compact record after turn_start): the
    # continued turn goes on from the compacted history, as the dead run would have,
    # with no user message added (the summary stands for the earlier ones).
    from lich.gateway.bus import GatewayBus, InboundMessage

    chat = ScriptedChat(responder=lambda request: Reply(
        f"after {[m.content for m in request.tool_results_since_user()]}"))
    agent = make_agent(tmp_path, chat)
    bus = GatewayBus(agent, history_cap=2)
    session = bus.session_id_for("webhook", "c1")
    summary = UserMessage("[summary of: earlier, do it, c0]")
    writer = agent.sessions.open(session)
    writer.append("meta", event="run_start", run_id="dead", input="do it")
    for message in (UserMessage("earlier"), AssistantMessage("earlier answer")):
        writer.message(message)
    writer.append("message", message={"role": "user", "content": "do it"}, admission="adm")
    writer.append("meta", event="turn_start", admission="adm", run_id="dead")
    first = AssistantMessage("", (ToolCall("c0", "put", {"key": "0"}),))
    writer.message(first)
    writer.message(ToolMessage("c0", "put", "set 0"))
    writer.compact([summary, first, ToolMessage("c0", "put", "set 0")])
    writer.message(AssistantMessage("", (ToolCall("c1", "put", {"key": "1"}),)))
    writer.close()
    contents = agent.sessions.read(session)
    state = find_turn(contents.records, "adm", contents.messages)
    assert state.state == "running"
    try:
        reply = await bus.handle(InboundMessage("webhook", "c1", "u1", "do it", "m1"),
                                 turn=DurableTurn("adm", resume=state))
        assert reply.text == "after ['set 0', 'set 1']"
        [request] = chat.requests
        assert [m.content for m in request.messages if isinstance(m, UserMessage)] == [
            summary.content]
        assert [name for name, _ in RAN] == ["put"]  # c1 only: c0 had its result
        users = [m for m in agent.sessions.read(session).messages if isinstance(m, UserMessage)]
        assert [m.content for m in users] == [summary.content]
    finally:
        await bus.drain(0)
        await agent.aclose()


async def test_a_call_cancelled_while_it_ran_in_a_durable_turn_is_recorded_as_interrupted(
    tmp_path: Path,
) -> None:
    # A worker stopping past its grace period cancels its runs and hands them back. A
    # call of a tool that is not idempotent, cancelled while it ran, may have taken
    # effect: the result recorded (what the next worker's model sees) must say so, not
    # "cancelled", after which a model would simply make the call again.
    import asyncio

    from lich.cancel import CancelToken

    running = asyncio.Event()
    paid: list[int] = []

    @tool
    async def slow_charge(amount: int) -> str:
        """Charge a card, slowly (not idempotent)."""
        paid.append(amount)
        running.set()
        await asyncio.sleep(60)
        return "charged"

    class Slow:
        @hookimpl
        def lich_register_tools(self, registry: ToolRegistry) -> None:
            registry.register(slow_charge)

    chat = ScriptedChat([Reply(tool_calls=[ToolCall("c1", "slow_charge", {"amount": 4})]),
                         "not asked"])
    agent = Agent(make_test_config(tmp_path), plugins=[("slow", Slow())], chat=chat)
    token = CancelToken()
    run = asyncio.ensure_future(agent.run("pay", session_id="s1", cancel=token,
                                          turn=DurableTurn("adm")))
    await asyncio.wait_for(running.wait(), 30)
    token.cancel()
    result = await asyncio.wait_for(run, 30)
    assert result.stopped_reason == "aborted"
    assert paid == [4]
    contents = agent.sessions.read("s1")
    [told] = [m for m in contents.messages if isinstance(m, ToolMessage)]
    assert told.is_error
    assert CANCELLED_RUNNING_ERROR in told.content
    # The next worker continues the turn and the model is told so: no second charge.
    state = find_turn(contents.records, "adm", contents.messages)
    assert state.state == "running"
    await agent.aclose()


async def test_a_turn_resumed_twice_runs_no_started_call_again(tmp_path: Path) -> None:
    # A died after c1's tool_start; B continues (c1: interrupted), its model asks for c2,
    # B dies while c2 runs (its task killed: nothing after the tool_start is recorded);
    # C continues: neither c1 nor c2 runs again, and the turn still has one turn_start.
    import asyncio

    running = asyncio.Event()
    paid: list[str] = []

    @tool
    async def pay(ref: str) -> str:
        """Pay (not idempotent)."""
        paid.append(ref)
        running.set()
        await asyncio.sleep(60)
        return f"paid {ref}"

    class Pay:
        @hookimpl
        def lich_register_tools(self, registry: ToolRegistry) -> None:
            registry.register(pay)

    def agent_with(chat: ScriptedChat) -> Agent:
        return Agent(make_test_config(tmp_path), plugins=[("pay", Pay())], chat=chat)

    dead = agent_with(ScriptedChat())
    writer = dead.sessions.open("s1")
    writer.append("meta", event="run_start", run_id="a", input="pay twice")
    writer.append("message", message={"role": "user", "content": "pay twice"}, admission="adm")
    writer.append("meta", event="turn_start", admission="adm", run_id="a")
    writer.message(AssistantMessage("", (ToolCall("c1", "pay", {"ref": "one"}),)))
    writer.append("meta", event="tool_start", admission="adm", call_id="c1", tool="pay")
    writer.close()
    await dead.aclose()

    async def resume(agent: Agent) -> asyncio.Future[Any]:
        contents = agent.sessions.read("s1")
        state = find_turn(contents.records, "adm", contents.messages)
        assert state.state == "running"
        return asyncio.ensure_future(agent.continue_turn(
            list(state.messages), "s1", interrupted=state.started_calls,
            turn=DurableTurn("adm", resume=state)))

    b = agent_with(ScriptedChat([Reply(tool_calls=[ToolCall("c2", "pay", {"ref": "two"})])]))
    b_run = await resume(b)
    await asyncio.wait_for(running.wait(), 30)
    b_run.cancel()  # B dies while c2 runs
    with pytest.raises(asyncio.CancelledError):
        await b_run
    await b.aclose()
    assert paid == ["two"]

    c_chat = ScriptedChat(responder=lambda request: Reply(
        f"after {[m.content for m in request.tool_results_since_user()]}"))
    c = agent_with(c_chat)
    result = await asyncio.wait_for(await resume(c), 30)
    assert paid == ["two"]  # c1 (A's) and c2 (B's) never ran again
    told = c_chat.requests[0].tool_results_since_user()
    assert [m.tool_call_id for m in told] == ["c1", "c2"]
    assert all(INTERRUPTED_ERROR in m.content for m in told)
    assert result.stopped_reason == "final"
    assert [r["event"] for r in turn_records(c)] == ["turn_start", "tool_start", "tool_start"]
    await c.aclose()


async def test_a_call_whose_tool_start_was_written_but_not_confirmed_does_not_run(
    tmp_path: Path,
) -> None:
    # The tool_start reached the disk, but the write reported a failure (a full disk, a
    # database answer lost): the call cannot be told from one that ran, so it does not
    # run now, and a later resume, which finds the tool_start, does not run it either.
    from lich.sessions import JsonlSessionStore, SessionWriter
    from lich.turns import NOT_RECORDED_ERROR

    class FailingWriter(SessionWriter):
        def append(self, kind: str, **fields: Any) -> None:
            super().append(kind, **fields)
            if fields.get("event") == "tool_start":
                raise OSError("No space left on device")

    class FailingStore(JsonlSessionStore):
        def open(self, session_id: str | None = None) -> SessionWriter:
            plain = super().open(session_id)
            return FailingWriter(plain.session_id, plain.path)

    store = FailingStore(tmp_path / "sessions")
    chat = ScriptedChat([Reply(tool_calls=[ToolCall("c1", "charge", {"amount": 2})]),
                         "could not pay"])
    RAN.clear()
    agent = Agent(make_test_config(tmp_path), plugins=[("tools", Tools())], chat=chat,
                  sessions=store)
    SESSION["agent"] = agent
    turn = DurableTurn("adm")
    result = await agent.run("pay", session_id="s1", turn=turn)
    assert RAN == []
    assert NOT_RECORDED_ERROR in chat.requests[1].tool_results_since_user()[0].content
    assert result.text == "could not pay"
    assert not turn.recorded
    assert not await turn.end("reply", result.text)  # nothing more is written
    contents = store.read("s1")
    state = find_turn(contents.records, "adm", contents.messages)
    assert (state.state, state.started_calls) == ("running", {"c1"})
    again = Agent(make_test_config(tmp_path), plugins=[("tools", Tools())],
                  chat=ScriptedChat(["told"]), sessions=JsonlSessionStore(tmp_path / "sessions"))
    SESSION["agent"] = again
    await again.continue_turn(list(state.messages), "s1", interrupted=state.started_calls,
                              turn=DurableTurn("adm", resume=state))
    assert RAN == []
    await agent.aclose()
    await again.aclose()
