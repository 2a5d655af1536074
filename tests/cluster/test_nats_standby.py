"""A single-connection platform (the Telegram poller) runs in one gateway at a time.

The first gateway is a real ``lich gateway`` process holding the poller's lease;
the second, in this process, stands by; SIGKILL the first and the second takes
over once the lease expires, against the Telegram fake.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from gateway.fakes import FakeTelegram
from gateway_process import gateway_process
from lich_env import lich_env

from lich.agent import load_plugins
from lich.gateway.runner import GatewayRunner
from lich.testing import (
    Reply,
    ScriptedChat,
    ScriptedModel,
    ScriptedServer,
    async_wait_for,
    make_test_config,
)
from lich.testing.contracts import contract_responder
from lich.testing.nats import NatsServer

pytestmark = [
    pytest.mark.system,  # lich processes against a real broker: slow, run by .ci/run
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
]

TOKEN = "123456:TEST-token_value"
USER = 4242
WAIT_S = 60.0


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegram]:
    server = await FakeTelegram(TOKEN).start()
    yield server
    await server.close()


def bus_table(nats_server: NatsServer) -> dict[str, object]:
    return {"kind": "nats", "servers": [nats_server.url], "partitions": 2,
            "lease_ttl_s": 2, "ack_wait_s": 2, "consume": True}


async def test_a_standby_gateway_takes_the_telegram_poller_over_when_the_first_dies(
    tmp_path: Path, nats_server: NatsServer, telegram: FakeTelegram,
):
    model = ScriptedServer(ScriptedModel(steps=[Reply("from the first gateway")] * 10)).start()
    try:
        first_work = tmp_path / "first"
        (first_work / ".lich").mkdir(parents=True)
        (first_work / ".lich" / "config.toml").write_text(
            'stream = false\nplugins = ["+nats"]\n'
            '[[providers]]\nkind = "openai_compat"\nname = "scripted"\nmodel = "m"\n'
            f'base_url = "{model.base_url}"\n'
            '[gateway]\nplatforms = ["webhook", "telegram"]\n'
            '[gateway.webhook]\nport = 0\nopen = true\n'
            f'[gateway.telegram]\nbase_url = "{telegram.url}"\nallowed_users = [{USER}]\n'
            'poll_timeout_s = 1\nsend_interval_s = 0\nbackoff_min_s = 0.01\n'
            'backoff_max_s = 0.05\n'
            f'[bus]\nkind = "nats"\nservers = ["{nats_server.url}"]\npartitions = 2\n'
            'lease_ttl_s = 2\nack_wait_s = 2\nconsume = true\n', encoding="utf-8")
        env = lich_env(tmp_path, LICH_TELEGRAM_BOT_TOKEN=TOKEN)
        async with gateway_process(first_work, env) as first:
            await async_wait_for(
                lambda: any("event=adapter_serving platform=telegram" in ln
                            for ln in first.lines), WAIT_S,
                lambda: f"the first gateway to hold the poller; stderr: {first.lines}")
            config = make_test_config(
                tmp_path / "second", plugins=("gateway", "nats"),
                gateway={"platforms": ["telegram"], "telegram": {
                    "base_url": telegram.url, "allowed_users": [USER], "poll_timeout_s": 1,
                    "send_interval_s": 0, "backoff_min_s": 0.01, "backoff_max_s": 0.05}},
                bus=bus_table(nats_server))
            (tmp_path / "second").mkdir()
            second = GatewayRunner(config, host=load_plugins(config),
                                   chat=ScriptedChat(responder=contract_responder),
                                   env={"LICH_TELEGRAM_BOT_TOKEN": TOKEN})
            await second.start()
            try:
                assert second.standby == {"telegram"}
                assert second.adapters == {}
                telegram.push(USER, USER, "hello first")
                await async_wait_for(lambda: telegram.texts_to(USER), WAIT_S, "a reply")
                assert telegram.texts_to(USER) == ["from the first gateway"]

                first.process.send_signal(signal.SIGKILL)
                await first.process.wait()
                # No release: the lease expires, then the standby takes over.
                await async_wait_for(lambda: "telegram" in second.adapters, WAIT_S,
                                     "the standby to take the poller over")
                assert second.standby == set()
                telegram.push(USER, USER, "hello second")
                await async_wait_for(lambda: len(telegram.texts_to(USER)) == 2, WAIT_S,
                                     "the second reply")
                assert telegram.texts_to(USER)[1].startswith("you said: hello second")
            finally:
                await second.stop(grace_s=2)
    finally:
        model.stop()


async def test_a_gateway_that_stops_hands_the_poller_over(
    tmp_path: Path, nats_server: NatsServer, telegram: FakeTelegram,
    caplog: pytest.LogCaptureFixture,
):
    caplog.set_level(logging.INFO, "lich.gateway")
    runners = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        config = make_test_config(
            tmp_path / name, plugins=("gateway", "nats"),
            gateway={"platforms": ["telegram"], "telegram": {
                "base_url": telegram.url, "allowed_users": [USER], "poll_timeout_s": 1}},
            bus={**bus_table(nats_server), "lease_ttl_s": 30})
        runner = GatewayRunner(config, host=load_plugins(config),
                               chat=ScriptedChat(responder=contract_responder),
                               env={"LICH_TELEGRAM_BOT_TOKEN": TOKEN})
        await runner.start()
        runners.append(runner)
    holder, standby = runners
    try:
        assert "telegram" in holder.adapters
        assert standby.standby == {"telegram"}
        await holder.stop(grace_s=2)
        # Released at stop (not left to expire, 30 s later), and taken over.
        assert "event=lease_released lease=telegram" in caplog.text
        await async_wait_for(lambda: "telegram" in standby.adapters, WAIT_S,
                             "the standby to take the poller over")
    finally:
        await standby.stop(grace_s=2)
