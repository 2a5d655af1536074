"""Approvals across the cluster: a worker's run asks the chat through the ingress that
admitted its message, and the sender's ``/approve`` or ``/deny`` reaches that worker from
any ingress — on a real broker, the buses in this process, the builtin ``read_file``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lich.gateway.bus import BusReply, InboundMessage
from lich.nats_bus.bus import NatsBus
from lich.testing import AskFor, Reply, ScriptedChat, ScriptRequest, Step, async_wait_for
from lich.types import ToolCall

WAIT_S = 30.0
NOTES = "the notes of the cluster\n"


def reader(request: ScriptRequest) -> Step:
    """``read <path>``: call ``read_file``, then say what it returned."""
    results = request.tool_results_since_user()
    if not results:
        path = request.last_user().removeprefix("read ").strip()
        return Reply(tool_calls=(ToolCall("call_1", "read_file", {"path": path}),))
    return Reply(f"the file says: {results[0].content.strip()}")


class Chat:
    """What a platform's chat was sent while runs went on (the ingress's ``notify``)."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def notify(self, text: str) -> None:
        self.sent.append(text)

    async def request_id(self) -> str:
        await async_wait_for(lambda: any("/approve" in t for t in self.sent), WAIT_S,
                             "the approval request in the chat")
        text = next(t for t in self.sent if "/approve" in t)
        return text.split("/approve ", 1)[1].split()[0]


async def cluster(make_nats_bus: Callable[..., Any], tmp_path: Path,
                  ) -> tuple[NatsBus, NatsBus, NatsBus]:
    """Two ingresses (they only publish) and a worker whose read_file calls need a yes."""
    (tmp_path / "notes.txt").write_text(NOTES, encoding="utf-8")
    worker = await make_nats_bus(ScriptedChat(responder=reader), plugins=("builtin_tools",),
                                 objects=[("ask", AskFor("read_file"))],
                                 publish_timeout_s=1)
    first = await make_nats_bus(ScriptedChat(), consume=False, publish_timeout_s=1)
    second = await make_nats_bus(ScriptedChat(), consume=False, publish_timeout_s=1)
    return first, second, worker


def said(bus: NatsBus, text: str, user: str = "alice") -> Any:
    return bus.handle(InboundMessage("telegram", "chat-1", user, text))


async def ask_to_read(ingress: NatsBus) -> tuple[Chat, asyncio.Future[BusReply], str]:
    """alice's ``read notes.txt`` through ``ingress``: her chat, the pending reply, and the
    id of the approval request that reached her chat."""
    chat = Chat()
    run = await ingress.submit(InboundMessage("telegram", "chat-1", "alice", "read notes.txt"),
                               notify=chat.notify)
    return chat, run, await chat.request_id()


async def test_a_worker_asks_the_chat_through_the_ingress_and_the_sender_approves(
    make_nats_bus: Callable[..., Any], tmp_path: Path,
):
    first, second, worker = await cluster(make_nats_bus, tmp_path)
    chat, run, request_id = await ask_to_read(first)
    assert "read_file" in chat.sent[0]
    assert worker.local.approvals.pending_ids == [request_id]  # it waits in the worker
    # Another user of the same chat, through the other ingress: not theirs to answer.
    refused = await asyncio.wait_for(said(second, f"/approve {request_id}", "bob"), WAIT_S)
    assert (refused.kind, refused.text) == (
        "approval", f"There is no pending approval {request_id} for you.")
    # The same user in another chat (or a forged one): the request belongs to chat-1.
    elsewhere = await asyncio.wait_for(second.handle(
        InboundMessage("telegram", "chat-2", "alice", f"/approve {request_id}")), WAIT_S)
    assert elsewhere.text == f"There is no pending approval {request_id} for you."
    assert not run.done()
    approved = await asyncio.wait_for(said(second, f"/approve {request_id}"), WAIT_S)
    assert (approved.kind, approved.text) == ("approval", f"Approved: read_file ({request_id}).")
    reply = await asyncio.wait_for(run, WAIT_S)
    assert (reply.kind, reply.text) == ("reply", f"the file says: {NOTES.strip()}")
    assert worker.local.approvals.pending_ids == []


async def test_a_denial_from_the_admitting_ingress_reaches_the_worker(
    make_nats_bus: Callable[..., Any], tmp_path: Path,
):
    first, _, _ = await cluster(make_nats_bus, tmp_path)
    _, run, request_id = await ask_to_read(first)
    denied = await asyncio.wait_for(said(first, f"/deny {request_id} not now"), WAIT_S)
    assert denied.text.startswith("Denied: read_file")
    reply = await asyncio.wait_for(run, WAIT_S)
    result = json.loads(reply.text.removeprefix("the file says: "))
    assert result["error"] == "approval_denied: not now"


async def test_without_a_way_to_the_chat_the_call_is_denied_as_in_one_process(
    make_nats_bus: Callable[..., Any], tmp_path: Path,
):
    first, _, _ = await cluster(make_nats_bus, tmp_path)
    reply = await asyncio.wait_for(said(first, "read notes.txt"), WAIT_S)  # no notify
    result = json.loads(reply.text.removeprefix("the file says: "))
    assert result["error"].startswith("approval_unavailable")


async def test_an_unknown_or_bare_command_is_answered_and_not_published(
    make_nats_bus: Callable[..., Any], tmp_path: Path,
):
    first, _, _ = await cluster(make_nats_bus, tmp_path)
    assert first._js is not None
    stored = (await first._js.stream_info(first.settings.stream)).state.last_seq
    unknown = await asyncio.wait_for(said(first, "/approve 0badc0de"), WAIT_S)
    assert (unknown.kind, unknown.text) == (
        "approval", "There is no pending approval 0badc0de for you.")
    bare = await asyncio.wait_for(said(first, "/deny"), WAIT_S)
    assert bare.text == "usage: /deny <id> [reason]"
    # Neither went into the stream (where it would wait behind the run it answers).
    assert (await first._js.stream_info(first.settings.stream)).state.last_seq == stored
