"""The conversation bus: ordering, parallelism, eviction, limits, resets, errors, resume."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lich.gateway.bus import (
    BUSY_TEXT,
    CLOSED_TEXT,
    HISTORY_STUB,
    RESET_TEXT,
    GatewayBus,
    InboundMessage,
    cap_history,
)
from lich.gateway.formatting import conversation_session_id
from lich.sessions import JsonlSessionStore
from lich.testing import Fail, ScriptedChat, async_wait_for
from lich.types import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

from .conftest import NOTES, GatedChat, events, gateway_responder


def msg(text: str, chat: str = "c1", user: str = "u1", platform: str = "test") -> InboundMessage:
    return InboundMessage(platform, chat, user, text)


async def test_a_run_uses_a_tool_and_is_recorded_in_its_session(
    make_bus: Callable[..., GatewayBus],
):
    bus = make_bus()
    reply = await bus.handle(msg("read notes.txt"))
    assert reply.kind == "reply"
    assert reply.text == f"the file says: {NOTES.strip()}"
    assert reply.session_id == bus.session_id_for("test", "c1")
    assert reply.usage is not None
    assert reply.usage.total_tokens > 0
    contents = bus.agent.sessions.read(reply.session_id)
    tool_messages = [m for m in contents.messages if isinstance(m, ToolMessage)]
    assert [m.name for m in tool_messages] == ["read_file"]
    assert NOTES.strip() in tool_messages[0].content


async def test_conversations_run_in_parallel_and_each_stays_in_order(
    make_bus: Callable[..., GatewayBus],
):
    chat = GatedChat()
    bus = make_bus(chat)
    first = asyncio.create_task(bus.handle(msg("hold a", chat="A")))
    await async_wait_for(lambda: "hold a" in chat.started, what="A's first run to start")
    second = asyncio.create_task(bus.handle(msg("a-second", chat="A")))
    # Another conversation is answered while A's first run is still open...
    other = await asyncio.wait_for(bus.handle(msg("b-only", chat="B")), 15)
    assert other.text.startswith("you said: b-only")
    assert not first.done()
    # ...and A's second message has not even reached the model.
    await asyncio.sleep(0.05)
    assert "a-second" not in chat.started
    assert not second.done()
    chat.gate("a").set()
    a1, a2 = await asyncio.wait_for(asyncio.gather(first, second), 15)
    assert chat.started.index("hold a") < chat.started.index("a-second")
    assert a1.text.startswith("you said: hold a")
    # The second run saw the first one's exchange: order and continuity.
    assert a2.text == "you said: a-second | earlier: hold a"


async def test_many_messages_to_one_conversation_keep_their_order(
    make_bus: Callable[..., GatewayBus],
):
    chat = GatedChat()
    bus = make_bus(chat, queue_limit=10)
    tasks = [asyncio.create_task(bus.handle(msg(f"m{i}", chat="Q"))) for i in range(6)]
    replies = await asyncio.wait_for(asyncio.gather(*tasks), 15)
    assert chat.started == [f"m{i}" for i in range(6)]
    assert replies[-1].text == "you said: m5 | earlier: m0 / m1 / m2 / m3 / m4"


async def test_queue_limit_answers_busy_instead_of_queueing(make_bus: Callable[..., GatewayBus]):
    chat = GatedChat()
    bus = make_bus(chat, queue_limit=2)
    running = asyncio.create_task(bus.handle(msg("hold q", chat="Q")))
    await async_wait_for(lambda: "hold q" in chat.started)
    waiting = asyncio.create_task(bus.handle(msg("next", chat="Q")))
    await async_wait_for(lambda: bus.in_flight == 2, what="the second message to queue")
    busy = await bus.handle(msg("one too many", chat="Q"))
    assert busy.kind == "busy"
    assert busy.text == BUSY_TEXT
    assert "one too many" not in chat.started
    # Other conversations are not affected.
    assert (await bus.handle(msg("fine", chat="R"))).kind == "reply"
    chat.gate("q").set()
    assert [r.kind for r in await asyncio.gather(running, waiting)] == ["reply", "reply"]
    # Once the queue drained, the conversation takes messages again.
    assert (await bus.handle(msg("again", chat="Q"))).kind == "reply"


async def test_idle_conversations_are_evicted_least_recently_used(
    make_bus: Callable[..., GatewayBus], gateway_log: pytest.LogCaptureFixture,
):
    bus = make_bus(max_conversations=2)
    await bus.handle(msg("one", chat="c1"))
    await bus.handle(msg("two", chat="c2"))
    await bus.handle(msg("one again", chat="c1"))  # c1 is now the most recently used
    await bus.handle(msg("three", chat="c3"))
    assert bus.conversation_keys() == [("test", "c1"), ("test", "c3")]
    evicted = events(gateway_log, "conversation_evicted")
    assert [e["chat"] for e in evicted] == ["c2"]
    # An evicted conversation comes back from its session file.
    back = await bus.handle(msg("two again", chat="c2"))
    assert back.text == "you said: two again | earlier: two"


async def test_a_busy_conversation_is_never_evicted(make_bus: Callable[..., GatewayBus]):
    chat = GatedChat()
    bus = make_bus(chat, max_conversations=1)
    held = asyncio.create_task(bus.handle(msg("hold x", chat="busy")))
    await async_wait_for(lambda: "hold x" in chat.started)
    assert (await bus.handle(msg("hi", chat="other"))).kind == "reply"
    assert ("test", "busy") in bus.conversation_keys()
    chat.gate("x").set()
    assert (await held).kind == "reply"


async def test_new_resets_the_conversation_and_survives_a_restart(make_agent: Callable[..., Any]):
    bus = GatewayBus(make_agent())
    await bus.handle(msg("remember banana"))
    reset = await bus.handle(msg("/new"))
    assert reset.kind == "reset"
    assert reset.text == RESET_TEXT
    after = await bus.handle(msg("what now?"))
    assert after.text == "you said: what now? | earlier: -"
    # The transcript keeps everything, with the reset on record...
    contents = bus.agent.sessions.read(after.session_id)
    assert any(r.get("event") == "reset" for r in contents.records if r["kind"] == "meta")
    assert "remember banana" in (bus.agent.sessions.path_for(after.session_id)).read_text()
    # ...and a restarted gateway resumes after the reset, not before it.
    again = await GatewayBus(make_agent()).handle(msg("and now?"))
    assert again.text == "you said: and now? | earlier: what now?"


async def test_new_with_text_resets_then_runs_it(make_bus: Callable[..., GatewayBus]):
    bus = make_bus()
    await bus.handle(msg("old stuff"))
    reply = await bus.handle(msg("/new@lich_bot fresh start"))
    assert reply.text == "you said: fresh start | earlier: -"


async def test_start_says_hello(make_bus: Callable[..., GatewayBus]):
    bus = make_bus()
    reply = await bus.handle(msg("/start"))
    assert reply.text == "you said: hello | earlier: -"


async def test_restart_resumes_the_conversation_from_its_session(make_agent: Callable[..., Any]):
    first = GatewayBus(make_agent())
    await first.handle(msg("my name is Ada", chat="42"))
    await first.handle(msg("read notes.txt", chat="42"))
    # A new process: new agent, new bus, same session directory.
    second = GatewayBus(make_agent())
    reply = await second.handle(msg("who am I?", chat="42"))
    assert reply.text == "you said: who am I? | earlier: my name is Ada / read notes.txt"
    history = second.history_of("test", "42")
    assert history is not None
    assert isinstance(history[0], SystemMessage)
    assert any(isinstance(m, ToolMessage) for m in history)


async def test_errors_reach_users_sanitised_and_the_logs_in_full(
    make_bus: Callable[..., GatewayBus], gateway_log: pytest.LogCaptureFixture,
):
    secret = "sk-live-abcdefghijklmnop"
    chat = ScriptedChat([Fail(500, {"error": f"upstream broke, key {secret}\nTraceback..."}),
                         Fail(429, {"error": "slow down"})], responder=gateway_responder)
    bus = make_bus(chat)
    reply = await bus.handle(msg("hi"))
    assert reply.kind == "error"
    assert re.fullmatch(r"agent error: [^\n]+ \(ref [0-9a-f]{8}\)", reply.text)
    assert secret not in reply.text
    assert "Traceback" not in reply.text
    # The model's server failed (HTTP 500): said so, not blamed on rate limiting.
    assert "the model provider failed (a server error)" in reply.text
    assert "rate limit" not in reply.text
    ref = reply.text.rsplit("ref ", 1)[1].rstrip(")")
    failed = events(gateway_log, "run_failed")
    assert failed
    assert failed[0]["ref"] == ref
    assert secret not in failed[0]["error"]  # even the log line is redacted
    limited = await bus.handle(msg("again"))
    assert "rate limiting" in limited.text
    # The conversation goes on after failures, with its earlier messages intact.
    ok = await bus.handle(msg("third"))
    assert ok.text.startswith("you said: third | earlier: hi / again")


async def test_an_unexpected_exception_is_an_internal_error(make_bus: Callable[..., GatewayBus]):
    def explode(request: Any) -> Any:
        raise RuntimeError("/home/me/.secrets/token=abc123 at line 7")

    bus = make_bus(ScriptedChat(responder=explode))
    reply = await bus.handle(msg("hi"))
    assert reply.kind == "error"
    assert reply.text.startswith("agent error: internal error (ref ")
    assert "secrets" not in reply.text


async def test_a_closed_bus_refuses_new_messages(make_bus: Callable[..., GatewayBus]):
    bus = make_bus()
    bus.close()
    reply = await bus.handle(msg("hi"))
    assert reply.kind == "closed"
    assert reply.text == CLOSED_TEXT


async def test_drain_waits_for_runs_in_flight(make_bus: Callable[..., GatewayBus]):
    chat = GatedChat()
    bus = make_bus(chat)
    held = asyncio.create_task(bus.handle(msg("hold d")))
    await async_wait_for(lambda: "hold d" in chat.started)
    drain = asyncio.create_task(bus.drain(15))
    await asyncio.sleep(0.05)
    assert not drain.done()  # waiting for the run, not cutting it short
    assert (await bus.handle(msg("late", chat="other"))).kind == "closed"
    chat.gate("d").set()
    assert await asyncio.wait_for(drain, 15) is True
    assert (await held).kind == "reply"


async def test_drain_cancels_runs_after_the_grace_period(make_bus: Callable[..., GatewayBus]):
    chat = GatedChat()
    bus = make_bus(chat)
    held = asyncio.create_task(bus.handle(msg("hold forever")))
    await async_wait_for(lambda: "hold forever" in chat.started)
    assert await asyncio.wait_for(bus.drain(0.1), 15) is False
    reply = await held
    assert reply.kind == "aborted"
    contents = bus.agent.sessions.read(reply.session_id)
    assert contents.problems == ()
    assert contents.records[-1]["kind"] == "meta"
    assert contents.records[-1]["stopped_reason"] == "aborted"


async def test_history_is_capped_without_orphaning_tool_results(
    make_bus: Callable[..., GatewayBus],
):
    bus = make_bus(history_cap=6)
    for i in range(5):
        await bus.handle(msg(f"read notes.txt #{i}" if i % 2 else f"plain {i}"))
    history = bus.history_of("test", "c1")
    assert history is not None
    assert isinstance(history[0], SystemMessage)
    body = history[1:]
    assert len(body) <= 6
    assert isinstance(body[0], UserMessage)
    _assert_no_orphans(history)


def _assert_no_orphans(messages: list[Message]) -> None:
    called: set[str] = set()
    for m in messages:
        if isinstance(m, AssistantMessage):
            called.update(c.id for c in m.tool_calls)
        if isinstance(m, ToolMessage):
            assert m.tool_call_id in called, f"orphaned tool result {m.tool_call_id}"


# ------------------------------------------------------------------ cap_history


def _tool_turn(i: int) -> list[Message]:
    return [
        AssistantMessage("", (ToolCall(f"t{i}a", "read_file", {}), ToolCall(f"t{i}b", "x", {}))),
        ToolMessage(f"t{i}a", "read_file", "r"),
        ToolMessage(f"t{i}b", "x", "r"),
    ]


def test_cap_history_keeps_the_last_messages_from_a_user_turn():
    messages: list[Message] = [SystemMessage("sys")]
    for i in range(60):
        messages.append(UserMessage(f"m{i}"))
    capped = cap_history(messages, 5)
    assert capped[0] == SystemMessage("sys")
    assert [m.content for m in capped[1:]] == ["m55", "m56", "m57", "m58", "m59"]


def test_cap_history_starts_after_a_cut_tool_turn():
    messages: list[Message] = [SystemMessage("s"), UserMessage("u1"), *_tool_turn(1),
                               AssistantMessage("a1"), UserMessage("u2"), AssistantMessage("a2")]
    capped = cap_history(messages, 4)
    assert capped == [SystemMessage("s"), UserMessage("u2"), AssistantMessage("a2")]


def test_cap_history_of_one_long_tool_loop_opens_with_a_stub():
    messages: list[Message] = [SystemMessage("s"), UserMessage("go")]
    for i in range(5):
        messages.extend(_tool_turn(i))
    messages.append(AssistantMessage("done"))
    capped = cap_history(messages, 7)
    assert capped[0] == SystemMessage("s")
    assert capped[1] == UserMessage(HISTORY_STUB)
    assert len(capped) - 1 <= 7
    assert not isinstance(capped[2], ToolMessage)
    _assert_no_orphans(capped)


_messages = st.lists(
    st.one_of(
        st.builds(lambda t: [UserMessage(t)], st.text(max_size=3)),
        st.builds(lambda t: [AssistantMessage(t)], st.text(max_size=3)),
        st.builds(lambda i, n: [AssistantMessage("", tuple(ToolCall(f"{i}-{k}", "t", {})
                                                          for k in range(n)))]
                  + [ToolMessage(f"{i}-{k}", "t", "r") for k in range(n)],
                  st.integers(0, 10**6), st.integers(1, 3)),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(_messages, st.integers(2, 12), st.booleans())
def test_cap_history_properties(turns: list[list[Message]], cap: int, with_system: bool):
    messages: list[Message] = [SystemMessage("sys")] if with_system else []
    for turn in turns:
        messages.extend(turn)
    capped = cap_history(messages, cap)
    body = capped[1:] if with_system else capped
    rest = messages[1:] if with_system else messages
    if with_system:
        assert capped[0] == SystemMessage("sys")
    if len(rest) <= cap:
        assert body == rest
    else:
        assert len(body) <= cap
        assert isinstance(body[0], UserMessage)
    _assert_no_orphans(capped)
    # Whatever is kept (beyond a stub) is the most recent part, in order.
    tail = [m for m in body if m != UserMessage(HISTORY_STUB)]
    assert tail == messages[len(messages) - len(tail):]


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=300), st.text(min_size=1, max_size=40))
def test_session_ids_are_always_valid_and_distinct(chat_id: str, platform: str):
    key = b"k" * 32
    sid = conversation_session_id(platform, chat_id, key)
    assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", sid)
    JsonlSessionStore("/tmp/x").path_for(sid)  # accepted by the store
    assert sid != conversation_session_id(platform, chat_id + "x", key)
    assert sid == conversation_session_id(platform, chat_id, key)
    # Another install's key names the same chat differently.
    assert sid != conversation_session_id(platform, chat_id, b"j" * 32)


async def test_a_failing_reset_is_a_clean_error(make_bus: Callable[..., GatewayBus],
                                                monkeypatch: pytest.MonkeyPatch):
    bus = make_bus()
    await bus.handle(msg("hello"))

    def refuse(*_: Any) -> Any:
        raise OSError("disk full at /var/secret/path")

    monkeypatch.setattr(bus.agent.sessions, "open", refuse)
    reply = await bus.handle(msg("/new"))
    assert reply.kind == "error"
    assert "disk full" not in reply.text
    assert bus.in_flight == 0
