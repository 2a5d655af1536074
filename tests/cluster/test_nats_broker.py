"""What the nats bus relies on from JetStream, and does with it, on a real broker.

Every broker here is a real ``nats-server -js`` (tests/cluster/conftest.py);
consumers that must die do so as real processes killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from lich.gateway.bus import InboundMessage
from lich.nats_bus.bus import GAVE_UP_TEXT, UNAVAILABLE_TEXT, NatsBus, partition_consumer_config
from lich.nats_bus.settings import partition_of
from lich.testing import ScriptedChat, async_wait_for, wait_for
from lich.testing.contracts import ContractModel, contract_responder
from lich.testing.nats import NatsServer

from .conftest import chats_in_distinct_partitions, chats_in_one_partition

WAIT_S = 30.0
CONSUMER = Path(__file__).with_name("consumer_process.py")


def msg(text: str, chat: str = "c1", message_id: str = "") -> InboundMessage:
    return InboundMessage("test", chat, "u1", text, message_id)


def answering() -> ScriptedChat:
    return ScriptedChat(responder=contract_responder)


def started_texts(chat: ScriptedChat) -> list[str]:
    return [r.last_user() for r in chat.requests]


async def within(awaitable: Any) -> Any:
    async with asyncio.timeout(WAIT_S):
        return await awaitable


# --------------------------------------------------------------- a consumer process


StartConsumer = Callable[[int, float], tuple["subprocess.Popen[bytes]", Path]]


@pytest.fixture
def consumer_process(nats_server: NatsServer, tmp_path: Path) -> Iterator[StartConsumer]:
    """``start(partitions, ack_wait_s)``: a consumer in its own process, and the file it
    lists the messages it starts in. Killed (by pid) after the test if still running."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(partitions: int, ack_wait_s: float) -> tuple[subprocess.Popen[bytes], Path]:
        started = tmp_path / f"consumer-{len(processes)}.started"
        log = (tmp_path / f"consumer-{len(processes)}.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, str(CONSUMER), nats_server.url, str(tmp_path), str(partitions),
             str(ack_wait_s), str(started)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()
        processes.append(process)

        def ready() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"the consumer process exited with {process.returncode}")
            return started.with_suffix(".ready").exists()

        wait_for(ready, WAIT_S, "the consumer process connected")
        return process, started

    yield start
    for process in processes:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


# ----------------------------------------------------------------------- the tests


async def test_a_message_published_twice_with_one_id_runs_once(
    make_nats_bus: Callable[..., Any],
):
    chat = answering()
    bus: NatsBus = await make_nats_bus(chat)
    other_ingress: NatsBus = await make_nats_bus(answering(), consume=False)
    first = await bus.submit(msg("once", message_id="update-7"))
    again = await bus.submit(msg("once", message_id="update-7"))  # while the first runs
    reply = await within(first)
    assert (await within(again)) == reply
    # After its reply: the same reply, from memory; no second turn.
    assert await within(bus.handle(msg("once", message_id="update-7"))) == reply
    # Another ingress process: the broker says duplicate; nothing runs.
    elsewhere = await within(other_ingress.handle(msg("once", message_id="update-7")))
    assert elsewhere.kind == "duplicate"
    assert started_texts(chat) == ["once"]
    # A different id is a different message.
    assert (await within(bus.handle(msg("once", message_id="update-8")))).kind == "reply"
    assert started_texts(chat) == ["once", "once"]


async def test_a_partition_has_one_message_in_flight_across_consumers(
    make_nats_bus: Callable[..., Any],
):
    model = ContractModel()
    first_worker: NatsBus = await make_nats_bus(model, partitions=2)
    await make_nats_bus(model, partitions=2)  # a second consumer of the same partitions
    a, b = chats_in_one_partition("test", 2, 2)
    held = await first_worker.submit(msg("hold a", chat=a))
    await async_wait_for(lambda: model.started == ["hold a"], WAIT_S, "the held run")
    queued = await first_worker.submit(msg("then b", chat=b))
    # Another conversation of the partition waits, although a consumer is idle.
    probe = await first_worker.submit(msg("probe", chat=a))
    model.release("a")
    replies = [await within(p) for p in (held, queued, probe)]
    assert [r.kind for r in replies] == ["reply"] * 3
    # Each run started only after the one before it had finished.
    assert model.started == ["hold a", "then b", "probe"]
    assert model.finished == ["hold a", "then b", "probe"]


async def test_a_dead_consumers_message_is_redelivered_before_the_next_one(
    make_nats_bus: Callable[..., Any], consumer_process: Callable[..., Any],
):
    ingress: NatsBus = await make_nats_bus(answering(), consume=False, partitions=2,
                                           ack_wait_s=1)
    process, started = consumer_process(2, 1)
    first = await ingress.submit(msg("hold one"))
    second = await ingress.submit(msg("two"))
    await async_wait_for(lambda: lines(started) == ["hold one"], WAIT_S,
                         "the consumer process in its model call")
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    chat = answering()
    await make_nats_bus(chat, partitions=2, ack_wait_s=1)  # the surviving consumer
    replies = [await within(first), await within(second)]
    assert [r.kind for r in replies] == ["reply", "reply"]
    assert started_texts(chat) == ["hold one", "two"]
    assert replies[1].text.startswith("you said: two | earlier: ")
    assert "hold one" in replies[1].text


async def test_a_message_that_kills_its_consumers_is_given_up_recorded_and_answered(
    make_nats_bus: Callable[..., Any], consumer_process: Callable[..., Any],
):
    ingress: NatsBus = await make_nats_bus(answering(), consume=False, partitions=1,
                                           ack_wait_s=1)
    process, started = consumer_process(1, 1)
    pending = await ingress.submit(msg("hold poison"))
    after = await ingress.submit(msg("next"))
    await async_wait_for(lambda: lines(started) == ["hold poison"], WAIT_S, "the first try")
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    chat = answering()
    worker: NatsBus = await make_nats_bus(chat, partitions=1, ack_wait_s=1, max_deliver=1)
    reply = await within(pending)
    assert reply.kind == "error"
    assert reply.text == GAVE_UP_TEXT.format(n=1)
    # Given up, not run again; and the partition moves on to the next message.
    assert (await within(after)).kind == "reply"
    assert started_texts(chat) == ["next"]
    records = worker.local.agent.sessions.read(reply.session_id).records
    failed = [r for r in records if r.get("event") == "delivery_failed"]
    assert len(failed) == 1
    assert failed[0]["deliveries"] == 2
    # Its turn ends there (the first try's turn_start, then the give-up's turn_end and,
    # once the ingress has the error, reply_sent).
    poison = failed[0]["admission"]

    def turn() -> list[str]:
        return [r["event"] for r in worker.local.agent.sessions.read(reply.session_id).records
                if r["kind"] == "meta" and r.get("admission") == poison
                and r.get("event") != "delivery_failed"]

    await async_wait_for(lambda: turn()[-1:] == ["reply_sent"], WAIT_S, lambda: turn())
    assert turn() == ["turn_start", "turn_end", "reply_sent"]


async def test_heartbeats_keep_a_long_turn_past_ack_wait(
    make_nats_bus: Callable[..., Any], nats_server: NatsServer,
):
    model = ContractModel()
    worker: NatsBus = await make_nats_bus(model, partitions=1, ack_wait_s=1, heartbeat_s=0.2)
    await make_nats_bus(model, partitions=1, ack_wait_s=1)  # would take it if it were lost
    held = await worker.submit(msg("hold long"))
    await async_wait_for(lambda: model.started == ["hold long"], WAIT_S, "the long turn")
    # Fifteen signals of 0.2 s: three times ack_wait has passed while the turn ran.
    await async_wait_for(lambda: worker.heartbeats >= 15, WAIT_S, "15 heartbeats")
    nc = await nats.connect(nats_server.url)
    try:
        info = await nc.jetstream().consumer_info(worker.settings.stream,
                                                  worker.settings.consumer_name(0))
    finally:
        await nc.close()
    assert info.num_redelivered == 0
    assert info.num_ack_pending == 1
    model.release("long")
    assert (await within(held)).kind == "reply"
    assert model.started == ["hold long"]  # it ran once


async def test_nak_and_delayed_nak_keep_the_partition_order(
    make_nats_bus: Callable[..., Any], nats_server: NatsServer,
):
    ingress: NatsBus = await make_nats_bus(answering(), consume=False, partitions=1)
    for text in ("first", "second"):
        await ingress.submit(msg(text))
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        settings = ingress.settings
        await js.add_consumer(settings.stream, partition_consumer_config(settings, 0))
        sub = await js.pull_subscribe_bind(durable=settings.consumer_name(0),
                                           stream=settings.stream)

        async def next_text() -> tuple[str, Any]:
            (m,) = await sub.fetch(1, timeout=WAIT_S)
            return json.loads(m.data)["text"], m

        text, m = await next_text()
        assert text == "first"
        await m.nak()
        text, m = await next_text()
        assert (text, m.metadata.num_delivered) == ("first", 2)
        await m.nak(delay=0.5)
        text, m = await next_text()  # not "second": the delayed one is still pending
        assert (text, m.metadata.num_delivered) == ("first", 3)
        await m.ack_sync()
        text, m = await next_text()
        assert text == "second"
        await m.ack_sync()
    finally:
        await nc.close()


async def test_a_broker_killed_and_restarted_on_its_store_loses_nothing(
    make_nats_bus: Callable[..., Any], nats_server: NatsServer,
):
    ingress: NatsBus = await make_nats_bus(answering(), consume=False,
                                           publish_timeout_s=2)
    texts = [f"m{i}" for i in range(12)]
    pending = [await ingress.submit(msg(t, chat=f"c{i % 4}")) for i, t in enumerate(texts)]
    assert not any(p.done() for p in pending)  # all admitted, none run: no consumer yet
    nats_server.kill()
    refused = await within(ingress.handle(msg("while down")))
    assert (refused.kind, refused.text) == ("unavailable", UNAVAILABLE_TEXT)
    nats_server.start()  # the same port and store
    chat = answering()
    await make_nats_bus(chat)
    replies = [await within(p) for p in pending]  # the ingress reconnected by itself
    assert [r.kind for r in replies] == ["reply"] * len(texts)
    assert sorted(started_texts(chat)) == sorted(texts)
    # Per conversation, still in the order sent.
    for c in range(4):
        mine = [t for i, t in enumerate(texts) if i % 4 == c]
        assert [t for t in started_texts(chat) if t in mine] == mine
    # A message sent now is admitted again.
    assert (await within(ingress.handle(msg("after")))).kind == "reply"


async def test_concurrency_bounds_the_runs_of_a_consumer(
    make_nats_bus: Callable[..., Any], nats_server: NatsServer,
):
    model = ContractModel()
    worker: NatsBus = await make_nats_bus(model, partitions=2, concurrency=1)
    assert worker.concurrency == 1
    a, b = chats_in_distinct_partitions("test", 2, 2)
    held = await worker.submit(msg("hold a", chat=a))
    await async_wait_for(lambda: model.started == ["hold a"], WAIT_S, "the held run")
    other = await worker.submit(msg("then b", chat=b))
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        name = worker.settings.consumer_name(partition_of("test", b, 2))

        async def delivered() -> bool:
            info = await js.consumer_info(worker.settings.stream, name)
            return info.num_ack_pending == 1 or info.num_pending == 1

        # b's message reached the worker (its pull request was out before a took the
        # only slot) and waits, kept with heartbeats, for the slot; or it waits in the
        # stream, the worker asking for no message without a free slot. It does not run.
        await async_wait_for(delivered, WAIT_S, "b's message stored")
        await js.consumer_info(worker.settings.stream, name)  # the worker's loop ran on
    finally:
        await nc.close()
    assert model.started == ["hold a"]
    model.release("a")
    assert [(await within(p)).kind for p in (held, other)] == ["reply", "reply"]
    assert model.finished == ["hold a", "then b"]


async def test_a_consumer_cancelled_as_its_connection_closes_ends(
    make_nats_bus: Callable[..., Any],
):
    # nats-py answers a cancel that reaches a fetch on a closed connection with
    # ConnectionClosedError, not CancelledError: a consumer retrying on errors would then
    # outlive its cancel, and an event loop closing (a gateway stopping) waits for ever.
    worker: NatsBus = await make_nats_bus(answering())
    consumers = list(worker._consumers.values())
    await asyncio.sleep(0.2)  # each consumer waits in its long-poll fetch
    assert not any(t.done() for t in consumers)
    for task in consumers:
        task.cancel()
    assert worker._nc is not None
    await worker._nc.close()  # closed before the consumers wake to their cancel
    done, running = await asyncio.wait(consumers, timeout=5)
    assert not running, "a consumer went on past its cancel"
    assert all(t.cancelled() for t in done)
