"""The webhook's status URL on the nats bus: any ingress behind a load balancer answers it."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from gateway_process import gateway_process
from lich_env import lich_env

from lich.agent import load_plugins
from lich.gateway.bus import BusReply, is_status_id
from lich.gateway.formatting import keyed_status_id
from lich.gateway.runner import GatewayRunner
from lich.nats_bus.bus import NatsBus
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
                     "webhook": {"port": 0, "open": True, "reply_timeout_s": 0.2}},
            bus={"kind": "nats", "servers": [nats_server.url], "partitions": 4})
        runner = GatewayRunner(config, host=load_plugins(config),
                               chat=ScriptedChat(responder=contract_responder), env={})
        await runner.start()
        runners.append(runner)
        return runner, f"http://127.0.0.1:{runner.adapter('webhook').port}"

    yield start
    for runner in runners:
        await runner.stop(grace_s=2)


async def answered_once_released(client: httpx.AsyncClient, url: str, model: ContractModel,
                                 tag: str) -> httpx.Response:
    """The status URL ``url``: ``202 pending`` while its run is held on ``hold <tag>``, then,
    released, polled until it is answered (``200``)."""
    pending = await client.get(url)
    assert (pending.status_code, pending.json()) == (202, {"status": "pending"})
    model.release(tag)

    async def done() -> httpx.Response | None:
        r = await client.get(url)
        return r if r.status_code != 202 else None

    answer = await async_wait_for(done, WAIT_S, f"{url} to be answered")
    assert answer.status_code == 200, answer.text
    return answer


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
        done = await answered_once_released(client, f"{second_url}{status_path}", model,
                                            "slow")
        assert done.json()["reply"] == "you said: hold slow | earlier: -"
        # Read from the broker, not from the admitting process's memory: it is gone now.
        await first.stop(grace_s=2)
        again = await client.get(f"{second_url}{status_path}")
        assert again.json() == done.json()
        # An id never given (or expired) is unknown everywhere; so is a malformed one.
        unknown = await client.get(f"{second_url}/message/status/{'A' * 24}")
        assert unknown.status_code == 404
        assert (await client.get(f"{second_url}/message/status/x.y")).status_code == 404


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
async def test_a_status_url_is_answered_after_the_ingress_that_gave_it_was_killed(
    short_reply_windows: None, tmp_path: Path, nats_server: NatsServer,
    ingress: Callable[..., Any], make_nats_bus: Callable[..., Any],
):
    model = ContractModel()
    await make_nats_bus(model)  # the worker; every process here shares tmp_path's install
    _, second_url = await ingress()
    (tmp_path / ".lich" / "config.toml").write_text(
        'plugins = ["+nats"]\n[gateway]\nplatforms = ["webhook"]\n'
        '[gateway.webhook]\nport = 0\nopen = true\nreply_timeout_s = 0.2\n'
        f'[bus]\nkind = "nats"\nservers = ["{nats_server.url}"]\npartitions = 4\n',
        encoding="utf-8")
    async with gateway_process(tmp_path, lich_env(tmp_path)) as first, \
            httpx.AsyncClient(timeout=WAIT_S) as client:
        accepted = await client.post(f"http://127.0.0.1:{first.port}/message",
                                     json={"text": "hold lost", "chat_id": "orphan"})
        assert accepted.status_code == 202, accepted.text
        status_path = accepted.json()["status_url"]
        await async_wait_for(lambda: "hold lost" in model.started, WAIT_S, "the held run")
        # The ingress that admitted the message, and would have taken its reply, dies.
        first.process.send_signal(signal.SIGKILL)
        await first.process.wait()
        # The worker finds no one to take the reply and answers the URL itself.
        done = await answered_once_released(client, f"{second_url}{status_path}", model,
                                            "lost")
        assert done.json()["reply"] == "you said: hold lost | earlier: -"


def test_a_status_id_is_keyed_by_the_install_and_shaped_like_a_random_one():
    key, other = b"k" * 32, b"o" * 32
    one = keyed_status_id("m0123", key)
    assert one == keyed_status_id("m0123", key)  # every process of the install agrees
    assert is_status_id(one)
    assert len(one) == 24
    # Without the key the admission id (it is in the logs) does not give the URL.
    assert keyed_status_id("m0123", other) != one
    assert keyed_status_id("m0124", key) != one
    with pytest.raises(ValueError, match="at least 16 bytes"):
        keyed_status_id("m0123", b"short")


async def test_a_worker_writes_a_lost_reply_only_over_a_pending_entry(
    make_nats_bus: Callable[..., Any],
):
    # What the worker does when no ingress takes a reply, entry by entry in the bucket:
    # it answers a status URL still pending, and leaves alone an entry that the ingress
    # answered itself (or one never made: that message was given no URL).
    worker: NatsBus = await make_nats_bus(ContractModel())
    kv = await worker._replies_bucket()
    reply = BusReply("reply", "the lost one", "s1")
    fields = {"platform": "test", "chat": "c", "admission": "x"}
    pending, answered, absent = (worker.local.status_id_for(a) for a in ("a1", "a2", "a3"))
    await kv.put(pending, json.dumps({"status": "pending", "session_id": "s1"}).encode())
    mine = {"status": "done",
            "reply": {"kind": "reply", "text": "the ingress's", "session_id": "s1"}}
    await kv.put(answered, json.dumps(mine).encode())
    for admission in ("a1", "a2", "a3"):
        await worker._park_for_lost_ingress(admission, reply, fields)
    assert await worker.parked(pending) == reply
    assert json.loads((await kv.get(answered)).value or b"") == mine
    assert await worker.parked(absent) is None
