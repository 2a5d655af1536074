"""The request bodies built from the previous request's (``HttpProvider.wire_fold``).

Every provider reuses what it built for a conversation's previous request when the
new history extends it (the same message objects, in order). These tests hold each
dialect to the one rule that makes that safe: the body sent is exactly the body a
fresh provider (nothing cached) builds from the same history — for a growing history,
one that shrinks (compression), one whose earlier message was replaced, and several
conversations sharing one provider at once, over real HTTP to the scripted server.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest

from lich.testing import Reply, ScriptedServer, tool_loop_responder
from lich.types import (
    AssistantMessage,
    ChatOptions,
    Message,
    SystemMessage,
    ToolCall,
    ToolDefinition,
    ToolMessage,
    UserMessage,
)
from lich_providers._base import HttpProvider

from .conftest import DIALECT_OF, make_provider

TOOLS = [ToolDefinition("echo", "Echo.", {"type": "object"})]


def fresh_body(kind: str, messages: Sequence[Message]) -> Any:
    """What a provider with nothing cached sends for ``messages``, as JSON."""
    body = make_provider(kind).build_body(list(messages), TOOLS, ChatOptions())
    return json.loads(json.dumps(body))


def served(kind: str, server: ScriptedServer) -> HttpProvider:
    base = server.base_url if kind == "openai_compat" else server.root_url
    return make_provider(kind, base_url=base)


def tool_turn(n: int, text: str) -> list[Message]:
    """An answer calling ``echo`` twice and both results (anthropic: one user turn)."""
    return [
        AssistantMessage(f"step {n}", (ToolCall(f"c{n}a", "echo", {"text": text}),
                                       ToolCall(f"c{n}b", "echo", {"text": n}))),
        ToolMessage(f"c{n}a", "echo", f"echo: {text}"),
        ToolMessage(f"c{n}b", "echo", f"echo: {n}", is_error=n % 2 == 0),
    ]


async def test_changed_histories_are_mapped_afresh_over_http(
    kind: str, lich_scripted_server: Callable[..., ScriptedServer],
) -> None:
    server = lich_scripted_server(responder=lambda _: Reply("ok"), dialects=(DIALECT_OF[kind],))
    provider = served(kind, server)
    system, user = SystemMessage("be brief"), UserMessage("go")
    history: list[Message] = [system, user]
    sent: list[list[Message]] = []

    async def send(messages: list[Message]) -> None:
        sent.append(list(messages))
        result = await provider.chat(messages, TOOLS, ChatOptions())
        assert result.message.content == "ok"

    try:
        for n in range(1, 4):  # grows by a tool turn per request
            history += tool_turn(n, "é" * n)
            await send(history)
        # A tool result joins the trailing group (anthropic's user turn still open).
        history += tool_turn(4, "four")
        await send(history[:-1])
        await send(history)
        # Compressed: the system message kept, a summary, the last turn; then it grows again.
        history = [system, UserMessage("summary of turns 1-3"), *history[-3:]]
        await send(history)
        history += tool_turn(5, "after")
        await send(history)
        # An earlier message edited, then one replaced by an equal copy.
        history[4] = attrs.evolve(history[4], content="edited result")
        await send(history)
        history[1] = UserMessage("summary of turns 1-3")
        await send(history)
        # Capped to its newest messages (a user message first), and the same request again.
        history = [UserMessage("recent"), *history[-3:]]
        await send(history)
        await send(history)
        # Back to a longer history the provider built before (a retry of a branch).
        await send(sent[3])
    finally:
        await provider.aclose()

    requests = server.model.requests
    assert len(requests) == len(sent)
    for request, messages in zip(requests, sent, strict=True):
        assert request.raw == fresh_body(kind, messages)
        # And the server reads back the conversation that was sent (tool results included).
        assert [m.content for m in request.messages if not isinstance(m, SystemMessage)] == \
               [m.content for m in messages if not isinstance(m, SystemMessage)]


async def test_conversations_sharing_a_provider_get_their_own_bodies(
    kind: str, lich_scripted_server: Callable[..., ScriptedServer],
) -> None:
    # The gateway runs many conversations through one provider instance at once.
    turns = 4
    server = lich_scripted_server(
        responder=tool_loop_responder(turns, tool="echo", args={"text": "hi"}, final="done"),
        dialects=(DIALECT_OF[kind],),
    )
    provider = served(kind, server)
    expected: dict[str, list[Any]] = {}

    async def conversation(name: str) -> list[Message]:
        history: list[Message] = [SystemMessage(f"you are {name}"), UserMessage(name)]
        expected[name] = []
        while True:
            expected[name].append(fresh_body(kind, history))
            result = await provider.chat(history, TOOLS, ChatOptions())
            history.append(result.message)
            if not result.message.tool_calls:
                return history
            for call in result.message.tool_calls:
                history.append(ToolMessage(call.id, call.name, f"{name}: {call.args['text']}"))
            await asyncio.sleep(0)  # let the other conversations' requests in between

    try:
        names = ["ada", "bob", "cy"]
        histories = await asyncio.wait_for(
            asyncio.gather(*(conversation(n) for n in names)), 60)
    finally:
        await provider.aclose()

    seen: dict[str, list[Any]] = {n: [] for n in names}
    for request in server.model.requests:
        users = [m.content for m in request.messages if isinstance(m, UserMessage)]
        seen[users[0]].append(request.raw)
    assert seen == expected
    for name, history in zip(names, histories, strict=True):
        assert len(expected[name]) == turns + 1
        assert history[-1] == AssistantMessage("done")
        assert all(m.content.startswith(name) for m in history if isinstance(m, ToolMessage))


def test_alternating_conversations_keep_reusing_their_own_wire_forms(kind: str) -> None:
    # Interleaved requests of two conversations on one provider: each request reuses
    # the same wire objects its conversation's previous request had, not only the
    # last request's of the provider.
    provider = make_provider(kind)
    a: list[Message] = [SystemMessage("a"), UserMessage("a")]
    b: list[Message] = [SystemMessage("b"), UserMessage("b")]
    last: dict[str, list[Any]] = {}
    for n in range(1, 4):
        for name, history in (("a", a), ("b", b)):
            history += tool_turn(n, name)
            body = provider.build_body(history, TOOLS, ChatOptions())
            items = body["messages"]
            before = last.get(name)
            if before is not None:
                # All but the previous request's last item (anthropic's open tool-result
                # turn is made per request) are the very same objects.
                assert all(x is y for x, y in zip(before[:-1], items, strict=False))
            last[name] = items
            assert body == make_provider(kind).build_body(history, TOOLS, ChatOptions())


def test_a_request_body_is_the_callers_to_change(kind: str) -> None:
    provider = make_provider(kind)
    history: list[Message] = [UserMessage("go"), *tool_turn(1, "x")]
    first = provider.build_body(history, TOOLS, ChatOptions())
    first["messages"].append({"role": "user", "content": "appended by a caller"})
    if kind == "anthropic":
        first["messages"][-2]["content"].append({"type": "text", "text": "added"})
    history.append(AssistantMessage("done"))
    assert provider.build_body(history, TOOLS, ChatOptions()) == \
        make_provider(kind).build_body(history, TOOLS, ChatOptions())


def test_folded_states_go_with_their_conversations(kind: str) -> None:
    provider = make_provider(kind)
    history: list[Message] = [SystemMessage("s"), UserMessage("go")]
    for n in range(1, 4):
        history += tool_turn(n, "x")
        provider.build_body(history, TOOLS, ChatOptions())
    # One entry for the conversation, however many requests it made.
    assert len(provider._folds) == 1
    del history
    gc.collect()
    assert provider._folds == {}


@pytest.mark.parametrize("empty", [[], [SystemMessage("only")]])
def test_tiny_histories(kind: str, empty: list[Message]) -> None:
    provider = make_provider(kind)
    for _ in range(2):
        assert provider.build_body(empty, TOOLS, ChatOptions()) == \
            make_provider(kind).build_body(empty, TOOLS, ChatOptions())


def test_the_folded_states_are_bounded_and_a_long_jump_is_folded_afresh(kind: str) -> None:
    from lich_providers._base import _FOLDS, _SCAN

    provider = make_provider(kind)
    conversations: list[list[Message]] = [
        [SystemMessage("s"), UserMessage(f"user {i}")] for i in range(_FOLDS + 20)]
    for history in conversations:
        provider.build_body(history, TOOLS, ChatOptions())
    assert len(provider._folds) == _FOLDS
    # The evicted first conversation, and one that grew by more than _SCAN messages at
    # once, still get exactly the body a fresh provider builds.
    first, last = conversations[0], conversations[-1]
    first += tool_turn(1, "x")
    for n in range(2, 2 + _SCAN // 3 + 1):
        last += tool_turn(n, "y")
    for history in (first, last):
        assert provider.build_body(history, TOOLS, ChatOptions()) == \
            make_provider(kind).build_body(history, TOOLS, ChatOptions())
