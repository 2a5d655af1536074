"""Contract test suites: what every implementation of a plugin boundary must do.

Subclass a contract in a test module and give it the fixture it names; the
inherited tests then run against your implementation::

    from lich.testing.contracts import BusContract

    class TestMyBus(BusContract):
        @pytest.fixture
        async def bus(self, model, tmp_path):
            local = GatewayBus(Agent(make_test_config(tmp_path), chat=model),
                               queue_limit=self.queue_limit)
            bus = MyBus(local)
            await bus.start()
            yield bus
            await bus.drain(0)

This module imports pytest: it is for test suites, not for ``import lich.testing``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, ClassVar, TypeVar

import pytest

from lich.testing.scripted import Reply, ScriptedChat, ScriptRequest, Step
from lich.testing.wait import async_wait_for
from lich.types import UserMessage

if TYPE_CHECKING:
    from lich.gateway.bus import InboundMessage, MessageBus
    from lich.types import ChatOptions, ChatResult, Message, ToolDefinition

__all__ = ["BusContract", "ContractModel", "contract_responder"]

T = TypeVar("T")

#: How long a contract test waits for a condition before it fails (the runs are instant).
WAIT_S = 30.0


def contract_responder(request: ScriptRequest) -> Step:
    """Echo the latest user message, with the earlier user messages of the conversation.

    ``you said: c | earlier: a / b`` shows that a run saw the runs before it.
    """
    text = request.last_user()
    earlier = [m.content for m in request.messages if isinstance(m, UserMessage)][:-1]
    return Reply(f"you said: {text} | earlier: {' / '.join(earlier) or '-'}")


class ContractModel:
    """The chat function a contract's bus runs on: ``hold <tag>`` waits for :meth:`release`.

    ``started`` and ``finished`` list the user messages in the order their model
    calls began and ended. Every other message is answered at once by ``inner``
    (a :class:`ScriptedChat` of :func:`contract_responder` by default), whose
    ``requests`` are this model's.
    """

    def __init__(self, inner: ScriptedChat | None = None) -> None:
        self.inner = inner or ScriptedChat(responder=contract_responder)
        self.started: list[str] = []
        self.finished: list[str] = []
        self._gates: dict[str, asyncio.Event] = {}

    @property
    def requests(self) -> list[ScriptRequest]:
        """What the model was asked, in order."""
        return self.inner.requests

    def gate(self, tag: str) -> asyncio.Event:
        """The event the runs held on ``hold <tag>`` wait for."""
        return self._gates.setdefault(tag, asyncio.Event())

    def release(self, tag: str) -> None:
        """Let the runs held on ``hold <tag>`` answer."""
        self.gate(tag).set()

    async def __call__(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition], options: ChatOptions
    ) -> ChatResult:
        text = next((m.content for m in reversed(messages) if isinstance(m, UserMessage)), "")
        self.started.append(text)
        if text.startswith("hold "):
            await self.gate(text[5:]).wait()
        try:
            return await self.inner(messages, tools, options)
        finally:
            self.finished.append(text)


def _message(text: str, chat: str, message_id: str = "") -> InboundMessage:
    from lich.gateway.bus import InboundMessage

    return InboundMessage("contract", chat, "u1", text, message_id)


async def _reply(pending: Awaitable[T]) -> T:
    """``await pending``, failing the test rather than hanging it when it never comes."""
    async with asyncio.timeout(WAIT_S):
        return await pending


class BusContract:
    """What every :class:`lich.gateway.MessageBus` must do; subclass it with a ``bus`` fixture.

    The ``bus`` fixture yields a started bus whose messages run on an agent
    that calls the ``model`` fixture (a :class:`ContractModel`) with
    persisted sessions, built with ``queue_limit = self.queue_limit``; after
    the test it drains the bus (``await bus.drain(0)``: held runs are
    cancelled). :attr:`parallel_chats` are conversations the bus must run at
    the same time (a partitioned bus overrides it with chats of different
    partitions).
    """

    queue_limit: ClassVar[int] = 3
    parallel_chats: ClassVar[tuple[str, ...]] = ("par-1", "par-2")

    @pytest.fixture
    def model(self) -> ContractModel:
        """The chat function the bus's agent calls."""
        return ContractModel()

    async def test_a_message_gets_its_reply(self, bus: MessageBus) -> None:
        reply = await _reply(bus.handle(_message("hello", "solo")))
        assert reply.kind == "reply"
        assert reply.text == "you said: hello | earlier: -"
        assert reply.session_id == bus.session_id_for("contract", "solo")

    async def test_one_conversation_runs_one_message_at_a_time_in_admission_order(
        self, bus: MessageBus, model: ContractModel
    ) -> None:
        first = await bus.submit(_message("hold first", "ordered"))
        await async_wait_for(lambda: "hold first" in model.started, WAIT_S, "the first run")
        rest = [await bus.submit(_message(f"m{i}", "ordered")) for i in range(1, 3)]
        model.release("first")
        replies = [await _reply(r) for r in (first, *rest)]
        # Each run saw every earlier message: it started after the one before it ended.
        assert [r.text for r in replies] == [
            "you said: hold first | earlier: -",
            "you said: m1 | earlier: hold first",
            "you said: m2 | earlier: hold first / m1",
        ]
        assert model.started == ["hold first", "m1", "m2"]

    async def test_different_conversations_run_at_the_same_time(
        self, bus: MessageBus, model: ContractModel
    ) -> None:
        chats = self.parallel_chats
        pending = [await bus.submit(_message(f"hold {chat}", chat)) for chat in chats]
        # Every run is in its model call at once: none waits for another to end.
        await async_wait_for(lambda: len(model.started) == len(chats), WAIT_S,
                             "every conversation's run in its model call")
        assert model.finished == []
        for chat in chats:
            model.release(chat)
        assert [(await _reply(p)).kind for p in pending] == ["reply"] * len(chats)

    async def test_past_the_queue_limit_a_conversation_is_busy(
        self, bus: MessageBus, model: ContractModel
    ) -> None:
        held = await bus.submit(_message("hold q", "queued"))
        await async_wait_for(lambda: "hold q" in model.started, WAIT_S, "the held run")
        waiting = [await bus.submit(_message(f"w{i}", "queued"))
                   for i in range(self.queue_limit - 1)]
        refused = await _reply(await bus.submit(_message("one too many", "queued")))
        assert refused.kind == "busy"
        # The limit is per conversation: another one is not refused (it may still
        # wait behind the held run, on a bus that shares lanes between conversations).
        other = await bus.submit(_message("elsewhere", "not-queued"))
        model.release("q")
        assert [(await _reply(p)).kind for p in (held, *waiting, other)] == \
            ["reply"] * (self.queue_limit + 1)
        assert "one too many" not in model.started
        # Once the conversation's messages are answered it takes messages again.
        again = await _reply(bus.handle(_message("again", "queued")))
        assert again.kind == "reply"

    async def test_a_parked_reply_is_pending_then_answered_by_its_status_id(
        self, bus: MessageBus, model: ContractModel
    ) -> None:
        from lich.gateway.bus import PENDING

        pending = await bus.submit(_message("hold parked", "parking"))
        session_id = bus.session_id_for("contract", "parking")
        status_id = await bus.park(pending, session_id)
        other = await bus.park(await bus.submit(_message("hi", "parking-2")), session_id)
        assert status_id != other
        assert len(status_id) >= 22  # unguessable: at least 128 random bits
        assert await bus.parked(status_id) == PENDING
        model.release("parked")
        reply = await _reply(pending)

        async def answered() -> bool:
            return await bus.parked(status_id) == reply

        await async_wait_for(answered, WAIT_S, "the parked reply")
        assert reply.kind == "reply"
        assert await bus.parked("x" * 24) is None
        assert await bus.parked("not an id!") is None

    async def test_a_closed_bus_refuses_messages_and_finishes_those_it_took(
        self, bus: MessageBus, model: ContractModel
    ) -> None:
        held = await bus.submit(_message("hold s", "closing"))
        await async_wait_for(lambda: "hold s" in model.started, WAIT_S, "the held run")
        bus.close()
        assert bus.closed
        late = await _reply(await bus.submit(_message("late", "closing-other")))
        assert late.kind == "closed"
        assert "late" not in model.started
        drained = asyncio.create_task(bus.drain(WAIT_S))
        model.release("s")
        assert (await _reply(held)).kind == "reply"
        assert await _reply(drained) is True
        assert bus.in_flight == 0

    async def test_drain_cancels_the_runs_left_after_the_grace_period(
        self, bus: MessageBus, model: ContractModel
    ) -> None:
        held = await bus.submit(_message("hold forever", "stuck"))
        await async_wait_for(lambda: "hold forever" in model.started, WAIT_S, "the held run")
        assert await _reply(bus.drain(0)) is False
        reply = await _reply(held)
        assert reply.kind == "aborted"
        assert bus.in_flight == 0
