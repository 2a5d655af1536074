"""``lich cluster status`` against a real broker, as a real process."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lich_env import lich_env

from lich.gateway.bus import InboundMessage
from lich.nats_bus.bus import NatsBus
from lich.nats_bus.settings import partition_of
from lich.testing import async_wait_for
from lich.testing.contracts import ContractModel
from lich.testing.nats import NatsServer
from lich.testing.ports import refused_port

WAIT_S = 30.0


def write_config(work: Path, bus: str, store: str = "") -> None:
    (work / ".lich").mkdir(parents=True, exist_ok=True)
    (work / ".lich" / "config.toml").write_text(
        f'plugins = ["+nats"]\n[bus]\nkind = "nats"\n{bus}{store}', encoding="utf-8")


async def status(work: Path, home: Path, *args: str) -> tuple[int, str, str]:
    """``lich cluster status ARGS`` in ``work``: exit code, stdout, stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "lich", "--work-dir", str(work), "cluster", "status", *args,
        cwd=work, env=lich_env(home), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), WAIT_S)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_status_shows_partitions_consumers_processes_leases_and_the_store(
    tmp_path: Path, nats_server: NatsServer, make_nats_bus: Callable[..., Any],
):
    model = ContractModel()
    ingress: NatsBus = await make_nats_bus(model, consume=False, lease_ttl_s=4)
    worker: NatsBus = await make_nats_bus(model, concurrency=3, lease_ttl_s=4)
    lease = await ingress.lease("telegram")
    await asyncio.wait_for(lease.acquire(), WAIT_S)
    held = await ingress.submit(InboundMessage("test", "busy-chat", "u", "hold one"))
    await async_wait_for(lambda: "hold one" in model.started, WAIT_S, "the held run")
    queued = await ingress.submit(InboundMessage("test", "busy-chat", "u", "behind it"))
    busy = partition_of("test", "busy-chat", 4)
    work = tmp_path / "status"
    write_config(work, f'servers = ["{nats_server.url}"]\npartitions = 4\n')

    async def announced_running() -> dict[str, Any] | None:
        # Entries are renewed every quarter of lease_ttl_s (1 s here): once the worker's
        # says it runs the held message, the report is complete.
        code, out, err = await status(work, tmp_path, "--json")
        assert code == 0, err
        report: dict[str, Any] = json.loads(out)
        mine = [p for p in report["processes"] if p["id"] == worker.ingress_id]
        return report if mine and mine[0]["in_flight"] == 1 else None

    report = await async_wait_for(announced_running, WAIT_S, "the worker's entry to say 1 run")
    assert report["stream"]["name"] == "LICH_INBOUND"
    assert report["stream"]["partitions"] == 4
    rows = {r["partition"]: r for r in report["partitions"]}
    assert sorted(rows) == [0, 1, 2, 3]
    # The held message and the one behind it are both in the work queue; one is out.
    assert (rows[busy]["messages"], rows[busy]["ack_pending"], rows[busy]["pending"]) == \
        (2, 1, 1)
    assert all(rows[p]["consumer"] for p in rows)
    assert all(rows[p]["messages"] == 0 for p in rows if p != busy)
    seen = {p["id"]: p for p in report["processes"]}
    assert set(seen) == {ingress.ingress_id, worker.ingress_id}
    me = seen[worker.ingress_id]
    assert (me["role"], me["pid"], me["concurrency"], me["in_flight"]) == \
        ("ingress+worker", os.getpid(), 3, 1)
    assert seen[ingress.ingress_id]["concurrency"] is None
    assert me["last_seen"] >= me["started"]
    assert report["leases"] == [{"lease": "telegram", "holder": ingress.ingress_id}]
    assert report["session_store"]["reachable"] is True
    assert report["session_store"]["error"] is None

    code, out, err = await status(work, tmp_path)
    assert code == 0, err
    assert "LICH_INBOUND: 2 messages, 4 partitions" in out
    assert ": reachable" in out
    assert "ack pending" in out
    assert "ingress+worker" in out
    assert f"pid {os.getpid()}" in out  # the lease's holder, by host and pid

    model.release("one")
    assert (await asyncio.wait_for(held, WAIT_S)).kind == "reply"
    assert (await asyncio.wait_for(queued, WAIT_S)).kind == "reply"
    await lease.release()
    # A process that stops takes its entry away (one that dies: it expires).
    await worker.drain(0)
    code, out, _ = await status(work, tmp_path, "--json")
    report = json.loads(out)
    assert [p["id"] for p in report["processes"]] == [ingress.ingress_id]
    assert report["leases"] == []
    assert report["stream"]["messages"] == 0


async def test_an_unreachable_store_is_reported_through_its_plugin(
    tmp_path: Path, nats_server: NatsServer,
):
    work = tmp_path / "status"
    with refused_port() as port:
        write_config(work, f'servers = ["{nats_server.url}"]\n',
                     '[session_store]\nkind = "postgres"\n'
                     f'dsn = "postgresql://lich@127.0.0.1:{port}/lich"\n'
                     'connect_timeout_s = 1\nreconnect_s = 0\n')
        code, out, err = await status(work, tmp_path, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["stream"] is None  # nothing started on this broker yet: nothing made
    assert report["processes"] == []
    store = report["session_store"]
    assert store["reachable"] is False
    assert store["store"].startswith("postgres lich@127.0.0.1:")
    assert "unreachable" in store["error"]


async def test_an_unreachable_broker_is_exit_1_with_the_reason(tmp_path: Path):
    work = tmp_path / "status"
    with refused_port() as port:
        write_config(work, f'servers = ["nats://127.0.0.1:{port}"]\nconnect_timeout_s = 1\n')
        code, out, err = await status(work, tmp_path)
    assert code == 1
    assert out == ""
    assert f"the nats bus cannot reach nats://127.0.0.1:{port}" in err


async def test_another_bus_kind_is_a_usage_error(tmp_path: Path):
    work = tmp_path / "status"
    (work / ".lich").mkdir(parents=True)
    (work / ".lich" / "config.toml").write_text('plugins = ["+nats"]\n', encoding="utf-8")
    code, _, err = await status(work, tmp_path)
    assert code == 2
    assert "lich cluster status reads the nats bus; [bus] kind is 'memory'" in err


async def test_a_process_whose_entry_is_not_renewed_is_unresponsive_not_serving(
    tmp_path: Path, nats_server: NatsServer, make_nats_bus: Callable[..., Any],
):
    # A SIGKILLed worker cannot withdraw its entry: what it last announced (running one
    # message) stays until the entry expires. Here its last renewal is a minute old while
    # it promised one every second: it is unresponsive, whatever it says it runs.
    import time

    import nats

    worker: NatsBus = await make_nats_bus(ContractModel(), lease_ttl_s=60)
    await async_wait_for(lambda: worker._processes_kv is not None, WAIT_S, "the announcement")
    dead = {**worker.presence(), "id": "killed", "pid": 999_999, "in_flight": 1,
            "renew_s": 1.0, "started": time.time() - 120, "last_seen": time.time() - 60}
    nc = await nats.connect(nats_server.url)
    try:
        kv = await nc.jetstream().key_value("LICH_INBOUND_PROCESSES")
        await kv.put("killed", json.dumps(dead).encode())
    finally:
        await nc.close()
    work = tmp_path / "status"
    write_config(work, f'servers = ["{nats_server.url}"]\npartitions = 4\n')

    code, out, err = await status(work, tmp_path, "--json")
    assert code == 0, err
    states = {p["id"]: p["state"] for p in json.loads(out)["processes"]}
    assert states == {"killed": "unresponsive", worker.ingress_id: "serving"}

    code, out, err = await status(work, tmp_path)
    assert code == 0, err
    (row,) = [line for line in out.splitlines() if "999999" in line]
    assert row.split()[-1] == "unresponsive"
    assert "serving" not in row
