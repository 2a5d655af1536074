"""Approvals in the gateway: the request goes to the chat the run came from, and only the
same sender's ``/approve`` or ``/deny`` answers it — over the real webhook (uvicorn on
127.0.0.1) and through the bus directly for the other platforms' path."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from lich.gateway.bus import APPROVAL_CLOSED_TEXT, GatewayBus, InboundMessage
from lich.gateway.runner import GatewayRunner
from lich.testing import AskFor, async_wait_for

from .conftest import NOTES


def ask_for_reads() -> AskFor:
    """A plugin: every ``read_file`` call needs a person."""
    return AskFor("read_file", reason="reading needs a yes")


class Stream:
    """A ``POST /message/stream`` read event by event in the background."""

    def __init__(self, client: httpx.AsyncClient, url: str, body: dict[str, str]) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.task = asyncio.create_task(self._read(client, url, body))

    async def _read(self, client: httpx.AsyncClient, url: str, body: dict[str, str]) -> None:
        async with client.stream("POST", f"{url}/message/stream", json=body) as response:
            assert response.status_code == 200
            buffer = ""
            async for chunk in response.aiter_text():
                buffer += chunk
                while "\n\n" in buffer:
                    block, buffer = buffer.split("\n\n", 1)
                    fields = dict(line.split(": ", 1) for line in block.splitlines())
                    self.events.append((fields["event"], json.loads(fields["data"])))

    def of(self, name: str) -> list[dict[str, Any]]:
        return [data for event, data in self.events if event == name]

    async def request_id(self) -> str:
        await async_wait_for(lambda: self.of("approval_requested") or self.task.done(),
                             timeout=30, what="an approval_requested event")
        return str(self.of("approval_requested")[0]["id"])

    async def done(self) -> dict[str, Any]:
        await asyncio.wait_for(self.task, 30)
        return self.events[-1][1]


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as c:
        yield c


async def _webhook(start_gateway: Callable[..., Any], **config: Any) -> tuple[GatewayRunner, str]:
    import lich.approvals.plugin

    # The approvals plugin keeps what a session answer grants (its own rules allow all
    # here: the asks are ask_for_reads').
    config.setdefault("approvals", {"mode": "allow"})
    runner = await start_gateway(["webhook"], {"webhook": {"port": 0}},
                                 objects=[("approvals", lich.approvals.plugin),
                                          ("ask", ask_for_reads())], **config)
    return runner, f"http://127.0.0.1:{runner.adapter('webhook').port}"


async def _say(client: httpx.AsyncClient, url: str, text: str, user: str,
               chat: str = "c1") -> dict[str, Any]:
    response = await client.post(f"{url}/message",
                                 json={"text": text, "chat_id": chat, "user_id": user})
    assert response.status_code == 200, response.text
    return dict(response.json())


async def test_the_same_sender_approves_in_a_second_message_and_others_are_ignored(
    start_gateway: Any, client: httpx.AsyncClient
) -> None:
    runner, url = await _webhook(start_gateway)
    stream = Stream(client, url, {"text": "read notes.txt", "chat_id": "c1", "user_id": "alice"})
    request_id = await stream.request_id()
    (notice,) = stream.of("notice")
    assert f"/approve {request_id}" in notice["text"]
    assert "read_file wants to run — reading needs a yes" in notice["text"]
    assert '"path": "notes.txt"' in notice["text"]
    # A chat has no `always` answer: the notice offers only what it has.
    assert "always" not in notice["text"]
    assert "a session answer allows exactly: read_file(notes.txt)" in notice["text"]

    # Someone else — in the same chat, or alice's id from another chat — cannot answer.
    other = await _say(client, url, f"/approve {request_id}", "mallory")
    assert other["reply"] == f"There is no pending approval {request_id} for you."
    elsewhere = await _say(client, url, f"/approve {request_id}", "alice", chat="c2")
    assert elsewhere["reply"] == other["reply"]
    unknown = await _say(client, url, "/approve ffff", "alice")
    assert unknown["reply"] == "There is no pending approval ffff for you."
    assert not stream.task.done()
    assert runner.bus is not None
    assert runner.bus.approvals.pending_ids == [request_id]

    answer = await _say(client, url, f"/approve {request_id}", "alice")
    assert answer["reply"] == f"Approved: read_file ({request_id})."
    final = await stream.done()
    assert final["reply"] == f"the file says: {NOTES.strip()}"
    (resolved,) = stream.of("approval_resolved")
    assert resolved["approved"] is True
    assert resolved["approver"] == "webhook:alice"
    assert runner.bus.approvals.pending_ids == []


async def test_a_denial_with_a_reason_reaches_the_model(
    start_gateway: Any, client: httpx.AsyncClient
) -> None:
    _runner, url = await _webhook(start_gateway)
    stream = Stream(client, url, {"text": "read notes.txt", "chat_id": "c1", "user_id": "bob"})
    request_id = await stream.request_id()
    answer = await _say(client, url, f"/deny {request_id} not that file", "bob")
    assert answer["reply"] == f"Denied: read_file ({request_id})."
    final = await stream.done()
    result = json.loads(final["reply"].removeprefix("the file says: "))
    assert result["error"] == "approval_denied: not that file"


async def test_a_session_approval_is_the_persons_not_the_groups(
    start_gateway: Any, client: httpx.AsyncClient
) -> None:
    runner, url = await _webhook(start_gateway)
    stream = Stream(client, url, {"text": "read notes.txt", "chat_id": "g1", "user_id": "bob"})
    request_id = await stream.request_id()
    (notice,) = stream.of("notice")
    assert "a session answer allows exactly: read_file(notes.txt)" in notice["text"]
    assert "for you only, in any chat" in notice["text"]
    assert (await _say(client, url, f"/approve {request_id} always", "bob",
                       chat="g1"))["reply"].startswith("always is not available in a chat")
    assert not stream.task.done()
    answer = await _say(client, url, f"/approve {request_id} session", "bob", chat="g1")
    assert answer["reply"] == (
        f"Approved: read_file ({request_id}); from now on, for you only (in any chat, "
        "until the gateway restarts), also: read_file(notes.txt).")
    await stream.done()
    # Bob's same read again, in the group and in a chat never seen: no question.
    for chat in ("g1", "dm-bob"):
        again = await _say(client, url, "read notes.txt", "bob", chat=chat)
        assert again["reply"] == f"the file says: {NOTES.strip()}", chat
    # Another member of the group is not covered by bob's answer: asked (here, with
    # no way to ask over POST /message, denied), and a wider call of bob's too.
    other = await _say(client, url, "read notes.txt", "mallory", chat="g1")
    assert json.loads(other["reply"].removeprefix("the file says: "))["error"].startswith(
        "approval_unavailable")
    wider = await _say(client, url, "read other.txt", "bob", chat="g1")
    assert json.loads(wider["reply"].removeprefix("the file says: "))["error"].startswith(
        "approval_unavailable")
    assert runner.bus is not None
    assert runner.bus.approvals.grants.granted("webhook\x00bob") == ("read_file(notes.txt)",)
    assert runner.bus.approvals.grants.granted("webhook\x00mallory") == ()


async def test_a_grant_in_a_group_does_not_reach_another_members_streamed_call(
    start_gateway: Any, client: httpx.AsyncClient
) -> None:
    """Mallory, in the group where bob approved for the session, is asked herself."""
    _runner, url = await _webhook(start_gateway)
    first = Stream(client, url, {"text": "read notes.txt", "chat_id": "g1", "user_id": "bob"})
    await _say(client, url, f"/approve {await first.request_id()} session", "bob", chat="g1")
    await first.done()
    theirs = Stream(client, url, {"text": "read notes.txt", "chat_id": "g1",
                                  "user_id": "mallory"})
    request_id = await theirs.request_id()
    # Bob cannot answer mallory's request either.
    refused = await _say(client, url, f"/approve {request_id}", "bob", chat="g1")
    assert refused["reply"] == f"There is no pending approval {request_id} for you."
    await _say(client, url, f"/deny {request_id}", "mallory", chat="g1")
    final = await theirs.done()
    assert "approval_denied" in final["reply"]


async def test_without_a_way_to_reach_the_person_the_call_is_denied(
    start_gateway: Any, client: httpx.AsyncClient
) -> None:
    """``POST /message`` only answers at the end: nothing can ask, so the core denies."""
    _, url = await _webhook(start_gateway)
    body = await _say(client, url, "read notes.txt", "bob")
    result = json.loads(body["reply"].removeprefix("the file says: "))
    assert result["error"].startswith("approval_unavailable: no one is there")
    assert "--yes" not in result["error"]  # the gateway takes no --yes


async def test_other_conversations_go_on_while_one_waits(
    start_gateway: Any, client: httpx.AsyncClient
) -> None:
    _, url = await _webhook(start_gateway)
    stream = Stream(client, url, {"text": "read notes.txt", "chat_id": "c1", "user_id": "bob"})
    request_id = await stream.request_id()
    other = await _say(client, url, "hello", "carol", chat="c2")
    assert other["reply"].startswith("you said: hello")
    assert not stream.task.done()
    await _say(client, url, f"/deny {request_id}", "bob")
    await stream.done()


async def test_the_approval_timeout_denies_and_the_chat_is_told(
    start_gateway: Any, client: httpx.AsyncClient
) -> None:
    _, url = await _webhook(start_gateway, approval_timeout_s=0.3)
    stream = Stream(client, url, {"text": "read notes.txt", "chat_id": "c1", "user_id": "bob"})
    request_id = await stream.request_id()
    final = await stream.done()
    result = json.loads(final["reply"].removeprefix("the file says: "))
    assert result["error"] == "approval_timeout: no answer within 0.3s; the call was not run"
    late = await _say(client, url, f"/approve {request_id}", "bob")
    assert late["reply"] == f"There is no pending approval {request_id} for you."


async def test_a_stopping_gateway_denies_what_waits_and_tells_the_model(
    make_agent: Callable[..., Any],
) -> None:
    agent = make_agent()
    agent.host.register_object(ask_for_reads(), "ask")
    bus = GatewayBus(agent)
    sent: list[str] = []

    async def notify(text: str) -> None:
        sent.append(text)

    message = InboundMessage("telegram", "42", "7", "read notes.txt")
    task = asyncio.create_task(bus.handle(message, notify=notify))
    await async_wait_for(lambda: bus.approvals.pending_ids, timeout=30,
                         what="a pending approval")
    assert "/approve" in sent[0]
    bus.close()
    reply = await asyncio.wait_for(task, 30)
    assert reply.kind == "reply"
    result = json.loads(reply.text.removeprefix("the file says: "))
    assert result["error"] == f"approval_denied: {APPROVAL_CLOSED_TEXT}"
    assert bus.approvals.pending_ids == []


async def test_usage_lines_for_a_bare_command(make_agent: Callable[..., Any]) -> None:
    bus = GatewayBus(make_agent())
    approve = await bus.handle(InboundMessage("discord", "1", "2", "/approve"))
    deny = await bus.handle(InboundMessage("discord", "1", "2", "/deny@lichbot"))
    assert (approve.kind, approve.text) == ("approval", "usage: /approve <id> [session]")
    assert deny.text == "usage: /deny <id> [reason]"
    # Ordinary words that merely start like a command still go to the agent.
    plain = await bus.handle(InboundMessage("discord", "1", "2", "/approved is a word"))
    assert plain.kind == "reply"


async def test_telegram_asks_in_the_chat_and_the_sender_answers_there(
    start_gateway: Any,
) -> None:
    """The path of the chat platforms: the request is a message to the chat, the answer a
    message from it (here the group chat -100 where two allowed users talk)."""
    from .fakes import FakeTelegram

    token, group, alice, bob = "123456:TEST-token_value", -100, 4242, 4343
    fake = await FakeTelegram(token).start()
    try:
        await start_gateway([], {"platforms": ["telegram"], "telegram": {
            "base_url": fake.url, "allowed_users": [alice, bob], "poll_timeout_s": 1,
            "send_interval_s": 0, "backoff_min_s": 0.01, "backoff_max_s": 0.05,
        }}, env={"LICH_TELEGRAM_BOT_TOKEN": token}, objects=[("ask", ask_for_reads())])
        fake.push(group, alice, "read notes.txt")
        await async_wait_for(lambda: any("/approve" in t for t in fake.texts_to(group)),
                             timeout=30, what="the approval request in the chat")
        request = next(t for t in fake.texts_to(group) if "/approve" in t)
        request_id = request.split("/approve ", 1)[1].split()[0]
        fake.push(group, bob, f"/approve {request_id}")  # not bob's to answer
        await async_wait_for(
            lambda: f"There is no pending approval {request_id} for you." in
            fake.texts_to(group), timeout=30, what="bob's refusal")
        fake.push(group, alice, f"/approve {request_id}")
        await async_wait_for(
            lambda: f"the file says: {NOTES.strip()}" in fake.texts_to(group), timeout=30,
            what="the answer after alice approved")
        assert f"Approved: read_file ({request_id})." in fake.texts_to(group)
    finally:
        await fake.close()
