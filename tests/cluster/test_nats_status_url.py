"""The webhook's status URL on the nats bus: any ingress behind a load balancer answers it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lich.agent import load_plugins
from lich.gateway.runner import GatewayRunner
from lich.testing import async_wait_for, make_test_config
from lich.testing.contracts import ContractModel, contract_responder
from lich.testing.nats import NatsServer
from lich.testing.scripted import ScriptedChat

WAIT_S = 30.0


@pytest.fixture
async def ingress(nats_server: NatsServer,
                  tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """``await ingress()``: a started ``lich gateway`` (webhook, ``reply_timeout_s``) that
    only publishes; its URL. Every ingress shares the install (one session directory)."""
    runners: list[GatewayRunner] = []

    async def start() -> tuple[GatewayRunner, str]:
        config = make_test_config(
            tmp_path, plugins=("gateway", "nats"),
            gateway={"platforms": ["webhook"],
                     "webhook": {"port": 0, "reply_timeout_s": 0.2}},
            bus={"kind": "nats", "servers": [nats_server.url], "partitions": 4})
        runner = GatewayRunner(config, host=load_plugins(config),
                               chat=ScriptedChat(responder=contract_responder), env={})
        await runner.start()
        runners.append(runner)
        return runner, f"http://127.0.0.1:{runner.adapter('webhook').port}"

    yield start
    for runner in runners:
        await runner.stop(grace_s=2)


async def test_a_status_url_from_one_ingress_is_answered_by_another(
    ingress: Callable[..., Any], make_nats_bus: Callable[..., Any],
):
    model = ContractModel()
    await make_nats_bus(model)  # the worker
    first, first_url = await ingress()
    _, second_url = await ingress()
    async with httpx.AsyncClient(timeout=WAIT_S) as client:
        accepted = await client.post(f"{first_url}/message",
                                     json={"text": "hold slow", "chat_id": "lb"})
        assert accepted.status_code == 202, accepted.text
        status_path = accepted.json()["status_url"]
        # The load balancer sends the poll to the other ingress: it knows the id too.
        pending = await client.get(f"{second_url}{status_path}")
        assert (pending.status_code, pending.json()) == (202, {"status": "pending"})
        model.release("slow")

        async def answered() -> httpx.Response | None:
            r = await client.get(f"{second_url}{status_path}")
            return r if r.status_code != 202 else None

        done = await async_wait_for(answered, WAIT_S, "the parked reply on the other ingress")
        assert done.status_code == 200, done.text
        assert done.json()["reply"] == "you said: hold slow | earlier: -"
        # Read from the broker, not from the admitting process's memory: it is gone now.
        await first.stop(grace_s=2)
        again = await client.get(f"{second_url}{status_path}")
        assert again.json() == done.json()
        # An id never given (or expired) is unknown everywhere; so is a malformed one.
        unknown = await client.get(f"{second_url}/message/status/{'A' * 24}")
        assert unknown.status_code == 404
        assert (await client.get(f"{second_url}/message/status/x.y")).status_code == 404
