"""The provider HTTP client's own connection pool and the per-message wire cache.

``HttpClient`` keeps a pool of single-connection httpx clients ("lanes") instead
of one ``httpx.AsyncClient`` (see docs/providers.md, "Connections"): these tests
hold it to what DESIGN.md asks of the one client — the injected transport serves
every request, and ``aclose()`` closes every connection.
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
from typing import Any

import httpx
import pytest

from lich.testing import Reply, async_wait_for
from lich.types import (
    AssistantMessage,
    ChatOptions,
    Message,
    ProviderError,
    SystemMessage,
    ToolCall,
    ToolDefinition,
    ToolMessage,
    UserMessage,
)
from lich_providers._http import HttpClient

from .conftest import Wire, make_provider

TOOLS = [ToolDefinition("echo", "Echo.", {"type": "object"})]


def _history() -> list[Message]:
    return [
        SystemMessage("be brief"),
        UserMessage("go"),
        AssistantMessage("", (ToolCall("c1", "echo", {"text": "é"}),
                              ToolCall("c2", "echo", {"text": "x"}))),
        ToolMessage("c1", "echo", "é"),
        ToolMessage("c2", "echo", "x", is_error=True),
        AssistantMessage(""),  # empty: anthropic leaves it out
        UserMessage("again"),
    ]


def _turns(kind: str, body: dict[str, Any]) -> list[Any]:
    # The per-message pieces of a body: anthropic's tool results sit inside a user turn.
    out: list[Any] = []
    for item in body["messages"]:
        content = item.get("content")
        if kind == "anthropic" and isinstance(content, list) and item["role"] == "user":
            out.extend(content)
        else:
            out.append(item)
    return out


# --- the wire cache ----------------------------------------------------------------------


def test_wire_forms_are_built_once_and_reused(kind: str) -> None:
    provider = make_provider(kind)
    history = _history()
    first = provider.build_body(history, TOOLS, ChatOptions())
    history.append(AssistantMessage("done"))
    second = provider.build_body(history, TOOLS, ChatOptions())
    before, after = _turns(kind, first), _turns(kind, second)
    assert len(after) == len(before) + 1
    # The earlier messages' wire forms are the very same objects, not rebuilt.
    assert all(a is b for a, b in zip(before, after, strict=False))


def test_cached_bodies_equal_fresh_ones(kind: str) -> None:
    cached = make_provider(kind)
    history = _history()
    cached.build_body(history, TOOLS, ChatOptions())
    again = cached.build_body(history, TOOLS, ChatOptions(stream=True))
    fresh = make_provider(kind).build_body(_history(), TOOLS, ChatOptions(stream=True))
    assert again == fresh
    # A different provider's cache is its own: the same message objects map to each
    # provider's dialect.
    other = "ollama" if kind != "ollama" else "anthropic"
    assert make_provider(other).build_body(history, TOOLS, ChatOptions()) == \
        make_provider(other).build_body(_history(), TOOLS, ChatOptions())


def test_wire_cache_forgets_collected_messages(kind: str) -> None:
    provider = make_provider(kind)
    history = _history()
    provider.build_body(history, TOOLS, ChatOptions())
    assert provider._wire_cache  # something was cached
    del history
    gc.collect()
    assert provider._wire_cache == {}


# --- the connection pool -----------------------------------------------------------------


async def test_the_injected_transport_serves_every_concurrent_request(kind: str) -> None:
    """Each concurrent request gets a lane of its own; every lane uses the transport."""
    n = 12
    arrived = 0
    everyone = asyncio.Event()
    wire = Wire(kind)

    async def hold(request: httpx.Request) -> httpx.Response:
        nonlocal arrived
        arrived += 1
        if arrived == n:
            everyone.set()
        await everyone.wait()  # answers only when all n are in flight at once
        return wire.render(json.loads(request.content),
                           Reply("ok"))

    wire.push(*[hold] * (2 * n))
    provider = make_provider(kind, wire)
    for stream in (False, True):
        everyone.clear()
        arrived = 0
        results = await asyncio.wait_for(asyncio.gather(*(
            provider.chat([UserMessage("hi")], [], ChatOptions(stream=stream))
            for _ in range(n))), 30)
        assert [r.message.content for r in results] == ["ok"] * n
    assert len(wire.requests) == 2 * n
    # After aclose() the next request opens a new lane, on the same transport.
    await provider.aclose()
    wire.push(Reply("again"))
    result = await provider.chat([UserMessage("hi")], [], ChatOptions())
    assert result.message.content == "again"
    assert len(wire.requests) == 2 * n + 1
    await provider.aclose()


async def test_aclose_closes_every_connection() -> None:
    """Idle and in-flight connections alike are closed: the server sees them end."""
    open_now = 0
    opened = 0
    handlers: list[asyncio.Task[Any]] = []
    slow_arrived = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal open_now, opened
        open_now += 1
        opened += 1
        handlers.append(asyncio.current_task())  # type: ignore[arg-type]
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                if b"/slow" in head:
                    slow_arrived.set()
                    # Never answered: wait for the client to drop the connection.
                    if not await reader.read(1):
                        break
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: 11\r\n\r\n{\"ok\":true}")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client closed the connection
        finally:
            open_now -= 1
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = HttpClient(provider="p", base_url=f"http://127.0.0.1:{port}",
                        overflow=re.compile("x"), timeout_s=30)
    try:
        # Three connections at once, then kept idle for reuse.
        assert await asyncio.gather(*(client.post_json("/x", {}) for _ in range(3))) == \
            [{"ok": True}] * 3
        # One more request (on a kept connection), still in flight when aclose() runs.
        slow = asyncio.ensure_future(client.post_json("/slow", {}))
        await asyncio.wait_for(slow_arrived.wait(), 10)
        assert (opened, open_now) == (3, 3)
        await client.aclose()
        # Every socket closed, the busy one too.
        await async_wait_for(lambda: open_now == 0, what="every connection to close")
        with pytest.raises(ProviderError) as info:
            await asyncio.wait_for(slow, 10)
        assert info.value.kind == "network"  # the call lost its connection
        # The client is usable again: a new connection, given back to the pool.
        assert await client.post_json("/x", {}) == {"ok": True}
        assert opened == 4
    finally:
        await client.aclose()
        server.close()
        await server.wait_closed()
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
