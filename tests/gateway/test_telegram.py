"""The telegram platform against a fake Bot API on 127.0.0.1."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest

from lich.gateway.bus import BusReply, GatewayBus, InboundMessage
from lich.gateway.runner import GatewayRunner
from lich.gateway.telegram import NON_TEXT_REPLY
from lich.hooks import hookimpl
from lich.testing import async_wait_for

from .conftest import EMOJI, NOTES, ForwardingBus, events
from .fakes import FakeTelegram, HttpResponse

TOKEN = "123456:TEST-token_value"
USER = 4242


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    server = await FakeTelegram(TOKEN).start()
    yield server
    await server.close()


def settings(fake: FakeTelegram, **overrides: Any) -> dict[str, Any]:
    table = {
        "base_url": fake.url,
        "allowed_users": [USER],
        "poll_timeout_s": 1,
        "send_interval_s": 0,
        "backoff_min_s": 0.01,
        "backoff_max_s": 0.05,
    }
    table.update(overrides)
    return {"platforms": ["telegram"], "telegram": table}


async def start(start_gateway: Any, fake: FakeTelegram, **overrides: Any) -> GatewayRunner:
    runner: GatewayRunner = await start_gateway(
        [], settings(fake, **overrides), env={"LICH_TELEGRAM_BOT_TOKEN": TOKEN}
    )
    return runner


async def test_message_runs_a_tool_and_the_reply_is_delivered(start_gateway: Any,
                                                             fake: FakeTelegram):
    runner = await start(start_gateway, fake)
    fake.push(USER, USER, "read notes.txt")
    await async_wait_for(lambda: fake.texts_to(USER), what="the reply")
    assert fake.texts_to(USER) == [f"the file says: {NOTES.strip()}"]
    assert [m.name for m in _tool_messages(runner)] == ["read_file"]
    # Polling used the offset after the update, with the long-poll timeout.
    await async_wait_for(lambda: any("offset" in p.query for p in fake.polls))
    polled = [p.query for p in fake.polls if "offset" in p.query]
    assert polled[0]["timeout"] == "1"
    assert int(polled[0]["offset"]) == 1001


def _tool_messages(runner: GatewayRunner) -> list[Any]:
    from lich.types import ToolMessage

    return [m for r in runner.chat.requests for m in r.messages  # type: ignore[union-attr]
            if isinstance(m, ToolMessage)]


async def test_a_long_reply_is_split_at_line_boundaries(start_gateway: Any, fake: FakeTelegram):
    await start(start_gateway, fake)
    fake.push(USER, USER, "long 150")  # 150 lines of 70 characters: ~10.6k characters
    await async_wait_for(lambda: len(fake.texts_to(USER)) >= 3, what="three chunks")
    chunks = fake.texts_to(USER)
    assert len(chunks) == 3
    assert all(len(c) <= 4096 for c in chunks)
    lines = "\n".join(chunks).split("\n")
    assert lines == [f"line {i:04d} " + "x" * 60 for i in range(150)]


async def test_an_emoji_heavy_reply_is_split_by_utf16_code_units(start_gateway: Any,
                                                                 fake: FakeTelegram):
    await start(start_gateway, fake)
    fake.push(USER, USER, "emoji 3000")  # 3000 code points, 6000 UTF-16 code units
    await async_wait_for(lambda: len(fake.texts_to(USER)) >= 2, what="two chunks")
    chunks = fake.texts_to(USER)
    # The fake refuses, as Telegram does, anything over 4096 UTF-16 units.
    assert fake.too_long == []
    assert len(chunks) == 2
    assert all(len(c.encode("utf-16-le")) // 2 <= 4096 for c in chunks)
    assert "".join(chunks) == EMOJI * 3000


async def test_sends_to_a_chat_are_paced(start_gateway: Any, fake: FakeTelegram):
    await start(start_gateway, fake, send_interval_s=0.3)
    fake.push(USER, USER, "long 150")  # three chunks
    await async_wait_for(lambda: len(fake.texts_to(USER)) == 3, what="three chunks")
    # The next chunk leaves at least send_interval_s after the previous one was answered,
    # so arrival times at the fake are at least that far apart, however loaded the machine.
    times = [m["at"] for m in fake.sent]
    assert all(later - earlier >= 0.3 - 1e-6 for earlier, later in itertools.pairwise(times))


async def test_429_retry_after_is_honoured(start_gateway: Any, fake: FakeTelegram,
                                           gateway_log: pytest.LogCaptureFixture):
    await start(start_gateway, fake)
    fake.send_failures.append(HttpResponse(429, {
        "ok": False, "error_code": 429, "description": "Too Many Requests: retry after 1",
        "parameters": {"retry_after": 1}}))
    fake.push(USER, USER, "hello")
    await async_wait_for(lambda: fake.texts_to(USER), what="the reply after the 429")
    first, second = fake.send_attempts
    assert second.at - first.at >= 0.95  # it waited retry_after before trying again
    assert fake.texts_to(USER) == ["you said: hello | earlier: -"]
    limited = events(gateway_log, "rate_limited")
    assert limited
    assert limited[0]["retry_after_s"] == "1.0"


async def test_429_on_get_updates_waits_retry_after_then_polls_again(
    start_gateway: Any, fake: FakeTelegram, gateway_log: pytest.LogCaptureFixture,
):
    await start(start_gateway, fake, backoff_min_s=0, backoff_max_s=0)
    await async_wait_for(lambda: fake.polls, what="the first poll")
    fake.poll_failures.append(HttpResponse(429, {
        "ok": False, "error_code": 429, "description": "Too Many Requests: retry after 1",
        "parameters": {"retry_after": 1}}))
    limited = await async_wait_for(
        lambda: next((i for i, p in enumerate(fake.polls) if p.failed_with == 429), None),
        what="the poll answered 429")
    await async_wait_for(lambda: len(fake.polls) > limited + 1, what="the poll after the 429")
    # It waited retry_after, not the zero backoff of other poll errors.
    assert fake.polls[limited + 1].at - fake.polls[limited].at >= 1.0
    fake.push(USER, USER, "after the limit")
    await async_wait_for(lambda: fake.texts_to(USER), what="the reply after the 429")
    assert fake.texts_to(USER) == ["you said: after the limit | earlier: -"]
    (event,) = events(gateway_log, "rate_limited")
    assert event["method"] == "getUpdates"
    assert event["retry_after_s"] == "1.0"
    assert not events(gateway_log, "poll_failed")


async def test_stop_during_a_long_retry_after_wait_returns_promptly(
    start_gateway: Any, fake: FakeTelegram, gateway_log: pytest.LogCaptureFixture,
):
    runner = await start(start_gateway, fake, max_retry_after_s=3600)
    fake.send_failures.append(HttpResponse(429, {
        "ok": False, "error_code": 429, "description": "Too Many Requests: retry after 3600",
        "parameters": {"retry_after": 3600}}))
    fake.push(USER, USER, "hello")
    await async_wait_for(lambda: events(gateway_log, "rate_limited"), what="the 429")
    # Waiting out the hour would hold stop() until the handler is cancelled after
    # grace + 30 s; the bound only tells a hang from a prompt stop.
    await asyncio.wait_for(runner.stop(grace_s=30), timeout=25)
    assert len(fake.send_attempts) == 1
    assert fake.texts_to(USER) == []
    (gave_up,) = events(gateway_log, "send_gave_up")
    assert gave_up["reason"] == "stopping"
    assert not events(gateway_log, "handlers_cancelled")


async def test_send_failures_are_retried_and_never_stop_the_poller(start_gateway: Any,
                                                                   fake: FakeTelegram):
    await start(start_gateway, fake, send_retries=1)
    bad = HttpResponse(500, {"ok": False, "error_code": 500, "description": "oops"})
    fake.send_failures.extend([bad, bad, bad])  # more than one retry: this reply is lost
    fake.push(USER, USER, "first")
    await async_wait_for(lambda: len(fake.send_attempts) == 2, what="two attempts")
    fake.push(USER, USER, "second")  # the third failure is spent on this one's first try
    await async_wait_for(lambda: fake.texts_to(USER), what="the second reply")
    assert fake.texts_to(USER) == ["you said: second | earlier: first"]


async def test_a_permanent_send_error_is_not_retried(start_gateway: Any, fake: FakeTelegram,
                                                     gateway_log: pytest.LogCaptureFixture):
    await start(start_gateway, fake)
    fake.send_failures.append(HttpResponse(403, {
        "ok": False, "error_code": 403, "description": "Forbidden: bot was blocked by the user"}))
    fake.push(USER, USER, "hi")
    await async_wait_for(lambda: events(gateway_log, "send_failed"), what="send_failed")
    fake.push(USER, USER, "again")
    await async_wait_for(lambda: fake.texts_to(USER), what="the next reply")
    assert len(fake.send_attempts) == 2


async def test_dropped_and_failed_polls_back_off_and_recover(
    start_gateway: Any, fake: FakeTelegram, gateway_log: pytest.LogCaptureFixture,
):
    await start(start_gateway, fake)
    await async_wait_for(lambda: fake.polls, what="the first poll")
    fake.drop_polls = 2  # the connection is cut without an answer, twice
    fake.fail_polls = 1  # then a 502
    await async_wait_for(lambda: len(events(gateway_log, "poll_failed")) >= 3,
                         what="three failures")
    fake.push(USER, USER, "still there?")
    await async_wait_for(lambda: fake.texts_to(USER), what="a reply after the drops")
    assert fake.texts_to(USER) == ["you said: still there? | earlier: -"]
    assert events(gateway_log, "poll_recovered")


async def test_allowlist_denies_strangers(start_gateway: Any, fake: FakeTelegram,
                                          gateway_log: pytest.LogCaptureFixture):
    runner = await start(start_gateway, fake)
    fake.push(777, 777, "let me in")
    fake.push(USER, USER, "hi")  # processed after the stranger's update
    await async_wait_for(lambda: fake.texts_to(USER))
    assert fake.texts_to(777) == []
    assert [r.last_user() for r in runner.chat.requests] == ["hi"]  # type: ignore[union-attr]
    denied = events(gateway_log, "denied")
    assert denied
    assert denied[0]["user"] == "777"
    assert denied[0]["platform"] == "telegram"


async def test_an_allowlisted_group_chat_lets_its_members_in(start_gateway: Any,
                                                             fake: FakeTelegram):
    await start(start_gateway, fake, allowed_users=[], allowed_chats=[-100])
    fake.push(-100, 555, "from the group")
    await async_wait_for(lambda: fake.texts_to(-100))
    assert fake.texts_to(-100) == ["you said: from the group | earlier: -"]


async def test_no_allowlist_means_default_deny_with_a_warning(
    start_gateway: Any, fake: FakeTelegram, gateway_log: pytest.LogCaptureFixture,
):
    runner = await start(start_gateway, fake, allowed_users=[])
    warning = events(gateway_log, "default_deny")
    assert warning
    assert warning[0]["platform"] == "telegram"
    fake.push(USER, USER, "hi")
    await async_wait_for(lambda: events(gateway_log, "denied"))
    assert runner.chat.requests == []  # type: ignore[union-attr]


async def test_bots_edits_and_media(start_gateway: Any, fake: FakeTelegram):
    runner = await start(start_gateway, fake)
    fake.push(USER, USER, "a bot talking", is_bot=True)
    fake.push(USER, USER, "edited text", kind="edited_message")
    fake.push(USER, USER, None)  # a photo
    await async_wait_for(lambda: fake.texts_to(USER))
    assert fake.texts_to(USER) == [NON_TEXT_REPLY]
    assert runner.chat.requests == []  # type: ignore[union-attr]


async def test_start_and_new_commands(start_gateway: Any, fake: FakeTelegram):
    await start(start_gateway, fake)
    fake.push(USER, USER, "/start")
    await async_wait_for(lambda: fake.texts_to(USER))
    fake.push(USER, USER, "/new")
    await async_wait_for(lambda: len(fake.texts_to(USER)) == 2)
    fake.push(USER, USER, "after")
    await async_wait_for(lambda: len(fake.texts_to(USER)) == 3)
    assert fake.texts_to(USER) == ["you said: hello | earlier: -", "Started a new conversation.",
                                   "you said: after | earlier: -"]


async def test_stop_confirms_the_offset(start_gateway: Any, fake: FakeTelegram):
    runner = await start(start_gateway, fake)
    last = fake.push(USER, USER, "hi")
    await async_wait_for(lambda: fake.texts_to(USER))
    await runner.stop()
    final = fake.polls[-1].query
    assert final == {"offset": str(last + 1), "timeout": "0"}
    assert fake.updates == []


async def test_missing_token_is_a_clear_startup_error(start_gateway: Any, fake: FakeTelegram):
    from lich.gateway.registry import GatewayError

    with pytest.raises(GatewayError, match="LICH_TELEGRAM_BOT_TOKEN"):
        await start_gateway([], settings(fake), env={})



class RefuseOnce:
    """A bus plugin whose bus cannot admit its first message (a broker that is away)."""

    def __init__(self) -> None:
        self.submitted: list[tuple[str, str]] = []

    @hookimpl
    def lich_make_bus(self, config: Any, local: GatewayBus) -> Any:
        plugin = self

        class Refusing(ForwardingBus):
            async def submit(self, message: InboundMessage, *, on_event: Any = None,
                             notify: Any = None) -> asyncio.Future[BusReply]:
                plugin.submitted.append((message.text, message.message_id))
                if len(plugin.submitted) == 1:
                    future: asyncio.Future[BusReply] = asyncio.get_running_loop().create_future()
                    future.set_result(BusReply("unavailable", "away", "s"))
                    return future
                return await super().submit(message, on_event=on_event, notify=notify)

        return Refusing(local)


async def test_an_update_the_bus_did_not_admit_is_not_acknowledged(start_gateway: Any,
                                                                   fake: FakeTelegram):
    plugin = RefuseOnce()
    await start_gateway([], settings(fake), env={"LICH_TELEGRAM_BOT_TOKEN": TOKEN},
                        objects=[("refuse", plugin)])
    update = fake.push(USER, USER, "hi")
    await async_wait_for(lambda: fake.texts_to(USER), what="the reply")
    assert fake.texts_to(USER) == ["you said: hi | earlier: -"]
    # Refused, so not acknowledged: getUpdates returned it again (the fake forgets an
    # update once an offset passes it) and it was admitted, both times under the same
    # id (the bot's id and the update id).
    assert plugin.submitted == [("hi", f"123456:{update}")] * 2


SECRET = "s3cret_token-value"


async def test_webhook_mode_sets_the_webhook_and_answers_only_telegram(
    start_gateway: Any, fake: FakeTelegram,
):
    import httpx

    runner = await start_gateway(
        [], settings(fake, webhook_url="https://bot.example/telegram", listen_port=0),
        env={"LICH_TELEGRAM_BOT_TOKEN": TOKEN, "LICH_TELEGRAM_WEBHOOK_SECRET": SECRET})
    adapter = runner.adapter("telegram")
    assert adapter.exclusive is False  # any number of ingresses may serve a webhook
    assert fake.webhooks == [{"url": "https://bot.example/telegram", "secret_token": SECRET,
                              "allowed_updates": ["message"]}]
    assert fake.polls == []
    update = {"update_id": 77, "message": {
        "message_id": 1, "from": {"id": USER, "is_bot": False}, "chat": {"id": USER},
        "text": "hi"}}
    url = f"http://127.0.0.1:{adapter.port}/telegram"
    async with httpx.AsyncClient(timeout=30) as client:
        wrong = await client.post(url, json=update,
                                  headers={"x-telegram-bot-api-secret-token": "guess"})
        missing = await client.post(url, json=update)
        assert (wrong.status_code, missing.status_code) == (401, 401)
        ok = await client.post(url, json=update,
                               headers={"x-telegram-bot-api-secret-token": SECRET})
        assert ok.status_code == 200
    await async_wait_for(lambda: fake.texts_to(USER), what="the reply")
    assert fake.texts_to(USER) == ["you said: hi | earlier: -"]


async def test_webhook_mode_needs_a_well_formed_secret(start_gateway: Any, fake: FakeTelegram):
    from lich.gateway.registry import GatewayError

    with pytest.raises(GatewayError, match="LICH_TELEGRAM_WEBHOOK_SECRET"):
        await start_gateway(
            [], settings(fake, webhook_url="https://bot.example/t", listen_port=0),
            env={"LICH_TELEGRAM_BOT_TOKEN": TOKEN, "LICH_TELEGRAM_WEBHOOK_SECRET": "no spaces"})
    assert fake.webhooks == []
