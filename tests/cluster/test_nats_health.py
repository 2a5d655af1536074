"""``lich worker --health``: liveness and readiness over real HTTP, against a real worker."""

from __future__ import annotations

import asyncio
import contextlib
import os
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

from .conftest import chats_in_distinct_partitions, workers

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


@pytest.mark.parametrize(("health", "postgres", "compose"),
                         [(False, False, False), (True, True, False), (True, True, True)],
                         ids=["plain", "health-postgres", "compose"])
async def test_a_worker_with_nothing_in_flight_stops_without_waiting_out_its_grace(
    tmp_path: Path, nats_server: NatsServer, make_nats_bus: Callable[..., Any], health: bool,
    postgres: bool, compose: bool, request: pytest.FixtureRequest,
):
    # A grace period far longer than the test waits: a worker that waited it out with
    # nothing to finish would fail here. It ran messages first, so what a turn leaves
    # behind (a reply on its way, a session writer, a heartbeat) is in play. "compose"
    # is docs/cluster/compose.yaml's worker: 32 partitions, --concurrency 8, health
    # port, PostgreSQL, after more messages than slots ran on distinct partitions;
    # every consumer is back in a pending fetch when the signal comes.
    partitions = 32 if compose else 2
    model = ScriptedServer(ScriptedModel(responder=responder)).start()
    reserved = reserve_port()
    try:
        work = tmp_path / "work"
        (work / ".lich").mkdir(parents=True)
        (work / ".lich" / "config.toml").write_text(
            'stream = false\nplugins = ["+nats"]\n'
            '[[providers]]\nkind = "openai_compat"\nname = "scripted"\nmodel = "m"\n'
            f'base_url = "{model.base_url}"\n'
            f'[bus]\nkind = "nats"\nservers = ["{nats_server.url}"]\n'
            f'partitions = {partitions}\n'
            + ('[session_store]\nkind = "postgres"\ndsn_env = "LICH_POSTGRES_DSN"\n'
               if postgres else ''),
            encoding="utf-8")
        env = lich_env(tmp_path)
        if postgres:
            env["LICH_POSTGRES_DSN"] = request.getfixturevalue("lich_postgres_dsn")
        # Reserved for the worker to bind (lich.testing.ports), not "free right now".
        extra = ("--health", f"127.0.0.1:{reserved.port}") if health else ()
        if compose:
            extra += ("--concurrency", "8")
        async with workers(work, env, 1, "--grace", "3600",
                           *extra) as (worker,):
            ingress: NatsBus = await make_nats_bus(ContractModel(), consume=False,
                                                   partitions=partitions)
            chats = (chats_in_distinct_partitions("test", 12, partitions) if compose
                     else ("idle",))
            pending = [await ingress.submit(InboundMessage("test", chat, "u", "hello"))
                       for chat in chats]
            for reply in await asyncio.wait_for(asyncio.gather(*pending), WAIT_S):
                assert reply.kind == "reply"
            worker.process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(worker.process.wait(), WAIT_S) == 0
            assert worker.saw("event=worker_stopped clean=True")
    finally:
        model.stop()
        reserved.release()


def _pid1_available() -> bool:
    import shutil
    import subprocess

    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "-fp", "--mount-proc", "true"],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.parametrize("pid1", [False, True], ids=["process", "pid1"])
async def test_a_worker_stopped_while_it_connects_exits_cleanly_at_once(
    tmp_path: Path, pid1: bool,
) -> None:
    """SIGTERM while the worker still connects to its broker stops it there: exit 0 and
    ``worker_stopped`` (before, the signal had no handler yet — the process died of it,
    and as PID 1 of a container, as in docs/cluster/compose.yaml, it was not delivered
    at all, so the runtime waited out its stop timeout). The "broker" accepts and never
    answers, with an hour's connect timeout: only the signal can end this start-up."""
    if pid1 and not _pid1_available():
        pytest.skip("no unshare of a PID namespace here (needs privileges)")
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read()

    silent = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    work = tmp_path / "work"
    (work / ".lich").mkdir(parents=True)
    (work / ".lich" / "config.toml").write_text(
        'stream = false\nplugins = ["+nats"]\n'
        '[[providers]]\nkind = "openai_compat"\nname = "scripted"\nmodel = "m"\n'
        'base_url = "http://127.0.0.1:9/v1"\n'
        f'[bus]\nkind = "nats"\nservers = ["nats://127.0.0.1:{port}"]\npartitions = 32\n'
        'connect_timeout_s = 3600\n', encoding="utf-8")
    # As PID 1: the first process of a new PID namespace, as a container's entrypoint.
    prefix = ("unshare", "-fp", "--mount-proc") if pid1 else ()
    process = await asyncio.create_subprocess_exec(
        *prefix, sys.executable, "-m", "lich", "--work-dir", str(work), "worker",
        "--concurrency", "8", "--grace", "3600", cwd=work, env=lich_env(tmp_path),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    worker = process.pid
    try:
        await async_wait_for(lambda: bool(held) or process.returncode is not None, WAIT_S,
                             "the worker to connect to the silent broker")
        assert process.returncode is None
        if pid1:  # unshare forked it: the worker is its child (PID 1 inside)
            listing = Path(f"/proc/{process.pid}/task/{process.pid}/children")
            children = await asyncio.to_thread(listing.read_text)
            worker = int(children.split()[0])
        os.kill(worker, signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), WAIT_S)
        text = stderr.decode(errors="replace")
        assert process.returncode == 0, text  # (unshare exits with its child's status)
        assert "event=worker_stopped clean=True started=False" in text
        assert "event=worker_ready" not in text
    finally:
        if process.returncode is None:
            if worker != process.pid:  # SIGKILL reaches a namespace's PID 1 from outside
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker, signal.SIGKILL)
            process.kill()
            await process.wait()
        for writer in held:
            writer.close()
        silent.close()
