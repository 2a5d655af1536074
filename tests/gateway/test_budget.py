"""`[gateway] max_cost_usd_per_conversation_day`: a person over their daily budget — in
whatever chat, old or new — gets a polite refusal (the webhook platform, real HTTP on
127.0.0.1, and fake platform messages through the runner's bus)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from lich.config import ConfigError
from lich.gateway.bus import BUDGET_TEXT, GatewayBus, InboundMessage
from lich.gateway.config import parse_gateway_config
from lich.testing import Reply, ScriptedChat, ScriptRequest
from lich.types import Usage


class ThreeCents:
    """Prices every model call at $0.03."""

    def lich_price_call(self) -> float:
        return 0.03


class Unpriced:
    """A pricing plugin that knows no model."""

    def lich_price_call(self) -> None:
        return None


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as c:
        yield c


async def _webhook(start_gateway: Callable[..., Any], pricer: object,
                   limit: float = 0.05) -> tuple[Any, str]:
    gateway = {"webhook": {"port": 0}, "max_cost_usd_per_conversation_day": limit}
    runner = await start_gateway(["webhook"], gateway, objects=[("pricer", pricer)])
    return runner, f"http://127.0.0.1:{runner.adapter('webhook').port}"


async def _say(client: httpx.AsyncClient, url: str, text: str, chat: str = "c1",
               user: str = "u1") -> Any:
    return await client.post(f"{url}/message",
                             json={"text": text, "chat_id": chat, "user_id": user})


async def test_a_person_over_their_daily_budget_is_refused_politely(
    start_gateway: Any, client: httpx.AsyncClient
) -> None:
    runner, url = await _webhook(start_gateway, ThreeCents())
    first = await _say(client, url, "one")
    second = await _say(client, url, "two")  # $0.03 spent < $0.05: still answered
    assert (first.status_code, second.status_code) == (200, 200)
    assert second.json()["reply"].startswith("you said: two")

    refused = await _say(client, url, "three")  # $0.06 spent
    assert refused.status_code == 429
    assert refused.json()["error"] == BUDGET_TEXT
    # Until the next UTC midnight, not "in a few seconds".
    assert 0 < int(refused.headers["retry-after"]) <= 86_400
    assert len(runner.chat.requests) == 2  # the refused message reached no model
    # The budget is the person's: a new chat id of theirs is refused too...
    assert (await _say(client, url, "hello", chat="c2")).status_code == 429
    # ...while another person in the same chat has a budget of their own.
    assert (await _say(client, url, "hello", user="u2")).status_code == 200
    # /new starts the conversation over, not its budget.
    assert (await _say(client, url, "/new again")).status_code == 429
    assert len(runner.chat.requests) == 3


async def test_the_spend_survives_a_restart(
    start_gateway: Any, client: httpx.AsyncClient
) -> None:
    runner, url = await _webhook(start_gateway, ThreeCents())
    for text in ("one", "two"):
        assert (await _say(client, url, text)).status_code == 200
    await runner.stop(grace_s=2)

    _, url = await _webhook(start_gateway, ThreeCents())
    refused = await _say(client, url, "after the restart")
    assert refused.status_code == 429
    assert refused.json()["error"] == BUDGET_TEXT


async def test_an_unknown_cost_counts_as_over_the_budget(
    start_gateway: Any, client: httpx.AsyncClient
) -> None:
    _, url = await _webhook(start_gateway, Unpriced())
    assert (await _say(client, url, "one")).status_code == 200
    refused = await _say(client, url, "two")
    assert (refused.status_code, refused.json()["error"]) == (429, BUDGET_TEXT)


class PerToken:
    """Prices a call at $0.0001 per token: what it costs depends on its usage."""

    def lich_price_call(self, usage: Usage) -> float:
        return usage.total_tokens * 0.0001


async def test_answers_without_usage_are_counted_from_estimated_tokens(
    start_gateway: Any, client: httpx.AsyncClient
) -> None:
    # A model server that reports no usage: each answer is still priced from its
    # estimated tokens (chars / 4), so the budget fills up instead of staying at $0.
    def no_usage(request: ScriptRequest) -> Reply:
        return Reply("w" * 2000, usage=Usage())

    chat = ScriptedChat(responder=no_usage)
    gateway = {"webhook": {"port": 0}, "max_cost_usd_per_conversation_day": 0.05}
    runner = await start_gateway(["webhook"], gateway, chat=chat,
                                 objects=[("pricer", PerToken())])
    url = f"http://127.0.0.1:{runner.adapter('webhook').port}"
    assert (await _say(client, url, "one")).status_code == 200  # ~500 tokens: $0.05
    refused = await _say(client, url, "two")
    assert (refused.status_code, refused.json()["error"]) == (429, BUDGET_TEXT)
    assert len(chat.requests) == 1


async def test_only_today_counts(make_agent: Callable[..., Any]) -> None:
    agent = make_agent()
    agent.host.register_object(ThreeCents(), "pricer")
    bus = GatewayBus(agent, max_cost_usd_per_day=0.05)
    message = InboundMessage("webhook", "c1", "u", "hi")
    ledger = bus.ledger_id_for("webhook", "u")
    # Yesterday's runs, as the person's ledger recorded them.
    writer = agent.sessions.open(ledger)
    yesterday = time.time() - 86_400
    for _ in range(3):
        writer.append("meta", event="spend", cost_usd=0.04, session="elsewhere")
    writer.close()
    path = agent.sessions.path_for(ledger)
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    for record in records:
        record["ts"] = yesterday
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")

    assert (await bus.handle(message)).kind == "reply"
    assert (await bus.handle(message)).kind == "reply"
    assert (await bus.handle(message)).kind == "budget"


async def test_a_new_chat_or_group_gets_no_fresh_budget_and_a_restart_keeps_it(
    start_gateway: Any,
) -> None:
    """Fake platform messages through the runner's bus: one person in a direct chat,
    a group and a chat id never seen before, across a restart of the gateway."""
    gateway = {"webhook": {"port": 0}, "max_cost_usd_per_conversation_day": 0.05}
    runner = await start_gateway(["webhook"], gateway, objects=[("pricer", ThreeCents())])
    assert runner.bus is not None
    dm = InboundMessage("telegram", "1001", "alice", "one")
    group = InboundMessage("telegram", "-2002", "alice", "two")
    assert (await runner.bus.handle(dm)).kind == "reply"
    assert (await runner.bus.handle(group)).kind == "reply"  # $0.06: over now
    for chat in ("1001", "-2002", "-3003", "4004"):
        refused = await runner.bus.handle(InboundMessage("telegram", chat, "alice", "more"))
        assert refused.kind == "budget", chat
    # The same sender id on another platform is another person.
    assert (await runner.bus.handle(InboundMessage("discord", "1001", "alice", "x"))).kind \
        == "reply"
    # Bob in alice's group still has his budget.
    assert (await runner.bus.handle(InboundMessage("telegram", "-2002", "bob", "hi"))).kind \
        == "reply"
    await runner.stop(grace_s=2)

    again = await start_gateway(["webhook"], gateway, objects=[("pricer", ThreeCents())])
    assert again.bus is not None
    fresh = InboundMessage("telegram", "5005", "alice", "after the restart")
    assert (await again.bus.handle(fresh)).kind == "budget"
    assert (await again.bus.handle(InboundMessage("telegram", "5005", "bob", "hi"))).kind \
        == "reply"


def test_a_daily_budget_without_prices_is_a_config_error(make_agent: Callable[..., Any]) -> None:
    with pytest.raises(ConfigError) as info:
        GatewayBus(make_agent(), max_cost_usd_per_day=1.0)
    assert "max_cost_usd_per_conversation_day" in info.value.problems[0]
    assert "prices" in info.value.problems[0]


@pytest.mark.parametrize("value", [0, -1, "lots"])
def test_the_daily_budget_key_is_checked(value: Any) -> None:
    with pytest.raises(ConfigError) as info:
        parse_gateway_config({"max_cost_usd_per_conversation_day": value})
    assert info.value.problems[0].startswith("$.gateway.max_cost_usd_per_conversation_day")
    assert parse_gateway_config({"max_cost_usd_per_conversation_day": 2.5}
                                ).max_cost_usd_per_conversation_day == 2.5


async def test_a_ledger_write_that_loses_its_claim_is_tried_again(
    make_agent: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fenced store's writer can lose the ledger to another process's: a fresh one is
    opened, so the spend is on record for the next start."""
    agent = make_agent()
    agent.host.register_object(ThreeCents(), "pricer")
    bus = GatewayBus(agent, max_cost_usd_per_day=0.05)
    ledger = bus.ledger_id_for("webhook", "u")
    real_open = agent.sessions.open
    failures = [0]

    def flaky_open(session_id: str | None = None) -> Any:
        if session_id == ledger and failures[0] < 2:
            failures[0] += 1
            raise OSError("claimed by another writer")
        return real_open(session_id)

    monkeypatch.setattr(agent.sessions, "open", flaky_open)
    assert (await bus.handle(InboundMessage("webhook", "c1", "u", "hi"))).kind == "reply"
    assert failures[0] == 2
    spends = [r for r in agent.sessions.read(ledger).records if r.get("event") == "spend"]
    assert [r["cost_usd"] for r in spends] == [0.03]
