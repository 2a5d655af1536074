"""A real NATS JetStream broker for each test, nats buses on it, and worker processes."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from attrs import define

from lich.agent import Agent
from lich.gateway.bus import GatewayBus
from lich.nats_bus import bus as nats_bus_module
from lich.nats_bus.bus import NatsBus
from lich.nats_bus.settings import NatsBusSettings, partition_of
from lich.testing import async_wait_for, make_test_config
from lich.testing.nats import NatsServer

#: How long a worker process may take to start consuming.
WORKER_WAIT_S = 60.0


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """``nats-server -js`` on a free 127.0.0.1 port, its store in the test's temp dir."""
    server = NatsServer(tmp_path / "nats-store").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def short_reply_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """A second, not ten, for an in-process bus's reply windows: the inline retries of a
    reply whose ingress does not answer, and the wait for them when the bus stops. For
    tests whose point is not those windows but that have replies no one takes. Ask for it
    before the buses' fixtures: it must still hold while they stop."""
    monkeypatch.setattr(nats_bus_module, "_REPLY_INLINE_S", 1.0)
    monkeypatch.setattr(nats_bus_module, "_REPLY_GRACE_S", 1.0)


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
    """``await make_nats_bus(chat, queue_limit=5, plugins=(), objects=(), **settings)``: a
    started nats bus whose consumers run messages on an agent calling ``chat``, with the
    ``plugins`` of its config and the plugin ``objects`` (name, object) registered
    (``consume=False``: an ingress only); every bus is drained afterwards."""
    buses: list[NatsBus] = []

    async def make(chat: Any, *, queue_limit: int = 5, plugins: Sequence[str] = (),
                   objects: Sequence[tuple[str, object]] = (), **settings: Any) -> NatsBus:
        values: dict[str, Any] = {"servers": (nats_server.url,), "partitions": 4,
                                  "consume": True}
        values.update(settings)
        agent = Agent(make_test_config(tmp_path, plugins=tuple(plugins)), chat=chat)
        for name, plugin in objects:
            agent.host.register_object(plugin, name)
        local = GatewayBus(agent, queue_limit=queue_limit)
        bus = NatsBus(NatsBusSettings(**values), local)
        await bus.start()
        buses.append(bus)
        return bus

    yield make
    for bus in buses:
        await bus.drain(0)
        await bus.local.agent.aclose()


@define
class Worker:
    """A ``lich worker`` process and the lines of its stderr so far."""

    process: asyncio.subprocess.Process
    lines: list[str]
    reader: asyncio.Task[None]

    def saw(self, fragment: str) -> bool:
        return any(fragment in line for line in self.lines)


async def start_worker(work: Path, env: dict[str, str], *args: str) -> Worker:
    """A ``lich worker ARGS`` process, returned once it consumes; one that exits first
    (a bad config) fails the test at once, not at the timeout. The caller stops it."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "lich", "--work-dir", str(work), "worker", *args,
        cwd=work, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    lines: list[str] = []

    async def read() -> None:
        assert process.stderr is not None
        async for raw in process.stderr:
            lines.append(raw.decode(errors="replace").rstrip())

    worker = Worker(process, lines, asyncio.create_task(read()))
    try:
        await async_wait_for(
            lambda: worker.saw("event=worker_ready") or process.returncode is not None,
            WORKER_WAIT_S, lambda: f"the worker to consume; stderr: {lines}")
        assert worker.saw("event=worker_ready"), f"the worker exited: {lines}"
    except BaseException:
        if process.returncode is None:
            process.kill()
            await process.wait()
        raise
    return worker


@contextlib.asynccontextmanager
async def workers(work: Path, env: dict[str, str], count: int,
                  *args: str) -> AsyncIterator[list[Worker]]:
    """``count`` ``lich worker ARGS`` processes (by default ``--concurrency 2 --grace 10``),
    yielded once each consumes; stopped by pid."""
    started: list[Worker] = []
    try:
        for _ in range(count):
            started.append(await start_worker(
                work, env, *(args or ("--concurrency", "2", "--grace", "10"))))
        yield started
    finally:
        for worker in started:
            if worker.process.returncode is None:
                worker.process.kill()
                await worker.process.wait()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(worker.reader, 10)
