"""The discord platform against a fake gateway websocket and REST API on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from lich.gateway.discord import DiscordAdapter
from lich.gateway.runner import GatewayRunner
from lich.testing import async_wait_for

from .conftest import NOTES, events
from .fakes import BOT_ID, FakeDiscord, HttpResponse

TOKEN = "discord-bot-token-xyz"
ALICE = "111"
CHANNEL = "c-1"


@pytest.fixture
async def fake(request: pytest.FixtureRequest) -> AsyncIterator[FakeDiscord]:
    """The fake platform; ``indirect`` parametrisation sets its heartbeat interval (ms)."""
    server = await FakeDiscord(TOKEN, **({"heartbeat_ms": request.param}
                                         if hasattr(request, "param") else {})).start()
    yield server
    await server.close()


async def start(start_gateway: Any, fake: FakeDiscord, **overrides: Any) -> DiscordAdapter:
    table: dict[str, Any] = {
        "gateway_url": fake.gateway_url,
        "api_base_url": fake.api_url,
        "allowed_users": [ALICE],
        "backoff_min_s": 0.01,
        "backoff_max_s": 0.05,
        "invalid_session_delay_s": 0.01,
    }
    table.update(overrides)
    runner: GatewayRunner = await start_gateway(
        ["discord"], {"discord": table}, env={"LICH_DISCORD_BOT_TOKEN": TOKEN}
    )
    adapter: DiscordAdapter = runner.adapter("discord")
    await async_wait_for(lambda: adapter.ready.is_set() and fake.ready.is_set(), what="READY")
    return adapter


async def test_mention_runs_a_tool_and_the_reply_is_posted(start_gateway: Any, fake: FakeDiscord):
    adapter = await start(start_gateway, fake)
    identify = fake.identifies[0]
    assert identify["token"] == TOKEN
    assert identify["intents"] == (1 << 9) | (1 << 12) | (1 << 15)
    assert adapter.bot_id == BOT_ID
    await fake.message(CHANNEL, ALICE, "read notes.txt", mention=True)
    await async_wait_for(lambda: fake.contents_to(CHANNEL), what="the reply")
    assert fake.contents_to(CHANNEL) == [f"the file says: {NOTES.strip()}"]
    posted = fake.posted[0]
    assert posted["headers"]["authorization"] == f"Bot {TOKEN}"
    assert posted["body"]["allowed_mentions"] == {"parse": []}


async def test_guild_messages_without_a_mention_and_bot_messages_are_ignored(
    start_gateway: Any, fake: FakeDiscord,
):
    await start(start_gateway, fake)
    await fake.message(CHANNEL, ALICE, "just chatting")
    await fake.message(CHANNEL, "222", "a bot", mention=True, bot=True)
    await fake.message(CHANNEL, ALICE, "hey", mention=True)
    await async_wait_for(lambda: fake.contents_to(CHANNEL))
    assert fake.contents_to(CHANNEL) == ["you said: hey | earlier: -"]


async def test_mentions_can_be_optional(start_gateway: Any, fake: FakeDiscord):
    await start(start_gateway, fake, require_mention=False)
    await fake.message(CHANNEL, ALICE, "no mention needed")
    await async_wait_for(lambda: fake.contents_to(CHANNEL))


async def test_direct_messages_need_an_explicit_allowlist_entry(
    start_gateway: Any, fake: FakeDiscord, gateway_log: pytest.LogCaptureFixture,
):
    await start(start_gateway, fake, allowed_users=["*"], allowed_chats=["dm-alice"])
    await fake.message("dm-bob", "333", "hello from a stranger", guild=None)
    await fake.message("dm-alice", ALICE, "hello in my DMs", guild=None)
    await async_wait_for(lambda: fake.contents_to("dm-alice"))
    assert fake.contents_to("dm-bob") == []
    assert [e["chat"] for e in events(gateway_log, "denied")] == ["dm-bob"]
    # "*" still opens guild channels.
    await fake.message("g-chan", "333", "in a guild", mention=True)
    await async_wait_for(lambda: fake.contents_to("g-chan"))


async def test_allowlist_denies_strangers_in_guild_channels(
    start_gateway: Any, fake: FakeDiscord, gateway_log: pytest.LogCaptureFixture,
):
    await start(start_gateway, fake)
    await fake.message(CHANNEL, "999", "me too?", mention=True)
    await fake.message(CHANNEL, ALICE, "me", mention=True)
    await async_wait_for(lambda: fake.contents_to(CHANNEL))
    assert fake.contents_to(CHANNEL) == ["you said: me | earlier: -"]
    assert events(gateway_log, "denied")[0]["user"] == "999"


async def test_a_long_reply_is_split_into_2000_character_messages(start_gateway: Any,
                                                                  fake: FakeDiscord):
    await start(start_gateway, fake)
    await fake.message(CHANNEL, ALICE, "long 70", mention=True)  # ~4.9k characters
    await async_wait_for(lambda: len(fake.contents_to(CHANNEL)) >= 3)
    chunks = fake.contents_to(CHANNEL)
    assert len(chunks) == 3
    assert all(len(c) <= 2000 for c in chunks)
    assert "\n".join(chunks).split("\n") == [f"line {i:04d} " + "x" * 60 for i in range(70)]


async def test_429_retry_after_is_honoured(start_gateway: Any, fake: FakeDiscord):
    await start(start_gateway, fake)
    fake.post_failures.append(HttpResponse(
        429, {"message": "You are being rate limited.", "retry_after": 0.5, "global": False},
        {"retry-after": "1"}))
    await fake.message(CHANNEL, ALICE, "hi", mention=True)
    await async_wait_for(lambda: fake.contents_to(CHANNEL))
    first, second = fake.post_attempts
    assert second.at - first.at >= 0.45  # the body's precise retry_after
    assert fake.contents_to(CHANNEL) == ["you said: hi | earlier: -"]


FAST_HEARTBEAT = pytest.mark.parametrize("fake", [200], indirect=True)


@FAST_HEARTBEAT
async def test_heartbeats_carry_the_last_sequence_number(start_gateway: Any, fake: FakeDiscord):
    await start(start_gateway, fake)
    seq = await fake.dispatch("TYPING_START", {"channel_id": CHANNEL})
    await async_wait_for(lambda: seq in fake.heartbeats, what=f"a heartbeat with d={seq}")


async def test_a_dropped_connection_is_resumed_and_keeps_serving(
    start_gateway: Any, fake: FakeDiscord, gateway_log: pytest.LogCaptureFixture,
):
    adapter = await start(start_gateway, fake)
    await fake.message(CHANNEL, ALICE, "before", mention=True)
    await async_wait_for(lambda: fake.contents_to(CHANNEL))
    session, seq = fake.session_id, fake.seq
    fake.drop()  # TCP cut, no close frame
    await async_wait_for(lambda: fake.resumes, what="a resume")
    assert fake.resumes[0] == {"token": TOKEN, "session_id": session, "seq": seq}
    assert len(fake.identifies) == 1
    # Both sides done resuming on the second connection (ready is cleared on a drop).
    await async_wait_for(lambda: fake.connections == 2 and fake.ready.is_set()
                         and adapter.ready.is_set(), what="the resumed session")
    await fake.message(CHANNEL, ALICE, "after", mention=True)
    await async_wait_for(lambda: len(fake.contents_to(CHANNEL)) == 2)
    assert fake.contents_to(CHANNEL)[1] == "you said: after | earlier: before"
    assert events(gateway_log, "resumed")


async def test_events_missed_while_disconnected_are_replayed_on_resume(start_gateway: Any,
                                                                       fake: FakeDiscord):
    await start(start_gateway, fake)
    fake.drop()
    await fake.message(CHANNEL, ALICE, "sent while you were away", mention=True)
    await async_wait_for(lambda: fake.contents_to(CHANNEL), what="the replayed message's reply")


@FAST_HEARTBEAT
async def test_a_missing_heartbeat_ack_reconnects(start_gateway: Any, fake: FakeDiscord,
                                                  gateway_log: pytest.LogCaptureFixture):
    adapter = await start(start_gateway, fake)
    fake.ack_heartbeats = False
    await async_wait_for(lambda: events(gateway_log, "heartbeat_ack_missing"),
                         what="zombie detection")
    fake.ack_heartbeats = True
    await async_wait_for(lambda: fake.resumes, what="a resume after the zombie")
    await async_wait_for(lambda: fake.ready.is_set() and adapter.ready.is_set(), what="resumed")
    await fake.message(CHANNEL, ALICE, "alive?", mention=True)
    await async_wait_for(lambda: fake.contents_to(CHANNEL))


async def test_reconnect_and_invalid_session_opcodes(start_gateway: Any, fake: FakeDiscord):
    adapter = await start(start_gateway, fake)
    await fake.send_op(7)  # Reconnect: resume
    await async_wait_for(lambda: fake.resumes, what="a resume after op 7")
    await async_wait_for(lambda: adapter.ready.is_set() and fake.ready.is_set())
    fake.allow_resume = False
    await fake.send_op(9, False)  # Invalid session, not resumable: identify afresh
    await async_wait_for(lambda: len(fake.identifies) == 2, what="a fresh identify")
    await async_wait_for(lambda: adapter.ready.is_set() and adapter.session_id == fake.session_id)
    await fake.message(CHANNEL, ALICE, "new session", mention=True)
    await async_wait_for(lambda: fake.contents_to(CHANNEL))


async def test_an_invalid_resume_falls_back_to_identify(start_gateway: Any, fake: FakeDiscord):
    adapter = await start(start_gateway, fake)
    fake.allow_resume = False
    fake.drop()
    await async_wait_for(lambda: len(fake.identifies) == 2,
                         what="identify after the refused resume")
    await async_wait_for(lambda: adapter.ready.is_set() and adapter.session_id == fake.session_id)


async def test_an_authentication_failure_stops_reconnecting(start_gateway: Any, fake: FakeDiscord,
                                                            gateway_log: pytest.LogCaptureFixture):
    adapter = await start(start_gateway, fake)
    await fake.close_with(4004, "Authentication failed.")
    await async_wait_for(lambda: adapter.failure, what="the adapter to give up")
    assert "4004" in (adapter.failure or "")
    connections = fake.connections
    assert events(gateway_log, "adapter_failed")
    await asyncio.sleep(0.3)  # several backoff periods: no reconnect attempt may follow
    assert fake.connections == connections
