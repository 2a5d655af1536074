"""``lich_make_bus``: which bus the gateway's adapters hand their messages to."""

from __future__ import annotations

import asyncio
from typing import Any

import attrs
import httpx
import pytest

from lich.config import ConfigError
from lich.events import EventHandler
from lich.gateway.bus import BusReply, GatewayBus, InboundMessage
from lich.hooks import hookimpl
from lich.plugins import PluginHost
from lich.testing import make_test_config

from .conftest import ForwardingBus


class CountingBus(ForwardingBus):
    """A bus in front of the in-process one that counts what passes through it."""

    def __init__(self, local: GatewayBus) -> None:
        super().__init__(local)
        self.seen: list[str] = []
        self.started = False

    async def start(self) -> None:
        self.started = True

    async def submit(self, message: InboundMessage, *, on_event: EventHandler | None = None,
                     notify: Any = None) -> asyncio.Future[BusReply]:
        self.seen.append(message.text)
        return await super().submit(message, on_event=on_event, notify=notify)


@attrs.frozen
class CountingSettings:
    """``[bus] kind = "counting"``: no settings."""


class CountingPlugin:
    def __init__(self) -> None:
        self.bus: CountingBus | None = None

    @hookimpl
    def lich_register_config_tables(self, tables: Any) -> None:
        # A bus kind is its plugin's to claim, as nats claims "nats".
        tables.claim("bus", CountingSettings, kind="counting")

    @hookimpl
    def lich_make_bus(self, config: Any, local: GatewayBus) -> CountingBus | None:
        if config.table("bus").get("kind") != "counting":
            return None
        self.bus = CountingBus(local)
        return self.bus


async def _post(runner: Any, text: str) -> httpx.Response:
    url = f"http://127.0.0.1:{runner.adapter('webhook').port}/message"
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(url, json={"text": text, "chat_id": "c1"})


async def test_hook_lich_make_bus(start_gateway: Any):
    plugin = CountingPlugin()
    runner = await start_gateway(["webhook"], {"webhook": {"port": 0}},
                                 objects=[("counting", plugin)], bus={"kind": "counting"})
    assert plugin.bus is not None
    assert runner.bus is plugin.bus
    assert plugin.bus.started
    assert plugin.bus.local is runner.local
    response = await _post(runner, "through the plugin's bus")
    assert response.status_code == 200
    assert response.json()["reply"].startswith("you said: through the plugin's bus")
    assert plugin.bus.seen == ["through the plugin's bus"]


async def test_without_a_bus_plugin_the_memory_bus_is_the_in_process_one(start_gateway: Any):
    plugin = CountingPlugin()  # answers only for its own kind
    runner = await start_gateway(["webhook"], {"webhook": {"port": 0}},
                                 objects=[("counting", plugin)])
    assert plugin.bus is None
    assert isinstance(runner.bus, GatewayBus)
    assert runner.bus is runner.local
    assert (await _post(runner, "hi")).status_code == 200


async def test_a_kind_no_plugin_makes_refuses_to_start(start_gateway: Any):
    with pytest.raises(ConfigError, match=r"\$\.bus\.kind: no loaded plugin claims \[bus\] "
                                          r"kind 'nats'.*\+nats"):
        await start_gateway(["webhook"], {"webhook": {"port": 0}}, bus={"kind": "nats"})


class BrokenPlugin:
    def __init__(self, answer: Any = None) -> None:
        self.answer = answer

    @hookimpl
    def lich_make_bus(self, config: Any, local: GatewayBus) -> Any:
        if self.answer is None:
            raise RuntimeError("no broker here")
        return self.answer


async def test_a_failing_bus_plugin_is_a_configuration_error_naming_it(start_gateway: Any):
    with pytest.raises(ConfigError, match=r"lich_make_bus of plugin 'broken' failed: "
                                          r".*no broker here"):
        await start_gateway(["webhook"], {"webhook": {"port": 0}},
                            objects=[("broken", BrokenPlugin())])


async def test_an_answer_that_is_not_a_bus_is_refused(start_gateway: Any):
    with pytest.raises(ConfigError, match="returned str, not a bus"):
        await start_gateway(["webhook"], {"webhook": {"port": 0}},
                            objects=[("broken", BrokenPlugin("a string"))])


@pytest.mark.parametrize(("bus", "problem"), [
    ("memory", "$.bus: expected a table, got string"),
    ({"kind": 3}, "$.bus.kind: expected a kind name, got integer"),
    ({"kind": " "}, "$.bus.kind: must not be empty"),
    ({"partitions": 4}, "$.bus.partitions: unknown key (the memory bus has no settings)"),
])
def test_the_bus_table_is_checked(tmp_path: Any, bus: Any, problem: str):
    host = PluginHost(work_dir=tmp_path)
    host.load(["gateway"])  # it claims [bus] for the memory bus (the default kind)
    assert problem in host.check_config(make_test_config(tmp_path, bus=bus))


def test_another_kind_is_left_to_its_plugin(tmp_path: Any):
    host = PluginHost(work_dir=tmp_path)
    host.load(["gateway", "nats"])
    config = make_test_config(tmp_path, bus={"kind": "nats", "partitions": 4})
    assert host.check_config(config) == []
