"""Two consumers racing for one message's turn, on a real broker and a real PostgreSQL.

A consumer that stalls (SIGSTOP, swapped out) past ``ack_wait`` loses its message to
another; when it wakes it must not act on what it read before it stalled. The stalled
consumer here runs its own event loop in a thread and is frozen whole at a chosen point
(its loop blocked: no heartbeat, no write), which is what a stopped process looks like
to the broker and the database, at a point a signal cannot be aimed at.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from lich.agent import Agent
from lich.gateway.bus import GatewayBus, InboundMessage
from lich.nats_bus.bus import NatsBus
from lich.nats_bus.settings import NatsBusSettings, admission_token
from lich.postgres.settings import PostgresStoreSettings
from lich.postgres.store import PostgresStore, PostgresWriter
from lich.testing import Reply, ScriptedChat, ScriptRequest, async_wait_for, make_test_config
from lich.testing.nats import NatsServer
from lich.types import AssistantMessage, UserMessage

from .charges import CHARGES, Tools, responder

WAIT_S = 30.0
S = TypeVar("S", bound=PostgresStore)


class FreezingStore(PostgresStore):
    """A store whose first writer freezes its caller's thread (the whole event loop of
    the consumer it belongs to) until released: the consumer stalls right after it read
    the transcript and decided what to do, before its writer claims the session."""

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn, PostgresStoreSettings(dsn=dsn))
        self.frozen = threading.Event()
        self.release = threading.Event()

    def open(self, session_id: str | None = None) -> PostgresWriter:
        if not self.frozen.is_set():
            self.frozen.set()
            self.release.wait(WAIT_S * 2)
        return super().open(session_id)


class FreezingReads(PostgresStore):
    """A store whose first transcript read blocks until released (a read runs in a
    thread: the consumer that made it must also not heartbeat, to look stalled)."""

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn, PostgresStoreSettings(dsn=dsn))
        self.frozen = threading.Event()
        self.release = threading.Event()

    def read(self, ref: str) -> Any:
        if not self.frozen.is_set():
            self.frozen.set()
            self.release.wait(WAIT_S * 2)
        return super().read(ref)


def _silenced(bus: NatsBus) -> NatsBus:
    """``bus`` sending no in-progress signals: a consumer whose store call blocks in a
    thread then looks stalled to the broker, as a stopped process does."""

    async def no_heartbeat(msg: Any, fields: Any) -> None:
        await asyncio.sleep(WAIT_S * 4)

    bus._heartbeat = no_heartbeat  # type: ignore[method-assign]
    return bus


class ThreadedConsumer:
    """A consumer bus on its own event loop in a thread (a process of its own, as far
    as the broker and the database can tell)."""

    def __init__(self, make: Callable[[], NatsBus]) -> None:
        self._make = make
        self.bus: NatsBus | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="frozen-consumer", daemon=True)

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(WAIT_S), "the threaded consumer did not start"

    def _main(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self.bus = self._make()
        await self.bus.start()
        self._ready.set()
        await self._stop.wait()
        await self.bus.drain(5)
        await self.bus.local.agent.aclose()

    @property
    def idle(self) -> bool:
        return self.bus is not None and self.bus.in_flight == 0

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread.is_alive():
            self._thread.join(WAIT_S)


@pytest.fixture
async def watcher(nats_server: NatsServer) -> AsyncIterator[list[dict[str, Any]]]:
    """Every reply any consumer sends, as it goes over the wire."""
    import nats

    seen: list[dict[str, Any]] = []
    nc = await nats.connect(nats_server.url)

    async def record(msg: Any) -> None:
        data = json.loads(msg.data)
        if data.get("type") == "reply":
            seen.append({"subject": msg.subject, **data["reply"]})

    await nc.subscribe("LICH_INBOUND.reply.>", cb=record)
    await nc.flush()
    try:
        yield seen
    finally:
        await nc.close()


def rows(dsn: str, session_id: str) -> list[tuple[int, int, dict[str, Any]]]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT seq, epoch, record FROM lich_records WHERE session_id = %s "
                             "ORDER BY seq", (session_id,)).fetchall()
    return [(int(seq), int(epoch), json.loads(record)) for seq, epoch, record in found]


class Race:
    """One race's parts: an ingress, consumers (live or stalled, each on a store of its
    own, as separate processes would be), and the conversation ``c1`` they race for.
    The fixture :func:`race` releases, stops, drains and closes all of it."""

    def __init__(self, nats_url: str, dsn: str, tmp_path: Path) -> None:
        self.dsn, self.tmp_path = dsn, tmp_path
        self.key = secrets.token_bytes(32)
        self.settings: dict[str, Any] = {"servers": (nats_url,), "partitions": 1,
                                         "ack_wait_s": 2}
        self.admission = admission_token("webhook", "c1", "m1")
        self._stores: list[PostgresStore] = []
        self._stalled: list[ThreadedConsumer] = []
        self._live: list[NatsBus] = []
        self._ingress: NatsBus | None = None

    def store(self) -> PostgresStore:
        """A new store on the database."""
        return self.frozen(lambda dsn: PostgresStore(dsn, PostgresStoreSettings(dsn=dsn)))

    def frozen(self, kind: Callable[[str], S]) -> S:
        """A new store made by ``kind`` (one of the freezing stores) on the database."""
        made = kind(self.dsn)
        self._stores.append(made)
        return made

    @property
    def ingress(self) -> NatsBus:
        """The ingress (publishes only), made on first use with the settings so far."""
        if self._ingress is None:
            self._ingress = NatsBus(NatsBusSettings(**self.settings, consume=False), GatewayBus(
                Agent(make_test_config(self.tmp_path), chat=ScriptedChat(),
                      sessions=self.store()), id_key=self.key))
        return self._ingress

    @property
    def session(self) -> str:
        return self.ingress.session_id_for("webhook", "c1")

    def prior(self) -> Any:
        """A writer on the conversation, for what an earlier (dead) consumer left."""
        return self.store().open(self.session)

    def consumer(self, store: PostgresStore, chat: ScriptedChat | None = None) -> NatsBus:
        """A consumer offering the charge tool; its model must not be asked by default."""
        return NatsBus(NatsBusSettings(**self.settings, consume=True), GatewayBus(
            Agent(make_test_config(self.tmp_path), plugins=[("tools", Tools())],
                  chat=chat or ScriptedChat(["must not run"]), sessions=store),
            id_key=self.key))

    def stalled(self, make: Callable[[], NatsBus]) -> ThreadedConsumer:
        """A consumer started on its own loop in a thread (``make`` builds its bus)."""
        threaded = ThreadedConsumer(make)
        self._stalled.append(threaded)
        threaded.start()
        return threaded

    async def live(self, store: PostgresStore, chat: ScriptedChat | None = None) -> NatsBus:
        """A consumer started on this loop."""
        bus = self.consumer(store, chat)
        self._live.append(bus)
        await bus.start()
        return bus

    def events(self) -> list[str]:
        """The durable-turn records of message ``m1``, in order."""
        return [r["event"] for _, _, r in rows(self.dsn, self.session)
                if r["kind"] == "meta" and r.get("admission") == self.admission]

    async def close(self) -> None:
        for store in self._stores:  # a frozen consumer must wake to be stopped
            release = getattr(store, "release", None)
            if release is not None:
                release.set()
        for threaded in self._stalled:
            threaded.stop()
        for bus in self._live:
            await bus.drain(0)
            await bus.local.agent.aclose()
        if self._ingress is not None:
            await self._ingress.drain(0)
            await self._ingress.local.agent.aclose()
        for store in self._stores:
            store.close()


@pytest.fixture
async def race(nats_server: NatsServer, lich_postgres_dsn: str, tmp_path: Path,
               short_reply_windows: None) -> AsyncIterator[Race]:
    # A consumer woken after its message was answered sends the ingress an empty reply
    # nobody waits for, and retries it: no race here is about those windows.
    made = Race(nats_server.url, lich_postgres_dsn, tmp_path)
    try:
        yield made
    finally:
        await made.close()


def charging() -> ScriptedChat:
    """A model answering ``pay N`` with one charge (:func:`charges.responder`)."""
    return ScriptedChat(responder=responder)


async def test_a_consumer_stalled_between_its_read_and_its_claim_does_not_run_the_turn_again(
    race: Race, watcher: list[dict[str, Any]],
) -> None:
    CHARGES.clear()
    frozen_store = race.frozen(FreezingStore)
    frozen_chat = charging()
    stalled = race.stalled(lambda: race.consumer(frozen_store, frozen_chat))
    ingress = race.ingress
    await ingress.start()
    pending = await ingress.submit(InboundMessage("webhook", "c1", "u1", "pay 7", "m1"))
    # The first consumer takes the message, reads the transcript (nothing of this
    # turn: it is new) and freezes before its writer claims the conversation.
    await async_wait_for(frozen_store.frozen.is_set, WAIT_S, "the first consumer froze")
    await race.live(race.store(), charging())
    # Past ack_wait the broker gives the message to the live consumer, which runs
    # the turn to its end: the charge is made, the reply sent, the message acked.
    reply = await asyncio.wait_for(pending, WAIT_S)
    assert (reply.kind, reply.text) == ("reply", "done: pay 7")
    assert CHARGES == [7]
    await async_wait_for(lambda: "reply_sent" in race.events(), WAIT_S, "the live reply_sent")
    before = rows(race.dsn, race.session)

    # The stalled consumer wakes up. What it read is out of date: it must not run
    # the turn again (a second charge, a second turn_start), nor write, nor reply.
    frozen_store.release.set()
    await async_wait_for(lambda: stalled.idle, WAIT_S, "the woken consumer is done")
    # The conversation goes on: its next message runs after the woken consumer let go.
    later = await asyncio.wait_for(
        ingress.handle(InboundMessage("webhook", "c1", "u1", "later", "m2")), WAIT_S)
    assert later.text == "done: later"
    assert CHARGES == [7]
    assert frozen_chat.requests == []
    after = rows(race.dsn, race.session)
    assert after[:len(before)] == before
    assert race.events() == ["turn_start", "tool_start", "turn_end", "reply_sent"]
    users = [r["message"]["content"] for _, _, r in after if r.get("kind") == "message"
             and r["message"]["role"] == "user"]
    assert users == ["pay 7", "later"]
    # One reply for the message went over the wire: the live consumer's.
    replies = [s for s in watcher if s["subject"].endswith("." + race.admission)]
    assert [(r["kind"], r["text"]) for r in replies] == [("reply", "done: pay 7")]


async def test_a_consumer_stalled_in_a_model_call_wakes_stale_before_its_tool_runs(
    race: Race, watcher: list[dict[str, Any]],
) -> None:
    # The first consumer freezes inside its model call (turn_start stored); the other
    # continues the turn, makes the charge and answers. When the first one wakes, its
    # model answer asks for the charge: its tool_start cannot be stored (its epoch is
    # stale), so the tool does not run, and it sends nothing.
    CHARGES.clear()
    frozen, release = threading.Event(), threading.Event()

    def freezing(request: ScriptRequest) -> Reply:
        if not frozen.is_set():
            frozen.set()
            release.wait(WAIT_S * 2)  # the consumer's whole event loop stops here
        return responder(request)

    frozen_chat = ScriptedChat(responder=freezing)
    await race.ingress.start()
    stalled = race.stalled(lambda: race.consumer(race.store(), frozen_chat))
    try:
        pending = await race.ingress.submit(InboundMessage("webhook", "c1", "u1", "pay 7", "m1"))
        await async_wait_for(frozen.is_set, WAIT_S, "the first consumer froze in its model call")
        await race.live(race.store(), charging())
        reply = await asyncio.wait_for(pending, WAIT_S)
        assert (reply.kind, reply.text) == ("reply", "done: pay 7")
        assert CHARGES == [7]
        await async_wait_for(lambda: "reply_sent" in race.events(), WAIT_S,
                             "the live reply_sent")
        # The live consumer continued the turn: one turn_start, its own tool_start.
        assert race.events() == ["turn_start", "tool_start", "turn_end", "reply_sent"]
        before = rows(race.dsn, race.session)

        release.set()
        await async_wait_for(lambda: stalled.idle, WAIT_S, "the woken consumer is done")
        assert CHARGES == [7]
        assert rows(race.dsn, race.session) == before
        replies = [s for s in watcher if s["subject"].endswith("." + race.admission)]
        assert [(r["kind"], r["text"]) for r in replies] == [("reply", "done: pay 7")]
    finally:
        release.set()  # not a store's: the race fixture cannot release it


def _ended_turn(race: Race, *, started: bool = False) -> None:
    """Record ``m1``'s turn as ended with its reply by a consumer that died before it
    sent the reply (``started``: with the run's own start and end records too)."""
    writer = race.prior()
    if started:
        writer.append("meta", event="run_start", run_id="dead", input="hello")
    writer.append("message", message={"role": "user", "content": "hello"},
                  admission=race.admission)
    writer.append("meta", event="turn_start", admission=race.admission, run_id="dead")
    writer.message(AssistantMessage("recorded answer"))
    if started:
        writer.append("meta", event="run_end", run_id="dead", stopped_reason="final")
    writer.append("meta", event="turn_end", admission=race.admission,
                  reply={"kind": "reply", "text": "recorded answer", "run_id": "dead"})
    writer.close()


async def test_a_message_past_max_deliver_whose_turn_ended_gets_its_reply_not_an_error(
    race: Race, watcher: list[dict[str, Any]],
) -> None:
    # The turn's end is recorded (its consumer died before the reply); the next delivery
    # stalls, and the one after is past max_deliver. What is left of the turn is its
    # reply: it is resent, not replaced by the given-up error and a second turn_end.
    race.settings["max_deliver"] = 1
    _ended_turn(race, started=True)
    frozen_store = race.frozen(FreezingReads)
    await race.ingress.start()
    stalled = race.stalled(lambda: _silenced(race.consumer(frozen_store)))
    pending = await race.ingress.submit(InboundMessage("webhook", "c1", "u1", "hello", "m1"))
    await async_wait_for(frozen_store.frozen.is_set, WAIT_S, "the first consumer froze")
    await race.live(race.store())
    reply = await asyncio.wait_for(pending, WAIT_S)
    assert (reply.kind, reply.text) == ("reply", "recorded answer")
    await async_wait_for(lambda: "reply_sent" in race.events(), WAIT_S, "the reply_sent")
    assert race.events() == ["turn_start", "turn_end", "reply_sent"]
    # The stalled consumer wakes (its read finds the turn answered): it sends nothing
    # with text, and records nothing.
    frozen_store.release.set()
    await async_wait_for(lambda: stalled.idle, WAIT_S, "the woken consumer is done")
    assert race.events() == ["turn_start", "turn_end", "reply_sent"]
    assert [(r["kind"], r["text"]) for r in watcher if r["text"]] == [
        ("reply", "recorded answer")]


async def test_two_consumers_giving_up_one_message_record_and_answer_it_once(
    race: Race, watcher: list[dict[str, Any]],
) -> None:
    # Delivery 1 stalls; delivery 2 (past max_deliver = 1) is given up by a consumer that
    # stalls before it records that; delivery 3 is given up by a third. When the second
    # wakes, its records are claimed on its old read: refused, and it sends nothing.
    race.settings["max_deliver"] = 1
    first_store, second_store = race.frozen(FreezingReads), race.frozen(FreezingStore)
    # An earlier conversation, so that the first consumer reads a transcript (and stalls).
    writer = race.prior()
    writer.append("meta", event="reset", source="gateway")
    writer.close()
    await race.ingress.start()
    race.stalled(lambda: _silenced(race.consumer(first_store)))
    pending = await race.ingress.submit(InboundMessage("webhook", "c1", "u1", "hello", "m1"))
    await async_wait_for(first_store.frozen.is_set, WAIT_S, "delivery 1 stalled")
    second = race.stalled(lambda: _silenced(race.consumer(second_store)))
    await async_wait_for(second_store.frozen.is_set, WAIT_S, "delivery 2 stalled")
    await race.live(race.store())
    reply = await asyncio.wait_for(pending, WAIT_S)
    assert reply.kind == "error"
    await async_wait_for(lambda: "reply_sent" in race.events(), WAIT_S, "the reply_sent")
    second_store.release.set()
    await async_wait_for(lambda: second.idle, WAIT_S, "the second consumer is done")
    assert race.events() == ["delivery_failed", "turn_end", "reply_sent"]
    errors = [r for r in watcher if r["kind"] == "error"]
    assert len(errors) == 1


async def test_a_consumer_stalled_before_its_reset_does_not_reset_the_conversation_again(
    race: Race, watcher: list[dict[str, Any]], caplog: pytest.LogCaptureFixture,
) -> None:
    # `/new pay 4`: the first consumer read the conversation and stalls as it opens the
    # reset's writer; the other resets, runs the turn and answers. The woken one's reset
    # is claimed on its old read: refused, so the other's turn is not wiped from the
    # history, and the message is neither run, answered nor handed back by it.
    CHARGES.clear()
    frozen_store = race.frozen(FreezingStore)
    writer = race.prior()  # an earlier conversation, for /new to reset
    writer.message(UserMessage("old"))
    writer.close()
    await race.ingress.start()
    stalled = race.stalled(lambda: _silenced(race.consumer(frozen_store, charging())))
    pending = await race.ingress.submit(InboundMessage("webhook", "c1", "u1", "/new pay 4", "m1"))
    await async_wait_for(frozen_store.frozen.is_set, WAIT_S, "the first consumer froze")
    live_store = race.store()
    await race.live(live_store, charging())
    reply = await asyncio.wait_for(pending, WAIT_S)
    assert reply.text == "done: pay 4"
    await async_wait_for(lambda: "reply_sent" in race.events(), WAIT_S, "the live reply_sent")
    before = rows(race.dsn, race.session)
    frozen_store.release.set()
    await async_wait_for(lambda: stalled.idle, WAIT_S, "the woken consumer is done")
    assert rows(race.dsn, race.session) == before
    assert [r["event"] for _, _, r in before if r.get("event") == "reset"] == ["reset"]
    assert CHARGES == [4]
    history = live_store.history(race.session)
    assert [m.content for m in history if isinstance(m, UserMessage)] == ["pay 4"]
    lost = [r.getMessage() for r in caplog.records if "event=turn_lost" in r.getMessage()]
    assert len(lost) == 1
    assert not [r for r in caplog.records if "event=handed_back" in r.getMessage()]
    assert [(r["kind"], r["text"]) for r in watcher if r["text"]] == [("reply", "done: pay 4")]


async def test_a_reply_is_resent_by_one_of_two_racing_consumers_only(
    race: Race, watcher: list[dict[str, Any]],
) -> None:
    # The turn ended (its consumer died before the reply). The next consumer reads that,
    # and stalls before it resends; the one after resends. The resend is claimed on the
    # read before it goes out: the woken consumer, whose claim is refused, sends nothing.
    _ended_turn(race)
    frozen_store = race.frozen(FreezingStore)
    await race.ingress.start()
    stalled = race.stalled(lambda: _silenced(race.consumer(frozen_store)))
    pending = await race.ingress.submit(InboundMessage("webhook", "c1", "u1", "hello", "m1"))
    await async_wait_for(frozen_store.frozen.is_set, WAIT_S, "the first consumer froze")
    await race.live(race.store())
    reply = await asyncio.wait_for(pending, WAIT_S)
    assert (reply.kind, reply.text) == ("reply", "recorded answer")
    await async_wait_for(lambda: "reply_sent" in race.events(), WAIT_S, "the reply_sent")
    frozen_store.release.set()
    await async_wait_for(lambda: stalled.idle, WAIT_S, "the woken consumer is done")
    assert race.events() == ["turn_start", "turn_end", "reply_sent"]
    assert [(r["kind"], r["text"]) for r in watcher] == [("reply", "recorded answer")]
