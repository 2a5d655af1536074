"""The gateway on the nats bus: the plugin, its settings, and the webhook end to end."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import sysconfig
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lich.agent import load_plugins
from lich.config import ConfigError
from lich.events import Envelope
from lich.gateway.bus import InboundMessage
from lich.gateway.registry import GatewayError
from lich.gateway.runner import GatewayRunner
from lich.nats_bus.bus import NatsBus
from lich.nats_bus.plugin import lich_check_config
from lich.nats_bus.settings import (
    NatsBusSettings,
    admission_token,
    parse_nats_bus_settings,
    partition_of,
)
from lich.testing import ScriptedChat, make_test_config
from lich.testing.contracts import contract_responder
from lich.testing.nats import NatsServer, nats_server_binary
from lich.testing.ports import refused_port

WAIT_S = 30.0


@pytest.fixture
async def gateway(nats_server: NatsServer,
                  tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    """``await gateway(chat)``: a started gateway (webhook on a free port) on the nats bus,
    running its messages too (``consume = true``: one machine)."""
    runners: list[GatewayRunner] = []

    async def start(chat: Any, **bus: Any) -> tuple[GatewayRunner, str]:
        config = make_test_config(
            tmp_path, plugins=("gateway", "nats"),
            gateway={"platforms": ["webhook"], "webhook": {"port": 0, "open": True}},
            bus={"kind": "nats", "servers": [nats_server.url], "partitions": 4,
                 "consume": True, **bus})
        runner = GatewayRunner(config, host=load_plugins(config), chat=chat, env={})
        await runner.start()
        runners.append(runner)
        return runner, f"http://127.0.0.1:{runner.adapter('webhook').port}"

    yield start
    for runner in runners:
        await runner.stop(grace_s=2)


async def test_a_webhook_message_sent_twice_with_one_idempotency_key_is_one_turn(
    gateway: Callable[..., Any],
):
    chat = ScriptedChat(responder=contract_responder)
    runner, url = await gateway(chat)
    assert isinstance(runner.bus, NatsBus)
    async with httpx.AsyncClient(timeout=WAIT_S) as client:
        async def post(key: str, text: str = "hello") -> httpx.Response:
            return await client.post(f"{url}/message", json={"text": text, "chat_id": "c1"},
                                     headers={"idempotency-key": key})

        first, retry = await post("key-1"), await post("key-1")
        assert first.status_code == retry.status_code == 200
        assert retry.json() == first.json()
        assert first.json()["reply"] == "you said: hello | earlier: -"
        # Two copies at once, the second while the first runs: still one turn.
        both = await asyncio.gather(post("key-2", "again"), post("key-2", "again"))
        assert [r.status_code for r in both] == [200, 200]
        assert both[0].json() == both[1].json()
        # Without a key every request is a message of its own.
        plain = await client.post(f"{url}/message", json={"text": "again", "chat_id": "c1"})
        assert plain.status_code == 200
    assert [r.last_user() for r in chat.requests] == ["hello", "again", "again"]


async def test_the_webhook_stream_carries_the_run_events_through_the_bus(
    gateway: Callable[..., Any],
):
    _, url = await gateway(ScriptedChat(responder=contract_responder))
    async with httpx.AsyncClient(timeout=WAIT_S) as client:
        response = await client.post(f"{url}/message/stream", json={"text": "hi"})
    names = [line[7:] for line in response.text.splitlines() if line.startswith("event: ")]
    assert names[0] == "run_start"
    assert "run_end" in names
    assert names[-1] == "reply"


async def test_events_reach_an_ingress_in_another_process(make_nats_bus: Callable[..., Any]):
    ingress: NatsBus = await make_nats_bus(ScriptedChat(responder=contract_responder),
                                           consume=False)
    await make_nats_bus(ScriptedChat(responder=contract_responder))  # the worker
    seen: list[Envelope] = []
    reply = await asyncio.wait_for(
        ingress.handle(InboundMessage("test", "c1", "u", "hi"), on_event=seen.append), WAIT_S)
    assert reply.kind == "reply"
    types = [e.type for e in seen]
    assert types[0] == "run_start"
    assert types[-1] == "run_end"
    assert all(e.session_id == reply.session_id for e in seen)


async def test_an_unreachable_broker_stops_the_gateway_at_start(tmp_path: Path):
    with refused_port() as port:
        await _gateway_start_fails_on(tmp_path, port)


async def _gateway_start_fails_on(tmp_path: Path, port: int) -> None:
    config = make_test_config(
        tmp_path, plugins=("gateway", "nats"),
        gateway={"platforms": ["webhook"], "webhook": {"port": 0, "open": True}},
        bus={"kind": "nats", "servers": [f"nats://127.0.0.1:{port}"],
             "connect_timeout_s": 1})
    runner = GatewayRunner(config, host=load_plugins(config),
                           chat=ScriptedChat(responder=contract_responder), env={})
    with pytest.raises(GatewayError, match=f"the nats bus cannot reach nats://127.0.0.1:{port}"):
        await runner.start()
    assert runner.adapters == {}


# ------------------------------------------------------------------- settings


@pytest.mark.parametrize(("bus", "problem"), [
    ({"partitions": 0}, "$.bus.partitions: must be between 1 and 1024, got 0"),
    ({"servers": ["http://x"]}, "$.bus.servers[0]: expected a nats or tls or ws or wss URL"),
    ({"servers": []}, "servers: must list at least one server"),
    ({"stream": "a.b"}, "$.bus.stream: expected letters, digits, '_' or '-'"),
    ({"ack_wait_s": 10, "heartbeat_s": 10}, "heartbeat_s: must be less than ack_wait_s (10)"),
    ({"max_deliver": 0}, "$.bus.max_deliver: must be between 1 and 1000, got 0"),
    ({"partition": 4}, "$.bus.partition: unknown key"),
    ({"health_listen": "9090"}, "$.bus.health_listen: expected HOST:PORT (e.g. "),
    ({"health_listen": "[::1]:70000"}, "$.bus.health_listen: expected HOST:PORT"),
    ({"status_ttl_s": 0}, "$.bus.status_ttl_s: must be at least 1"),
])
def test_bad_bus_settings_are_configuration_errors(tmp_path: Path, bus: dict[str, Any],
                                                   problem: str):
    with pytest.raises(ConfigError) as caught:
        lich_check_config(make_test_config(tmp_path, bus={"kind": "nats", **bus}))
    assert any(problem in p for p in caught.value.problems), caught.value.problems


def test_the_defaults(tmp_path: Path):
    settings = parse_nats_bus_settings({"kind": "nats"})
    assert settings == NatsBusSettings()
    assert (settings.partitions, settings.ack_wait_s, settings.max_deliver) == (16, 30.0, 5)
    assert settings.consume is False  # lich gateway only publishes; lich worker runs
    assert settings.heartbeat_every_s == 10.0
    assert settings.servers == ("nats://127.0.0.1:4222",)
    lich_check_config(make_test_config(tmp_path))  # another kind: not this plugin's table


def test_partitions_and_ids_are_stable_hashes():
    # Fixed values: the same in every process and Python version (not hash()).
    assert partition_of("telegram", "42", 16) == partition_of("telegram", "42", 16)
    assert [partition_of("webhook", str(i), 8) for i in range(8)] == \
        [partition_of("webhook", str(i), 8) for i in range(8)]
    spread = {partition_of("webhook", str(i), 16) for i in range(200)}
    assert len(spread) == 16
    assert admission_token("webhook", "c1", "k") == admission_token("webhook", "c1", "k")
    assert admission_token("webhook", "c1", "k") != admission_token("webhook", "c2", "k")
    code = ("from lich.nats_bus.settings import partition_of, admission_token; "
            "print(partition_of('telegram', '42', 16), admission_token('webhook', 'c1', 'k'))")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={"PYTHONHASHSEED": "123"})
    assert other.stdout.split() == [str(partition_of("telegram", "42", 16)),
                                    admission_token("webhook", "c1", "k")]


def test_the_plugin_module_does_not_import_nats_py():
    code = "import sys, lich.nats_bus.plugin; print('nats' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_the_server_binary_comes_from_the_wheel():
    assert Path(nats_server_binary()).parent == Path(sysconfig.get_path("scripts"))


async def test_another_partition_count_is_refused_while_messages_wait(
    make_nats_bus: Callable[..., Any],
):
    ingress: NatsBus = await make_nats_bus(ScriptedChat(responder=contract_responder),
                                           consume=False, partitions=4)
    pending = await ingress.submit(InboundMessage("test", "c1", "u", "waiting"))
    with pytest.raises(GatewayError, match=r"made for 4 partitions and holds 1 messages; "
                                           r"\[bus\] partitions = 8 would reorder them"):
        await make_nats_bus(ScriptedChat(responder=contract_responder), partitions=8)
    # Once the stream is empty, another P is taken (and the surplus consumers go).
    chat = ScriptedChat(responder=contract_responder)
    await make_nats_bus(chat, partitions=4)
    assert (await asyncio.wait_for(pending, WAIT_S)).kind == "reply"
    worker: NatsBus = await make_nats_bus(chat, partitions=2)
    assert worker.settings.partitions == 2
    assert (await asyncio.wait_for(
        worker.handle(InboundMessage("test", "c2", "u", "hi")), WAIT_S)).kind == "reply"


async def test_a_message_over_the_brokers_payload_limit_is_refused_for_good(
    make_nats_bus: Callable[..., Any],
):
    from lich.nats_bus.bus import TOO_LARGE_TEXT

    chat = ScriptedChat(responder=contract_responder)
    bus: NatsBus = await make_nats_bus(chat)
    assert bus._nc is not None
    huge = "x" * (bus._nc.max_payload + 1)
    reply = await asyncio.wait_for(bus.handle(InboundMessage("test", "c1", "u", huge)), WAIT_S)
    assert (reply.kind, reply.text) == ("error", TOO_LARGE_TEXT)
    assert bus.in_flight == 0
    assert chat.requests == []


def _keyless_config(tmp_path: Path, nats_url: str, consume: bool) -> Any:
    """A gateway on the nats bus whose provider's key is not set (anthropic's)."""
    from lich.config import ProviderConfig

    return make_test_config(
        tmp_path, plugins=("gateway", "nats", "anthropic"),
        providers=(ProviderConfig(kind="anthropic", name="claude", model="claude-test"),),
        gateway={"platforms": ["webhook"], "webhook": {"port": 0, "open": True}},
        bus={"kind": "nats", "servers": [nats_url], "partitions": 4, "consume": consume})


async def test_an_ingress_starts_without_the_providers_key_and_its_messages_are_answered(
    nats_server: NatsServer, tmp_path: Path, make_nats_bus: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
):
    # An ingress runs no model: the key lives on the workers only.
    caplog.set_level("INFO", logger="lich.gateway")
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    config = _keyless_config(tmp_path, nats_server.url, consume=False)
    runner = GatewayRunner(config, host=load_plugins(config), env={})
    await runner.start()
    try:
        assert runner.agent is not None
        assert runner.agent.model_problem is not None
        assert "ANTHROPIC_API_KEY" in " ".join(runner.agent.model_problem.problems)
        assert any("event=model_not_configured" in r.getMessage() for r in caplog.records)
        await make_nats_bus(ScriptedChat(responder=contract_responder))  # a worker
        url = f"http://127.0.0.1:{runner.adapter('webhook').port}"
        async with httpx.AsyncClient(timeout=WAIT_S) as client:
            response = await client.post(f"{url}/message", json={"text": "hi", "chat_id": "c1"})
        assert response.status_code == 200
        assert response.json()["reply"] == "you said: hi | earlier: -"
    finally:
        await runner.stop(grace_s=2)


async def test_a_gateway_that_runs_messages_still_needs_the_providers_key(
    nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    config = _keyless_config(tmp_path, nats_server.url, consume=True)
    runner = GatewayRunner(config, host=load_plugins(config), env={})
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        await runner.start()
    assert runner.bus is None


async def test_an_agent_without_a_usable_model_fails_each_call_naming_the_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
):
    from lich.agent import Agent
    from lich.types import ProviderError

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    config = _keyless_config(tmp_path, "nats://127.0.0.1:1", consume=False)
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        Agent(config)
    agent = Agent(config, model_optional=True)
    try:
        with pytest.raises(ProviderError, match=r"this process has no usable model: .*"
                                                r"ANTHROPIC_API_KEY"):
            await agent.run("hello")
    finally:
        await agent.aclose()
