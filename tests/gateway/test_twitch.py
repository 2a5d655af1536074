"""The twitch platform against a fake Twitch IRC websocket on 127.0.0.1, and the line parser."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from lich.gateway.runner import GatewayRunner
from lich.gateway.twitch import TwitchAdapter, parse_irc_line, parse_tags
from lich.testing import async_wait_for

from .conftest import NOTES, events
from .fakes import FakeTwitch

CHANNEL = "lichchan"


@pytest.fixture
async def fake() -> AsyncIterator[FakeTwitch]:
    server = await FakeTwitch().start()
    yield server
    await server.close()


async def start(start_gateway: Any, fake: FakeTwitch, **overrides: Any) -> TwitchAdapter:
    table: dict[str, Any] = {
        "url": fake.url,
        "nick": "LichBot",
        "channels": ["#LichChan"],
        "allowed_users": ["Alice"],
        "backoff_min_s": 0.01,
        "backoff_max_s": 0.05,
    }
    table.update(overrides)
    runner: GatewayRunner = await start_gateway(
        ["twitch"], {"twitch": table}, env={"LICH_TWITCH_OAUTH_TOKEN": "abc123token"}
    )
    adapter: TwitchAdapter = runner.adapter("twitch")
    await async_wait_for(lambda: adapter.ready.is_set(), what="the welcome")
    await async_wait_for(lambda: any(line.startswith("JOIN") for line in fake.lines))
    return adapter


async def test_handshake_then_a_message_runs_a_tool_and_gets_a_reply(start_gateway: Any,
                                                                     fake: FakeTwitch):
    await start(start_gateway, fake)
    assert fake.connection_lines[0][:4] == [
        "CAP REQ :twitch.tv/tags twitch.tv/commands",
        "PASS oauth:abc123token",
        "NICK lichbot",
        "JOIN #lichchan",
    ]
    await fake.say(CHANNEL, "alice", "read notes.txt")
    await async_wait_for(lambda: fake.texts_to(CHANNEL), what="the reply")
    assert fake.texts_to(CHANNEL) == [f"the file says: {NOTES.strip()}"]


async def test_ping_gets_pong(start_gateway: Any, fake: FakeTwitch):
    await start(start_gateway, fake)
    await fake.ping()
    await async_wait_for(lambda: fake.pongs)
    assert fake.pongs == ["PONG :tmi.twitch.tv"]


async def test_own_messages_are_ignored_case_insensitively(start_gateway: Any, fake: FakeTwitch):
    adapter = await start(start_gateway, fake, allowed_users=["*"])
    await fake.say(CHANNEL, "LICHBOT", "my own echo")
    await fake.say(CHANNEL, "alice", "hi")
    await async_wait_for(lambda: fake.texts_to(CHANNEL))
    assert fake.texts_to(CHANNEL) == ["you said: hi | earlier: -"]
    assert adapter.nick == "lichbot"


async def test_replies_are_one_line_chunks_of_at_most_500(start_gateway: Any, fake: FakeTwitch):
    await start(start_gateway, fake)
    await fake.say(CHANNEL, "alice", "long 20")  # 20 lines of 70 characters, newlines between
    await async_wait_for(lambda: len(fake.texts_to(CHANNEL)) >= 3)
    chunks = fake.texts_to(CHANNEL)
    assert len(chunks) == 3
    assert all(len(c) <= 500 and "\n" not in c and "\r" not in c for c in chunks)
    assert " ".join(chunks) == " ".join(f"line {i:04d} " + "x" * 60 for i in range(20))


async def test_sends_are_paced_to_the_rate_window(start_gateway: Any, fake: FakeTwitch,
                                                  monkeypatch: pytest.MonkeyPatch):
    adapter = await start(start_gateway, fake, rate_limit_messages=3, rate_limit_window_s=0.6)
    # When each line was let out, as the adapter's rate window counted it: arrival
    # times at the fake also carry delivery delays, which a loaded machine stretches
    # unevenly, so they cannot show the spacing.
    limiter = adapter._limiter
    released: list[float] = []
    acquire = limiter.acquire

    async def recording_acquire() -> None:
        await acquire()
        released.append(limiter._times[-1])

    monkeypatch.setattr(adapter._limiter, "acquire", recording_acquire)
    await fake.say(CHANNEL, "alice", "long 30")  # 30 lines: 5 chunks
    await async_wait_for(lambda: len(fake.texts_to(CHANNEL)) == 5, what="five chunks")
    assert len(released) == 5
    # Never more than 3 messages within any 0.6 s window.
    for i in range(len(released) - 3):
        assert released[i + 3] - released[i] >= 0.6
    # Each line reached the fake after it was let out, in order.
    arrived = [p["at"] for p in fake.privmsgs]
    assert all(a >= r for a, r in zip(arrived, released, strict=True))


async def test_a_dropped_connection_reconnects_and_keeps_serving(
    start_gateway: Any, fake: FakeTwitch, gateway_log: pytest.LogCaptureFixture,
):
    adapter = await start(start_gateway, fake)
    fake.drop()
    await async_wait_for(lambda: fake.connections == 2 and adapter.ready.is_set(),
                         what="the second connection")
    assert fake.connection_lines[1][:3] == [
        "CAP REQ :twitch.tv/tags twitch.tv/commands", "PASS oauth:abc123token", "NICK lichbot"]
    assert events(gateway_log, "connection_lost")
    await async_wait_for(lambda: len(fake.connection_lines[1]) >= 4)
    await fake.say(CHANNEL, "alice", "back?")
    await async_wait_for(lambda: fake.texts_to(CHANNEL))


async def test_a_reconnect_command_reconnects(start_gateway: Any, fake: FakeTwitch):
    adapter = await start(start_gateway, fake)
    await fake.send_line(":tmi.twitch.tv RECONNECT")
    await async_wait_for(lambda: fake.connections == 2 and adapter.ready.is_set())


async def test_allowlist_denies_strangers(start_gateway: Any, fake: FakeTwitch,
                                          gateway_log: pytest.LogCaptureFixture):
    runner_adapter = await start(start_gateway, fake)
    await fake.say(CHANNEL, "mallory", "let me in")
    await fake.say(CHANNEL, "alice", "hi")
    await async_wait_for(lambda: fake.texts_to(CHANNEL))
    assert fake.texts_to(CHANNEL) == ["you said: hi | earlier: -"]
    assert events(gateway_log, "denied")[0]["user"] == "mallory"
    assert runner_adapter.allowlist.users == frozenset({"alice"})


async def test_a_login_failure_is_final(start_gateway: Any, fake: FakeTwitch):
    adapter = await start(start_gateway, fake)
    await fake.send_line(":tmi.twitch.tv NOTICE * :Login authentication failed")
    await async_wait_for(lambda: adapter.failure, what="the adapter to give up")
    assert "Login authentication failed" in (adapter.failure or "")


async def test_missing_settings_are_named(start_gateway: Any, fake: FakeTwitch):
    from lich.gateway.registry import GatewayError

    with pytest.raises(GatewayError, match=r"LICH_TWITCH_OAUTH_TOKEN.*channels"):
        await start_gateway(["twitch"], {"twitch": {"url": fake.url, "nick": "x"}}, env={})


# -------------------------------------------------------------------- parsing


def test_parse_a_tagged_privmsg():
    line = ("@badge-info=;display-name=Alice\\sB;user-id=42 "
            ":alice!alice@alice.tmi.twitch.tv PRIVMSG #LichChan :hello there :)")
    parsed = parse_irc_line(line)
    assert parsed.kind == "privmsg"
    assert (parsed.channel, parsed.user, parsed.text) == ("lichchan", "alice", "hello there :)")
    assert parsed.tags["display-name"] == "Alice B"
    assert parsed.tags["user-id"] == "42"


def test_parse_is_anchored():
    # Text that merely contains " PRIVMSG #x :" is not a chat message.
    sneaky = ":tmi.twitch.tv NOTICE #chan :fake :evil!e@e PRIVMSG #chan :hi"
    assert parse_irc_line(sneaky).kind == "notice"
    assert parse_irc_line("garbage PRIVMSG #chan :hi").kind == "other"


def test_parse_other_lines():
    assert parse_irc_line("PING :tmi.twitch.tv").kind == "ping"
    assert parse_irc_line("PING :tmi.twitch.tv").text == ":tmi.twitch.tv"
    assert parse_irc_line(":tmi.twitch.tv 001 lichbot :Welcome, GLHF!").kind == "welcome"
    assert parse_irc_line(":lichbot!lichbot@lichbot.tmi.twitch.tv JOIN #c").kind == "other"
    assert parse_irc_line(":tmi.twitch.tv RECONNECT").kind == "reconnect"


def test_tag_unescaping():
    assert parse_tags(r"a=x\sy;b=1\:2;c=back\\slash;d=;e") == {
        "a": "x y", "b": "1;2", "c": "back\\slash", "d": "", "e": ""}
