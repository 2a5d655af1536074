"""A real NATS JetStream broker for each test, and nats buses on it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lich.agent import Agent
from lich.gateway.bus import GatewayBus
from lich.nats_bus.bus import NatsBus
from lich.nats_bus.settings import NatsBusSettings, partition_of
from lich.testing import make_test_config
from lich.testing.nats import NatsServer


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """``nats-server -js`` on a free 127.0.0.1 port, its store in the test's temp dir."""
    server = NatsServer(tmp_path / "nats-store").start()
    try:
        yield server
    finally:
        server.stop()


def chats_in_distinct_partitions(platform: str, count: int, partitions: int) -> tuple[str, ...]:
    """``count`` chat ids whose conversations fall in different partitions."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < count:
        chat = f"chat-{i}"
        found.setdefault(partition_of(platform, chat, partitions), chat)
        i += 1
    return tuple(found.values())


def chats_in_one_partition(platform: str, count: int, partitions: int) -> tuple[str, ...]:
    """``count`` chat ids whose conversations share partition 0."""
    chats: list[str] = []
    i = 0
    while len(chats) < count:
        chat = f"chat-{i}"
        if partition_of(platform, chat, partitions) == 0:
            chats.append(chat)
        i += 1
    return tuple(chats)


@pytest.fixture
async def make_nats_bus(
    nats_server: NatsServer, tmp_path: Path
) -> AsyncIterator[Callable[..., Any]]:
    """``await make_nats_bus(chat, queue_limit=5, **settings)``: a started nats bus whose
    consumers run messages on an agent calling ``chat`` (``consume=False``: an ingress
    only); every bus is drained afterwards."""
    buses: list[NatsBus] = []

    async def make(chat: Any, *, queue_limit: int = 5, **settings: Any) -> NatsBus:
        values: dict[str, Any] = {"servers": (nats_server.url,), "partitions": 4,
                                  "consume": True}
        values.update(settings)
        local = GatewayBus(Agent(make_test_config(tmp_path), chat=chat),
                           queue_limit=queue_limit)
        bus = NatsBus(NatsBusSettings(**values), local)
        await bus.start()
        buses.append(bus)
        return bus

    yield make
    for bus in buses:
        await bus.drain(0)
        await bus.local.agent.aclose()
