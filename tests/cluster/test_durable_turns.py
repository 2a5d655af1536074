"""Durable turns on a real broker and a real PostgreSQL: the records a turn writes, and a
message whose turn ended already (a redelivery, or the same message admitted again).

An ingress bus (``consume = false``) and a consumer bus run in this process, as two
processes of a cluster would (separate connections, the reply over the broker); the
processes that are killed are in ``test_durable_processes.py``.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lich.agent import Agent
from lich.gateway.bus import GatewayBus, InboundMessage
from lich.nats_bus.bus import NatsBus
from lich.nats_bus.settings import NatsBusSettings, admission_token, conversation_token
from lich.nats_bus.settings import partition_of as partition_for
from lich.testing import ScriptedChat, async_wait_for, make_test_config
from lich.testing.nats import NatsServer
from lich.types import AssistantMessage, UserMessage

from .charges import CHARGES, Tools, responder

WAIT_S = 30.0
PARTITIONS = 2


class Cluster:
    """An ingress and a consumer on one broker, transcripts in one database."""

    def __init__(self, ingress: NatsBus, consumer: NatsBus, chat: ScriptedChat, dsn: str):
        self.ingress = ingress
        self.consumer = consumer
        self.chat = chat
        self.dsn = dsn

    def rows(self, session_id: str) -> list[tuple[int, int, dict[str, Any]]]:
        """``(seq, epoch, record)`` of every record of the session, in order."""
        import psycopg

        with psycopg.connect(self.dsn) as conn:
            found = conn.execute(
                "SELECT seq, epoch, record FROM lich_records WHERE session_id = %s "
                "ORDER BY seq", (session_id,)).fetchall()
        return [(int(seq), int(epoch), json.loads(record)) for seq, epoch, record in found]

    def turn_events(self, session_id: str) -> list[str]:
        return [r["event"] for _, _, r in self.rows(session_id)
                if r.get("kind") == "meta" and "admission" in r]


@pytest.fixture
def pg_stores(lich_postgres_dsn: str) -> Iterator[Callable[[], Any]]:
    """Factory of PostgresStores on this test's database (one per process it stands for)."""
    from lich.postgres.settings import PostgresStoreSettings
    from lich.postgres.store import PostgresStore

    made: list[PostgresStore] = []

    def make() -> PostgresStore:
        store = PostgresStore(lich_postgres_dsn,
                              PostgresStoreSettings(dsn=lich_postgres_dsn))
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


@pytest.fixture
async def cluster(nats_server: NatsServer, tmp_path: Path, lich_postgres_dsn: str,
                  pg_stores: Callable[[], Any]) -> AsyncIterator[Cluster]:
    key = secrets.token_bytes(32)
    CHARGES.clear()
    chat = ScriptedChat(responder=responder)
    settings = {"servers": (nats_server.url,), "partitions": PARTITIONS, "ack_wait_s": 2}
    ingress_store, consumer_store = pg_stores(), pg_stores()
    ingress = NatsBus(NatsBusSettings(**settings, consume=False), GatewayBus(
        Agent(make_test_config(tmp_path), chat=ScriptedChat(), sessions=ingress_store),
        id_key=key))
    consumer = NatsBus(NatsBusSettings(**settings, consume=True), GatewayBus(
        Agent(make_test_config(tmp_path), plugins=[("tools", Tools())], chat=chat,
              sessions=consumer_store), id_key=key))
    await ingress.start()
    await consumer.start()
    try:
        yield Cluster(ingress, consumer, chat, lich_postgres_dsn)
    finally:
        for bus in (consumer, ingress):
            await bus.drain(0)
            await bus.local.agent.aclose()


def message(text: str, message_id: str, chat: str = "c1") -> InboundMessage:
    return InboundMessage("webhook", chat, "u1", text, message_id)


async def test_a_turn_records_start_tool_start_end_and_reply_sent_in_order_under_its_epoch(
    cluster: Cluster,
) -> None:
    reply = await asyncio.wait_for(cluster.ingress.handle(message("pay 7", "m1")), WAIT_S)
    assert (reply.kind, reply.text) == ("reply", "done: pay 7")
    session = cluster.ingress.session_id_for("webhook", "c1")
    admission = admission_token("webhook", "c1", "m1")
    # reply_sent is stored before the ack, and the ack before the next message runs.
    await asyncio.wait_for(cluster.ingress.handle(message("after", "m2")), WAIT_S)
    rows = cluster.rows(session)
    turn = [(seq, epoch, r) for seq, epoch, r in rows
            if r.get("kind") == "meta" and r.get("admission") == admission]
    assert [r["event"] for _, _, r in turn] == [
        "turn_start", "tool_start", "turn_end", "reply_sent"]
    run_epoch = next(epoch for _, epoch, r in rows if r.get("event") == "run_start")
    assert {epoch for _, epoch, _ in turn} == {run_epoch}
    seqs = [seq for seq, _, _ in rows]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    by_event = {r["event"]: (seq, r) for seq, _, r in turn}
    first_answer = next(seq for seq, _, r in rows if r.get("kind") == "message"
                        and r["message"]["role"] == "assistant")
    tool_result = next(seq for seq, _, r in rows if r.get("kind") == "message"
                       and r["message"]["role"] == "tool")
    # turn_start before the model's first answer; tool_start before the tool's result.
    assert by_event["turn_start"][0] < first_answer
    assert first_answer < by_event["tool_start"][0] < tool_result
    assert by_event["tool_start"][1]["call_id"] == "c1"
    assert by_event["turn_end"][1]["reply"]["text"] == "done: pay 7"
    assert CHARGES == [7]
    # Each message is one turn: the second has its own four records.
    assert cluster.turn_events(session).count("turn_start") == 2


def _dead_worker_transcript(cluster: Cluster, session: str, admission: str,
                            *, sent: bool) -> None:
    """What a worker that died after ``turn_end`` (and, with ``sent``, ``reply_sent``)
    leaves in the conversation's transcript."""
    store = cluster.consumer.local.agent.sessions
    writer = store.open(session)
    writer.append("meta", event="run_start", run_id="dead", input="hello")
    writer.message(UserMessage("hello"))
    writer.append("meta", event="turn_start", admission=admission, run_id="dead")
    writer.message(AssistantMessage("recorded answer"))
    writer.append("meta", event="run_end", run_id="dead", stopped_reason="final")
    writer.append("meta", event="turn_end", admission=admission,
                  reply={"kind": "reply", "text": "recorded answer", "run_id": "dead"})
    if sent:
        writer.append("meta", event="reply_sent", admission=admission)
    writer.close()


async def test_a_message_whose_turn_ended_gets_its_recorded_reply_without_a_model_call(
    cluster: Cluster,
) -> None:
    session = cluster.ingress.session_id_for("webhook", "c1")
    admission = admission_token("webhook", "c1", "m1")
    _dead_worker_transcript(cluster, session, admission, sent=False)

    reply = await asyncio.wait_for(cluster.ingress.handle(message("hello", "m1")), WAIT_S)
    assert (reply.kind, reply.text, reply.run_id) == ("reply", "recorded answer", "dead")
    assert cluster.chat.requests == []
    await async_wait_for(lambda: cluster.turn_events(session)[-1] == "reply_sent", WAIT_S,
                         lambda: f"reply_sent recorded: {cluster.turn_events(session)}")
    assert cluster.turn_events(session) == ["turn_start", "turn_end", "reply_sent"]


async def test_a_message_whose_reply_was_sent_is_acknowledged_and_sends_the_user_nothing(
    cluster: Cluster, nats_server: NatsServer,
) -> None:
    import nats

    session = cluster.ingress.session_id_for("webhook", "c1")
    admission = admission_token("webhook", "c1", "m1")
    _dead_worker_transcript(cluster, session, admission, sent=True)
    seen: list[dict[str, Any]] = []
    watcher = await nats.connect(nats_server.url)
    try:
        async def record(msg: Any) -> None:
            seen.append(json.loads(msg.data))

        await watcher.subscribe("LICH_INBOUND.reply.>", cb=record)
        # The same message admitted again once the broker forgot its id (past the
        # duplicate window): published as an ingress would, under a new id.
        inbound = message("hello", "m1")
        body = {"platform": "webhook", "chat_id": "c1", "user_id": "u1", "text": "hello",
                "message_id": "m1", "admission": admission,
                "reply_to": f"LICH_INBOUND.reply.{cluster.ingress.ingress_id}.{admission}",
                "events": False}
        js = watcher.jetstream()
        subject = cluster.consumer.settings.subject(
            partition_for(inbound.platform, inbound.chat_id, PARTITIONS),
            conversation_token(inbound.platform, inbound.chat_id))
        await js.publish(subject, json.dumps(body).encode(), stream="LICH_INBOUND",
                         headers={"Nats-Msg-Id": "again-" + admission})
        # A later message of the conversation runs after it (one at a time, in order):
        # once its reply is here, the first was handled, and sent nothing.
        later = await asyncio.wait_for(cluster.ingress.handle(message("later", "m2")), WAIT_S)
        assert later.text == "done: later"
        await async_wait_for(lambda: len(seen) >= 2, WAIT_S, "the later reply on the wire")
        # The copy got only a textless "duplicate" (the ingress had no waiter for it and
        # dropped it): nothing for the user.
        assert [(s["reply"]["kind"], s["reply"]["text"]) for s in seen] == [
            ("duplicate", ""), ("reply", "done: later")]
        assert [r.last_user() for r in cluster.chat.requests] == ["later"]
        # The old turn's reply_sent, and m2's once the ingress confirmed its reply.
        await async_wait_for(lambda: cluster.turn_events(session).count("reply_sent") == 2,
                             WAIT_S, lambda: f"m2's reply_sent: {cluster.turn_events(session)}")
        assert cluster.turn_events(session).count("turn_start") == 2
    finally:
        await watcher.close()


async def test_the_in_process_bus_writes_no_turn_records(tmp_path: Path) -> None:
    CHARGES.clear()
    agent = Agent(make_test_config(tmp_path), plugins=[("tools", Tools())],
                  chat=ScriptedChat(responder=responder))
    bus = GatewayBus(agent)
    try:
        reply = await bus.handle(message("pay 3", "m1"))
        assert reply.text == "done: pay 3"
        records = agent.sessions.read(bus.session_id_for("webhook", "c1")).records
        assert [r for r in records if "admission" in r] == []
        assert CHARGES == [3]
    finally:
        await bus.drain(0)
        await agent.aclose()


async def test_a_new_conversation_command_with_text_runs_its_turn_once_after_the_reset(
    cluster: Cluster,
) -> None:
    # `/new pay 3` resets the conversation (records of its own), then runs a durable turn
    # whose writer claims the conversation only if it is as the consumer read it plus the
    # reset: the reset is not taken for another consumer's writes.
    first = await asyncio.wait_for(cluster.ingress.handle(message("hello", "m1")), WAIT_S)
    assert first.text == "done: hello"
    reply = await asyncio.wait_for(cluster.ingress.handle(message("/new pay 3", "m2")), WAIT_S)
    assert (reply.kind, reply.text) == ("reply", "done: pay 3")
    assert CHARGES == [3]
    session = cluster.ingress.session_id_for("webhook", "c1")
    admission = admission_token("webhook", "c1", "m2")
    await async_wait_for(
        lambda: [r["event"] for _, _, r in cluster.rows(session)
                 if r["kind"] == "meta" and r.get("admission") == admission][-1:] == ["reply_sent"],
        WAIT_S, lambda: f"m2's reply_sent: {cluster.turn_events(session)}")
    rows = cluster.rows(session)
    events = [r.get("event", r["kind"]) for _, _, r in rows if r["kind"] in ("meta", "compact")]
    reset = events.index("reset")
    assert events[reset:reset + 2] == ["reset", "compact"]
    assert events.count("turn_start") == 2
    # The model saw the reset conversation: only the new message.
    assert [m.content for m in cluster.chat.requests[-1].messages
            if isinstance(m, UserMessage)] == ["pay 3"]


async def test_a_worker_killed_between_its_user_message_and_turn_start_is_continued_once(
    cluster: Cluster, tmp_path: Path,
) -> None:
    # The records of a turn's start are stored one after another (a file line each, a
    # statement each): a worker killed after its user message was stored and before its
    # turn_start leaves the message without a turn_start. The next consumer must not add
    # the message a second time: the model sees it once, and the turn has one turn_start.
    session = cluster.ingress.session_id_for("webhook", "c1")
    admission = admission_token("webhook", "c1", "m1")
    first = await asyncio.wait_for(cluster.ingress.handle(message("hello", "m0")), WAIT_S)
    assert first.text == "done: hello"
    await async_wait_for(lambda: cluster.turn_events(session)[-1:] == ["reply_sent"], WAIT_S,
                         lambda: f"m0's reply_sent: {cluster.turn_events(session)}")
    # What the dead worker's run wrote, from a real run of the turn on the conversation
    # as it is (on the JSONL store), cut where the kill came.
    from lich.turns import DurableTurn

    store = cluster.consumer.local.agent.sessions
    history = store.history(session)
    dead = Agent(make_test_config(tmp_path / "dead"), chat=ScriptedChat(["never stored"]))
    before = dead.sessions.open("dead")
    for old in history:
        before.message(old)
    before.close()
    skip = len(dead.sessions.read("dead").records)
    await dead.run("pay 5", history=history, session_id="dead",
                   turn=DurableTurn(admission))
    records = dead.sessions.read("dead").records[skip:]
    await dead.aclose()
    cut = next(i for i, r in enumerate(records) if r.get("event") == "turn_start")
    writer = store.open(session)
    for record in records[:cut]:
        fields = {k: v for k, v in record.items() if k not in ("v", "ts", "kind")}
        writer.append(str(record["kind"]), **fields)
    writer.close()
    assert [r.get("event") for r in records[:cut] if r["kind"] == "meta"] == ["run_start"]

    reply = await asyncio.wait_for(cluster.ingress.handle(message("pay 5", "m1")), WAIT_S)
    assert (reply.kind, reply.text) == ("reply", "done: pay 5")
    assert CHARGES == [5]
    users = [m.content for m in cluster.chat.requests[-1].messages
             if isinstance(m, UserMessage)]
    assert users == ["hello", "pay 5"]
    await async_wait_for(
        lambda: [r["event"] for _, _, r in cluster.rows(session)
                 if r["kind"] == "meta" and r.get("admission") == admission][-1:] == ["reply_sent"],
        WAIT_S, lambda: f"m1's reply_sent: {cluster.turn_events(session)}")
    assert [r["event"] for _, _, r in cluster.rows(session)
            if r.get("kind") == "meta" and r.get("admission") == admission].count(
        "turn_start") == 1


async def test_the_in_process_bus_waits_on_its_store_no_more_than_a_plain_run(
    tmp_path: Path,
) -> None:
    # The single-process default pays nothing for durable turns: its run's writer is
    # never flushed mid-run (no turn_start, no tool_start to wait for), only closed once
    # at the run's end, and no extra writer is opened for the turn's records.
    from lich.sessions import JsonlSessionStore, SessionWriter

    calls: list[str] = []

    class CountingWriter(SessionWriter):
        def flush(self) -> None:
            calls.append("flush")
            super().flush()

        async def aclose(self) -> None:
            calls.append("aclose")
            await super().aclose()

    class CountingStore(JsonlSessionStore):
        def open(self, session_id: str | None = None) -> SessionWriter:
            calls.append("open")
            plain = super().open(session_id)
            return CountingWriter(plain.session_id, plain.path)

    CHARGES.clear()
    agent = Agent(make_test_config(tmp_path), plugins=[("tools", Tools())],
                  chat=ScriptedChat(responder=responder),
                  sessions=CountingStore(tmp_path / "sessions"))
    bus = GatewayBus(agent)
    try:
        reply = await bus.handle(message("pay 3", "m1"))
        assert reply.text == "done: pay 3"
        assert CHARGES == [3]
        assert calls == ["open", "aclose"]
    finally:
        await bus.drain(0)
        await agent.aclose()
