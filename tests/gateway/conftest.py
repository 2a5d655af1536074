"""Shared pieces of the gateway tests: a scripted model that uses the builtin
``read_file`` tool, a gate to hold runs open, and factories for buses and runners."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from lich.agent import Agent, load_plugins
from lich.events import EventHandler
from lich.gateway.approvals import Notify
from lich.gateway.bus import BusReply, GatewayBus, InboundMessage, ParkedReply
from lich.gateway.runner import GatewayRunner
from lich.testing import Reply, ScriptedChat, ScriptRequest, Step, make_test_config
from lich.testing.contracts import ContractModel
from lich.types import ToolCall, UserMessage

NOTES = "lich is a plugin-first agent harness\n"
EMOJI = "\U0001F600"  # outside the BMP: a surrogate pair in UTF-16


def gateway_responder(request: ScriptRequest) -> Step:
    """What the scripted model says, by the shape of the latest user message.

    * ``read <path>`` — call ``read_file``, then answer with what it returned;
    * ``long <n>`` — answer ``n`` lines of 70 characters;
    * ``emoji <n>`` — answer ``n`` emoji (two UTF-16 code units each), no spaces;
    * ``slow <seconds> <tag>`` — answer ``done <tag>`` after a delay;
    * anything else — echo it, with the earlier user messages of the conversation.
    """
    text = request.last_user()
    results = request.tool_results_since_user()
    if text.startswith("read "):
        if not results:
            return Reply(tool_calls=(ToolCall("call_1", "read_file", {"path": text[5:].strip()}),))
        return Reply(f"the file says: {results[0].content.strip()}")
    if text.startswith("long "):
        count = int(text.split()[1])
        return Reply("\n".join(f"line {i:04d} " + "x" * 60 for i in range(count)))
    if text.startswith("emoji "):
        return Reply(EMOJI * int(text.split()[1]))
    if text.startswith("slow "):
        _, seconds, tag = text.split(maxsplit=2)
        return Reply(f"done {tag}", delay_s=float(seconds))
    earlier = [m.content for m in request.messages if isinstance(m, UserMessage)][:-1]
    return Reply(f"you said: {text} | earlier: {' / '.join(earlier) or '-'}")


class GatedChat(ContractModel):
    """The contract suites' gated model on the gateway tests' script: ``hold <name>`` waits
    until the test opens ``gate(name)``; the rest is :func:`gateway_responder`."""

    def __init__(self, inner: ScriptedChat | None = None) -> None:
        super().__init__(inner or ScriptedChat(responder=gateway_responder))


class ForwardingBus:
    """A :class:`lich.gateway.MessageBus` that hands everything to the in-process bus;
    tests subclass it to put something between the adapters and the runs."""

    def __init__(self, local: GatewayBus) -> None:
        self.local = local

    @property
    def closed(self) -> bool:
        return self.local.closed

    @property
    def in_flight(self) -> int:
        return self.local.in_flight

    def session_id_for(self, platform: str, chat_id: str) -> str:
        return self.local.session_id_for(platform, chat_id)

    async def start(self) -> None:
        await self.local.start()

    async def submit(self, message: InboundMessage, *, on_event: EventHandler | None = None,
                     notify: Notify | None = None) -> asyncio.Future[BusReply]:
        return await self.local.submit(message, on_event=on_event, notify=notify)

    async def handle(self, message: InboundMessage, *, on_event: EventHandler | None = None,
                     notify: Notify | None = None) -> BusReply:
        return await (await self.submit(message, on_event=on_event, notify=notify))

    async def park(self, pending: asyncio.Future[BusReply], session_id: str) -> str:
        return await self.local.park(pending, session_id)

    async def parked(self, status_id: str) -> ParkedReply:
        return await self.local.parked(status_id)

    def close(self) -> None:
        self.local.close()

    def cancel_runs(self) -> None:
        self.local.cancel_runs()

    async def drain(self, grace_s: float) -> bool:
        return await self.local.drain(grace_s)


@pytest.fixture
def work_dir(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text(NOTES, encoding="utf-8")
    return tmp_path


@pytest.fixture
def make_agent(work_dir: Path) -> Callable[..., Agent]:
    """``make_agent(chat=None, plugins=("builtin_tools",), **config)`` in the work dir."""

    def build(
        chat: Any = None, plugins: Sequence[str] = ("builtin_tools",), **config: Any
    ) -> Agent:
        cfg = make_test_config(work_dir, plugins=tuple(plugins), **config)
        return Agent(cfg, chat=chat or ScriptedChat(responder=gateway_responder))

    return build


@pytest.fixture
def make_bus(make_agent: Callable[..., Agent]) -> Callable[..., GatewayBus]:
    """``make_bus(chat=None, history_cap=40, max_conversations=200, queue_limit=5, **config)``."""

    def build(chat: Any = None, *, history_cap: int = 40, max_conversations: int = 200,
              queue_limit: int = 5, **config: Any) -> GatewayBus:
        return GatewayBus(make_agent(chat, **config), history_cap=history_cap,
                          max_conversations=max_conversations, queue_limit=queue_limit)

    return build


def open_webhook(gateway: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    """``gateway`` with its webhook ``open`` (served without a token on loopback) when the
    test sets no token: these tests are about the webhook's answers, and tokenless is
    what they drive. A token is generated otherwise (tests/gateway/test_webhook_token.py)."""
    webhook = dict(gateway.get("webhook") or {})
    if not env.get(webhook.get("token_env", "LICH_GATEWAY_TOKEN")):
        webhook.setdefault("open", True)
    return {**gateway, "webhook": webhook}


@pytest.fixture
async def start_gateway(work_dir: Path) -> AsyncIterator[Callable[..., Any]]:
    """``await start_gateway(platforms, gateway={...}, env={...}, chat=None, objects=())``
    builds and starts a :class:`GatewayRunner` (builtin tools + the gateway plugin); every
    runner is stopped after the test."""
    runners: list[GatewayRunner] = []

    async def start(
        platforms: Sequence[str],
        gateway: dict[str, Any] | None = None,
        *,
        env: dict[str, str] | None = None,
        chat: Any = None,
        objects: Sequence[tuple[str, object]] = (),
        **config: Any,
    ) -> GatewayRunner:
        cfg = make_test_config(work_dir, plugins=("builtin_tools", "gateway"),
                               gateway=open_webhook(gateway or {}, env or {}), **config)
        host = load_plugins(cfg, objects)
        runner = GatewayRunner(cfg, platforms, host=host,
                               chat=chat or ScriptedChat(responder=gateway_responder),
                               env=env or {})
        await runner.start()
        runners.append(runner)
        return runner

    yield start
    for runner in runners:
        await runner.stop(grace_s=2)


@pytest.fixture
def gateway_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Capture the gateway's structured lines (``lich.gateway`` at DEBUG)."""
    caplog.set_level(logging.DEBUG, logger="lich.gateway")
    return caplog


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[dict[str, str]]:
    """The structured log lines of ``event=<name>``, parsed."""
    from lich.gateway.formatting import parse_logfmt

    out = []
    for record in caplog.records:
        message = record.getMessage()
        if message.startswith("gateway "):
            fields = parse_logfmt(message[len("gateway "):])
            if fields.get("event") == name:
                out.append(dict(fields))
    return out
