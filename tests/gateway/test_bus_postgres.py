"""The gateway's bus on the postgres session store: conversations are resumed from the
database (by a restarted gateway too), ``/new`` is recorded there, and nothing is
written to session files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lich.gateway.bus import GatewayBus, InboundMessage
from lich.postgres.schema import SCHEMA_VERSION

DSN_VAR = "LICH_TEST_POSTGRES_DSN"


def msg(text: str, chat: str = "c1") -> InboundMessage:
    return InboundMessage("test", chat, "u1", text)


async def test_conversations_live_in_postgres(
        make_agent: Callable[..., Any], work_dir: Path, lich_postgres_dsn: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DSN_VAR, lich_postgres_dsn)

    def agent() -> Any:
        return make_agent(plugins=("builtin_tools", "postgres"),
                          session_store={"kind": "postgres", "dsn_env": DSN_VAR})

    first = agent()
    bus = GatewayBus(first)
    await bus.handle(msg("remember banana"))
    other = await bus.handle(msg("hello", chat="c2"))
    second = await bus.handle(msg("what now?"))
    assert second.text == "you said: what now? | earlier: remember banana"
    reset = await bus.handle(msg("/new"))
    assert reset.kind == "reset"
    bus.close()
    await first.aclose()

    restarted = agent()
    again = await GatewayBus(restarted).handle(msg("and now?"))
    assert again.text == "you said: and now? | earlier: -"  # resumed after the reset
    store = restarted.sessions
    contents = store.read(again.session_id)
    assert any(r.get("event") == "reset" for r in contents.records if r["kind"] == "meta")
    said = [r["message"]["content"] for r in contents.records if r["kind"] == "message"]
    assert "remember banana" in said  # the transcript keeps what came before the reset
    assert sorted(store.ids()) == sorted({again.session_id, other.session_id})
    assert not list((work_dir / ".lich" / "sessions").glob("*.jsonl"))
    await restarted.aclose()


async def test_the_gateway_migrates_the_store_at_start(
        start_gateway: Callable[..., Any], lich_postgres_dsn: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import psycopg

    import lich.postgres.plugin as postgres_plugin

    monkeypatch.setenv(DSN_VAR, lich_postgres_dsn)
    runner = await start_gateway(
        ["webhook"], {"webhook": {"port": 0}}, objects=[("postgres", postgres_plugin)],
        session_store={"kind": "postgres", "dsn_env": DSN_VAR})
    assert runner.agent is not None
    # Before any message: the schema is there.
    with psycopg.connect(lich_postgres_dsn) as conn:
        assert conn.execute("SELECT max(version) FROM lich_schema_version").fetchone() == (
            SCHEMA_VERSION,)


async def test_the_gateway_does_not_start_on_an_unreachable_store(
        start_gateway: Callable[..., Any], monkeypatch: pytest.MonkeyPatch,
        refused_port: Callable[[], int]) -> None:
    import lich.postgres.plugin as postgres_plugin
    from lich.gateway.registry import GatewayError

    port = refused_port()
    monkeypatch.setenv(DSN_VAR, f"postgresql://lich:hunter2secret@127.0.0.1:{port}/x")
    with pytest.raises(GatewayError, match=r"the session store is not usable: .* unreachable") as e:
        await start_gateway(
            ["webhook"], {"webhook": {"port": 0}}, objects=[("postgres", postgres_plugin)],
            session_store={"kind": "postgres", "dsn_env": DSN_VAR, "reconnect_s": 0})
    assert "hunter2secret" not in str(e.value)
