"""The admission id on every line logged while a message is handled, on the nats bus:
the consumer's, the in-process bus's, a plugin's own logger's and a tool's."""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lich.agent import Agent
from lich.gateway.bus import GatewayBus, InboundMessage
from lich.hooks import RunInfo, hookimpl
from lich.logcontext import AdmissionFilter, ServiceFormatter
from lich.nats_bus.bus import NatsBus
from lich.nats_bus.settings import NatsBusSettings, admission_token
from lich.testing import ScriptedChat, make_test_config, tool_loop_responder
from lich.testing.contracts import contract_responder
from lich.testing.nats import NatsServer
from lich.tools import Tool
from lich.types import ToolResult

WAIT_S = 30.0


def logging_tool(args: Any, ctx: Any) -> ToolResult:
    """A tool that logs on its own logger; run in a worker thread, as plain tools are."""
    logging.getLogger("ops_test_tool").warning("the tool ran")
    return ToolResult(True, "logged")


class LoggingPlugin:
    """A plugin that logs on a logger of its own (not under ``lich``) when a run starts."""

    log = logging.getLogger("ops_test_plugin")

    @hookimpl
    def lich_run_start(self, run: RunInfo) -> None:
        self.log.warning("run %s started", run.run_id)


@pytest.fixture
def service_lines() -> Iterator[io.StringIO]:
    """Every record of the process, formatted as ``lich worker`` writes them."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(ServiceFormatter())
    handler.addFilter(AdmissionFilter())
    root, gateway = logging.getLogger(), logging.getLogger("lich.gateway")
    level = gateway.level
    gateway.setLevel(logging.INFO)
    root.addHandler(handler)
    try:
        yield out
    finally:
        root.removeHandler(handler)
        gateway.setLevel(level)


async def test_a_plugins_and_a_tools_own_log_lines_during_a_run_carry_the_admission_id(
    nats_server: NatsServer, tmp_path: Path, service_lines: io.StringIO,
    make_nats_bus: Callable[..., Any],
):
    ingress: NatsBus = await make_nats_bus(ScriptedChat(responder=contract_responder),
                                           consume=False)
    agent = Agent(make_test_config(tmp_path / "worker"),
                  chat=ScriptedChat(responder=tool_loop_responder(1, tool="log_it", args={},
                                                                  final="logged it")))
    agent.host.register_object(LoggingPlugin(), "logging-plugin")
    agent.tools.register(Tool("log_it", "logs a line", {"type": "object"}, logging_tool))
    worker = NatsBus(NatsBusSettings(servers=(nats_server.url,), partitions=4, consume=True),
                     GatewayBus(agent))
    await worker.start()
    try:
        reply = await asyncio.wait_for(
            ingress.handle(InboundMessage("test", "c1", "u", "hello", "key-1")), WAIT_S)
        assert reply.kind == "reply"
    finally:
        await worker.drain(0)
        await agent.aclose()
    assert reply.text == "logged it"
    admission = admission_token("test", "c1", "key-1")
    lines = service_lines.getvalue().splitlines()
    tool = [line for line in lines if "the tool ran" in line]
    assert tool == [tool[0]], lines
    assert f"level=WARNING admission={admission} the tool ran" in tool[0]
    plugin = [line for line in lines if "started" in line and "level=WARNING" in line]
    assert len(plugin) == 1, lines
    assert f"level=WARNING admission={admission} run " in plugin[0]
    # The in-process bus's own line of the turn, logged by the worker: the same id.
    run_end = [line for line in lines if "event=run_end" in line]
    assert len(run_end) == 1, lines
    assert f"admission={admission}" in run_end[0]
    # Lines outside any message carry none.
    ready = [line for line in lines if "event=nats_bus_ready" in line]
    assert ready
    assert all("admission=" not in line for line in ready)
