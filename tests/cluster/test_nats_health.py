"""``lich worker --health``: liveness and readiness over real HTTP, against a real worker."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from lich_env import lich_env

from lich.gateway.bus import InboundMessage
from lich.nats_bus.bus import NatsBus
from lich.testing import Reply, ScriptedModel, ScriptedServer, ScriptRequest, Step, async_wait_for
from lich.testing.contracts import ContractModel, contract_responder
from lich.testing.nats import NatsServer
from lich.testing.ports import reserve_port

from .conftest import workers

pytestmark = [
    pytest.mark.system,  # lich processes against a real broker: slow, run by .ci/run
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals"),
]

WAIT_S = 60.0


def responder(request: ScriptRequest) -> Step:
    """``slow <tag>`` answers ``done <tag>`` after long enough to watch the worker drain."""
    text = request.last_user()
    if text.startswith("slow "):
        return Reply(f"done {text[5:]}", delay_s=3.0)
    return contract_responder(request)


async def test_liveness_and_readiness_follow_the_broker_and_the_drain(
    tmp_path: Path, nats_server: NatsServer, make_nats_bus: Callable[..., Any],
):
    model = ScriptedServer(ScriptedModel(responder=responder)).start()
    reserved = reserve_port()  # the worker binds it: reserved, not "free right now"
    try:
        work = tmp_path / "work"
        (work / ".lich").mkdir(parents=True)
        (work / ".lich" / "config.toml").write_text(
            'stream = false\nplugins = ["+nats"]\n'
            '[[providers]]\nkind = "openai_compat"\nname = "scripted"\nmodel = "m"\n'
            f'base_url = "{model.base_url}"\n'
            f'[bus]\nkind = "nats"\nservers = ["{nats_server.url}"]\npartitions = 2\n',
            encoding="utf-8")
        port = reserved.port
        base = f"http://127.0.0.1:{port}"
        async with workers(work, lich_env(tmp_path), 1, "--grace", "30",
                           "--health", f"127.0.0.1:{port}") as (worker,), \
                httpx.AsyncClient(timeout=10) as client:

            async def readiness(status: int, reason: str = "") -> dict[str, Any] | None:
                response = await client.get(f"{base}/readyz")
                body: dict[str, Any] = response.json()
                if response.status_code != status:
                    return None
                if reason and not any(reason in r for r in body.get("reasons", [])):
                    return None
                return body

            live = await client.get(f"{base}/livez")
            assert live.status_code == 200
            assert live.json()["status"] == "alive"
            ready = await async_wait_for(lambda: readiness(200), WAIT_S, "the worker ready")
            assert ready == {"status": "ready", "draining": False, "checks": {
                "broker": True, "consumers": True, "store": True, "accepting": True}}

            # The broker dies: not ready (still alive); back once it is.
            nats_server.kill()
            down = await async_wait_for(lambda: readiness(503, "broker"), WAIT_S,
                                        "readiness to notice the broker is gone")
            assert down["status"] == "not ready"
            assert down["checks"]["broker"] is False
            assert down["reasons"] == ["not connected to the broker"]
            assert (await client.get(f"{base}/livez")).status_code == 200
            nats_server.start()
            await async_wait_for(lambda: readiness(200), WAIT_S, "the worker ready again")

            # SIGTERM with a run in flight: not ready while it drains, and the run ends.
            ingress: NatsBus = await make_nats_bus(ContractModel(), consume=False,
                                                   partitions=2)
            pending = await ingress.submit(InboundMessage("test", "drain", "u", "slow job"))
            await async_wait_for(lambda: worker.saw("chat=drain"), WAIT_S,
                                 lambda: f"the worker to take the message: {worker.lines}")
            worker.process.send_signal(signal.SIGTERM)
            draining = await async_wait_for(lambda: readiness(503, "draining"), WAIT_S,
                                            "readiness to say the worker drains")
            assert draining["draining"] is True
            assert draining["checks"]["accepting"] is False
            assert (await client.get(f"{base}/livez")).status_code == 200
            reply = await asyncio.wait_for(pending, WAIT_S)
            assert (reply.kind, reply.text) == ("reply", "done job")
            assert await asyncio.wait_for(worker.process.wait(), WAIT_S) == 0
        with pytest.raises(httpx.ConnectError):  # gone with the worker
            await httpx.AsyncClient().get(f"{base}/livez")
    finally:
        model.stop()
        reserved.release()


class UnreachableStore:
    """A session store whose database is gone: every read fails as the postgres one does."""

    def exists(self, session_id: str) -> bool:
        from lich.sessions import StoreError

        raise StoreError("the session store (postgres lich@db:5432/lich) is unreachable")


class ReadyBus:
    """What readiness reads of a bus: connected, consuming, not closed."""

    connected = True
    consuming = True
    closed = False


async def test_an_unreachable_store_makes_the_worker_not_ready():
    from lich.nats_bus.health import HealthServer

    probes = HealthServer(ReadyBus(), UnreachableStore(), "127.0.0.1", 0)  # type: ignore[arg-type]
    await probes.start()
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            url = f"http://127.0.0.1:{probes.port}"

            async def not_ready() -> httpx.Response | None:
                response = await client.get(f"{url}/readyz")
                return response if "unreachable" in response.text else None

            response = await async_wait_for(not_ready, WAIT_S, "the store check to fail")
            assert response.status_code == 503
            assert response.json()["reasons"] == [
                "the session store is unreachable: StoreError: the session store "
                "(postgres lich@db:5432/lich) is unreachable"]
            assert response.json()["checks"] == {
                "broker": True, "consumers": True, "store": False, "accepting": True}
            assert response.json()["draining"] is False
            assert (await client.get(f"{url}/livez")).status_code == 200
    finally:
        await probes.stop()


@pytest.mark.parametrize(("health", "postgres"), [(False, False), (True, True)])
async def test_a_worker_with_nothing_in_flight_stops_without_waiting_out_its_grace(
    tmp_path: Path, nats_server: NatsServer, make_nats_bus: Callable[..., Any], health: bool,
    postgres: bool, request: pytest.FixtureRequest,
):
    # A grace period far longer than the test waits: a worker that waited it out with
    # nothing to finish would fail here. It ran a message first, so what a turn leaves
    # behind (a reply on its way, a session writer, a heartbeat) is in play.
    model = ScriptedServer(ScriptedModel(responder=responder)).start()
    reserved = reserve_port()
    try:
        work = tmp_path / "work"
        (work / ".lich").mkdir(parents=True)
        (work / ".lich" / "config.toml").write_text(
            'stream = false\nplugins = ["+nats"]\n'
            '[[providers]]\nkind = "openai_compat"\nname = "scripted"\nmodel = "m"\n'
            f'base_url = "{model.base_url}"\n'
            f'[bus]\nkind = "nats"\nservers = ["{nats_server.url}"]\npartitions = 2\n'
            + ('[session_store]\nkind = "postgres"\ndsn_env = "LICH_POSTGRES_DSN"\n'
               if postgres else ''),
            encoding="utf-8")
        env = lich_env(tmp_path)
        if postgres:
            env["LICH_POSTGRES_DSN"] = request.getfixturevalue("lich_postgres_dsn")
        # Reserved for the worker to bind (lich.testing.ports), not "free right now".
        extra = ("--health", f"127.0.0.1:{reserved.port}") if health else ()
        async with workers(work, env, 1, "--grace", "3600",
                           *extra) as (worker,):
            ingress: NatsBus = await make_nats_bus(ContractModel(), consume=False,
                                                   partitions=2)
            pending = await ingress.submit(InboundMessage("test", "idle", "u", "hello"))
            reply = await asyncio.wait_for(pending, WAIT_S)
            assert reply.kind == "reply"
            worker.process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(worker.process.wait(), WAIT_S) == 0
            assert worker.saw("event=worker_stopped clean=True")
    finally:
        model.stop()
        reserved.release()
