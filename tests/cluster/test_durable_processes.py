"""Durable turns across real ``lich worker`` processes killed or stopped by pid.

The model is a scripted server over HTTP (its requests are counted), the broker a real
``nats-server``, the transcripts a real PostgreSQL; the ingress is a nats bus in this
process (``consume = false``). Each test stops a worker at one point of a turn and
checks, from the database, that another worker finished it exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from attrs import define
from lich_env import lich_env

from lich.agent import Agent
from lich.gateway.bus import GatewayBus, InboundMessage
from lich.nats_bus.bus import NatsBus
from lich.nats_bus.settings import (
    NatsBusSettings,
    admission_token,
    conversation_token,
    partition_of,
)
from lich.testing import (
    Reply,
    ScriptedChat,
    ScriptedModel,
    ScriptedServer,
    ScriptRequest,
    Step,
    async_wait_for,
    make_test_config,
)
from lich.testing.nats import NatsServer
from lich.types import ToolCall

from .conftest import Worker, start_worker

pytestmark = [
    pytest.mark.system,  # lich processes against a real broker: slow, run by .ci/run
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
]

WAIT_S = 60.0
PARTITIONS = 2
#: Longer than any test waits: a call that must be cut off by a kill or a cancel.
HOLD_S = 120.0

#: A tool that is not idempotent: it notes each run, then holds until its process dies.
CHARGE_PLUGIN = '''
import os
import time
from lich import hookimpl, tool


@tool
def charge(amount: int) -> str:
    """Charge a card."""
    with open(os.environ["CHARGE_LOG"], "a", encoding="utf-8") as f:
        f.write(f"{amount}\\n")
    time.sleep(float(os.environ["CHARGE_HOLD_S"]))
    return f"charged {amount}"


@hookimpl
def lich_register_tools(registry):
    registry.register(charge)
'''


class Model:
    """The scripted model: ``slow X`` holds its first request (the worker is stopped in
    it), then answers ``done X``; ``pay N`` asks for ``charge``, then says what the tool
    answered."""

    def __init__(self) -> None:
        self.scripted = ScriptedModel(responder=self.respond)
        self.server = ScriptedServer(self.scripted)

    def respond(self, request: ScriptRequest) -> Step:
        text = request.last_user()
        if text.startswith("slow "):
            first = self.asked(text) == 1
            return Reply(f"done {text[5:]}", delay_s=HOLD_S if first else 0.0)
        if text.startswith("pay "):
            results = request.tool_results_since_user()
            if not results:
                return Reply(tool_calls=[ToolCall("c1", "charge", {"amount": int(text[4:])})])
            told = "interrupted" if "interrupted:" in results[0].content else "ran"
            return Reply(f"told: {told}")
        return Reply(f"done {text}")

    def asked(self, text: str) -> int:
        """How many requests the model had for the user message ``text``."""
        return sum(1 for r in self.scripted.requests if r.last_user() == text)


@define
class Setup:
    work: Path
    env: dict[str, str]
    model: Model
    ingress: NatsBus
    dsn: str
    charges: Path
    started: list[Worker]

    async def worker(self, *args: str) -> Worker:
        """A ``lich worker`` process, returned once it consumes (killed at the end)."""
        worker = await start_worker(self.work, self.env, *args)
        self.started.append(worker)
        return worker

    async def kill(self, worker: Worker) -> None:
        worker.process.send_signal(signal.SIGKILL)
        await worker.process.wait()

    def session(self, chat: str) -> str:
        return self.ingress.session_id_for("webhook", chat)

    def records(self, chat: str) -> list[dict[str, Any]]:
        import psycopg

        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute("SELECT record FROM lich_records WHERE session_id = %s "
                                "ORDER BY seq", (self.session(chat),)).fetchall()
        return [json.loads(row[0]) for row in rows]

    def turn_events(self, chat: str, message_id: str) -> list[str]:
        admission = admission_token("webhook", chat, message_id)
        return [r["event"] for r in self.records(chat)
                if r.get("kind") == "meta" and r.get("admission") == admission]

    def user_messages(self, chat: str) -> list[str]:
        return [r["message"]["content"] for r in self.records(chat)
                if r.get("kind") == "message" and r["message"]["role"] == "user"]


def write_config(work: Path, model: Model, nats_server: NatsServer, *,
                 ack_wait_s: float) -> None:
    """The workers' config (read by each worker as it starts)."""
    (work / ".lich" / "config.toml").write_text(
        'stream = false\nplugins = ["+nats", "+charge_plugin.py"]\n'
        '[[providers]]\nkind = "openai_compat"\nname = "scripted"\nmodel = "m"\n'
        f'base_url = "{model.server.base_url}"\n'
        '[gateway]\ntools = ["charge"]\n[approvals]\nallow = ["charge"]\n'
        '[session_store]\nkind = "postgres"\ndsn_env = "LICH_POSTGRES_DSN"\n'
        f'[bus]\nkind = "nats"\nservers = ["{nats_server.url}"]\npartitions = {PARTITIONS}\n'
        f'ack_wait_s = {ack_wait_s}\nconsume = false\n', encoding="utf-8")


@pytest.fixture
def model() -> Iterator[Model]:
    model = Model()
    model.server.start()
    try:
        yield model
    finally:
        model.server.stop()


@pytest.fixture
async def setup(tmp_path: Path, nats_server: NatsServer, model: Model,
                lich_postgres_dsn: str) -> AsyncIterator[Setup]:
    work = tmp_path / "work"
    (work / ".lich").mkdir(parents=True)
    (work / "charge_plugin.py").write_text(CHARGE_PLUGIN, encoding="utf-8")
    write_config(work, model, nats_server, ack_wait_s=2)
    from lich.postgres.settings import PostgresStoreSettings
    from lich.postgres.store import PostgresStore

    # The schema, before any worker (the tests read the tables from the start).
    store = PostgresStore(lich_postgres_dsn, PostgresStoreSettings(dsn=lich_postgres_dsn))
    try:
        store.prepare()
    finally:
        store.close()
    charges = tmp_path / "charges.log"
    env = {**lich_env(tmp_path), "LICH_POSTGRES_DSN": lich_postgres_dsn,
           "CHARGE_LOG": str(charges), "CHARGE_HOLD_S": str(HOLD_S)}
    # The ingress shares the workers' install key (in the session directory), so it
    # names conversations as they do.
    ingress = NatsBus(
        NatsBusSettings(servers=(nats_server.url,), partitions=PARTITIONS, ack_wait_s=2,
                        consume=False),
        GatewayBus(Agent(make_test_config(work), chat=ScriptedChat())))
    await ingress.start()
    started: list[Worker] = []
    try:
        yield Setup(work, env, model, ingress, lich_postgres_dsn, charges, started)
    finally:
        await ingress.drain(0)
        await ingress.local.agent.aclose()
        for worker in started:
            if worker.process.returncode is None:
                worker.process.kill()
                await worker.process.wait()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(worker.reader, 10)


def message(text: str, message_id: str, chat: str = "c1") -> InboundMessage:
    return InboundMessage("webhook", chat, "u1", text, message_id)


async def test_a_worker_killed_in_a_model_call_is_resumed_by_another_once(
    setup: Setup,
) -> None:
    first = await setup.worker()
    pending = await setup.ingress.submit(message("slow one", "m1"))
    await async_wait_for(lambda: setup.model.asked("slow one") == 1, WAIT_S,
                         "the first worker's model call")
    await async_wait_for(lambda: setup.turn_events("c1", "m1") == ["turn_start"], WAIT_S,
                         lambda: f"turn_start stored: {setup.turn_events('c1', 'm1')}")
    await setup.kill(first)

    second = await setup.worker()
    reply = await asyncio.wait_for(pending, WAIT_S)
    assert (reply.kind, reply.text) == ("reply", "done one")
    await async_wait_for(lambda: setup.turn_events("c1", "m1")[-1:] == ["reply_sent"],
                         WAIT_S, lambda: f"reply_sent: {setup.turn_events('c1', 'm1')}")
    # Continued, not run again: one turn_start, one user message; one more model call.
    assert setup.turn_events("c1", "m1") == ["turn_start", "turn_end", "reply_sent"]
    assert setup.user_messages("c1") == ["slow one"]
    assert setup.model.asked("slow one") == 2
    assert second.saw("event=turn_resumed")


async def test_a_call_that_is_not_idempotent_is_not_run_again_and_the_model_is_told(
    setup: Setup,
) -> None:
    first = await setup.worker()
    pending = await setup.ingress.submit(message("pay 5", "m1"))
    # The tool runs (it holds after noting the run): its tool_start is stored before.
    await async_wait_for(lambda: setup.charges.is_file()
                         and setup.charges.read_text() == "5\n", WAIT_S, "the charge to run")
    assert setup.turn_events("c1", "m1") == ["turn_start", "tool_start"]
    await setup.kill(first)

    await setup.worker()
    reply = await asyncio.wait_for(pending, WAIT_S)
    assert reply.text == "told: interrupted"
    assert setup.charges.read_text() == "5\n"  # ran once
    await async_wait_for(lambda: setup.turn_events("c1", "m1")[-1:] == ["reply_sent"],
                         WAIT_S, lambda: f"reply_sent: {setup.turn_events('c1', 'm1')}")
    assert setup.turn_events("c1", "m1") == [
        "turn_start", "tool_start", "turn_end", "reply_sent"]
    assert setup.user_messages("c1") == ["pay 5"]


async def test_a_worker_killed_after_turn_end_has_the_reply_resent_without_a_model_call(
    setup: Setup, nats_server: NatsServer,
) -> None:
    import nats

    # Published as an ingress would, but to a reply subject nobody answers yet: the
    # worker ends the turn and then keeps trying to deliver the reply.
    admission = admission_token("webhook", "c1", "m1")
    reply_to = f"LICH_INBOUND.reply.gone.{admission}"
    body = {"platform": "webhook", "chat_id": "c1", "user_id": "u1", "text": "hello",
            "message_id": "m1", "admission": admission, "reply_to": reply_to,
            "events": False}
    client = await nats.connect(nats_server.url)
    try:
        first = await setup.worker()
        await client.jetstream().publish(
            NatsBusSettings().subject(partition_of("webhook", "c1", PARTITIONS),
                                      conversation_token("webhook", "c1")),
            json.dumps(body).encode(), stream="LICH_INBOUND",
            headers={"Nats-Msg-Id": admission})
        await async_wait_for(lambda: setup.turn_events("c1", "m1") == [
            "turn_start", "turn_end"], WAIT_S,
            lambda: f"turn_end stored: {setup.turn_events('c1', 'm1')}")
        await setup.kill(first)
        assert setup.model.asked("hello") == 1

        replies: list[dict[str, Any]] = []

        async def answer(msg: Any) -> None:
            replies.append(json.loads(msg.data))
            await msg.respond(b"")

        await client.subscribe(reply_to, cb=answer)
        second = await setup.worker()
        await async_wait_for(lambda: replies, WAIT_S, "the resent reply")
        assert replies[0]["reply"]["text"] == "done hello"
        await async_wait_for(lambda: setup.turn_events("c1", "m1")[-1:] == ["reply_sent"],
                             WAIT_S, lambda: f"reply_sent: {setup.turn_events('c1', 'm1')}")
        assert setup.model.asked("hello") == 1  # not run again
        assert setup.user_messages("c1") == ["hello"]
        assert second.saw("event=reply_resent")
    finally:
        await client.close()


async def test_sigterm_hands_a_run_still_going_after_the_grace_period_back(
    setup: Setup, nats_server: NatsServer,
) -> None:
    # An ack_wait longer than the test waits: the message can only come back by the
    # stopping worker's nak, not because the broker stopped waiting for it.
    write_config(setup.work, setup.model, nats_server, ack_wait_s=2 * WAIT_S)
    first = await setup.worker("--grace", "1")
    pending = await setup.ingress.submit(message("slow two", "m1"))
    await async_wait_for(lambda: setup.model.asked("slow two") == 1, WAIT_S,
                         "the first worker's model call")
    first.process.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(first.process.wait(), WAIT_S) == 0
    await asyncio.wait_for(first.reader, WAIT_S)
    assert first.saw("event=handed_back")
    # Cancelled: its run ended aborted, and the turn did not end.
    stops = [r.get("stopped_reason") for r in setup.records("c1") if r.get("event") == "run_end"]
    assert stops == ["aborted"]
    assert setup.turn_events("c1", "m1") == ["turn_start"]
    assert not pending.done()

    await setup.worker()
    reply = await asyncio.wait_for(pending, WAIT_S)
    assert reply.text == "done two"
    await async_wait_for(lambda: setup.turn_events("c1", "m1")[-1:] == ["reply_sent"],
                         WAIT_S, lambda: f"reply_sent: {setup.turn_events('c1', 'm1')}")
    assert setup.turn_events("c1", "m1") == ["turn_start", "turn_end", "reply_sent"]
    assert setup.user_messages("c1") == ["slow two"]
    assert setup.model.asked("slow two") == 2

