"""B3 — gateway load: the webhook against the same load on ``Agent.run`` directly.

Three processes, as in production: the scripted model (:mod:`bench._model_server`,
answering every message with one call of the trivial tool, then ``done``); the
gateway, started as ``python -m lich gateway webhook`` with a config file; and
this process, the load generator — K conversations at once, each posting M
messages to ``/message`` one after the other. The baseline runs the same K × M
messages through one shared ``Agent`` in a process of its own
(:mod:`bench._direct`) with the same config file and the bus's history cap.
Direct and webhook runs alternate. The gateway keeps running across all loads,
so its RSS before and after the largest K gives the memory per conversation.
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import _tool_plugin
from bench._common import (
    Target,
    cpu_seconds,
    fmt_kib,
    fmt_ms,
    fmt_ratio,
    markdown_table,
    percentile,
    rss_kib,
    summary,
)
from bench._model_server import ModelServer
from bench._tool_plugin import TOOL

__all__ = ["Gateway", "gateway_config", "run", "tables", "write_config", "write_json_config"]

HISTORY_CAP = 40  # the bus's default, used by both sides
EXPECT = "done"
TARGET_K = 50


def _clean_env() -> dict[str, str]:
    # A LICH_* variable in the caller's environment (a model, a port) must not change the runs.
    return {k: v for k, v in os.environ.items() if not k.startswith("LICH_")}


def _repo_root() -> str:
    return str(Path(__file__).resolve().parent.parent)


def gateway_config(work: Path, base_url: str, max_conversations: int,
                   connections: int = 100) -> dict[str, Any]:
    """The lich config both sides use, as a dict (B9 adds its bus and store to it).

    ``connections``: how many the load opens at once, all before its first request.
    """
    return {
        "providers": [{"kind": "openai_compat", "name": "bench", "model": "scripted",
                       "base_url": base_url}],
        "plugins": ["openai_compat", "gateway", str(Path(_tool_plugin.__file__).resolve())],
        "stream": False,
        "work_dir": str(work),
        "session_dir": str(work / "sessions"),
        "gateway": {
            "platforms": ["webhook"],
            "tools": [TOOL],
            "history_cap": HISTORY_CAP,
            # Every conversation of the run stays in memory, as in the direct baseline
            # (an evicted one would be reloaded from its session file).
            "max_conversations": max_conversations,
            # The load opens all its connections before sending anything: to the
            # webhook's guard that is a flood of unauthenticated ones, which it would
            # rotate out. A throughput benchmark lifts the limits to its own size.
            # open: the load is the benchmark's own, on loopback, without a token.
            "webhook": {"port": 0, "open": True, "max_connections": connections,
                        "max_unauthenticated": connections},
        },
    }


def write_config(work: Path, base_url: str, max_conversations: int,
                 connections: int = 100) -> Path:
    """:func:`gateway_config` written as the file ``--config`` reads (JSON)."""
    return write_json_config(work, gateway_config(work, base_url, max_conversations,
                                                  connections))


def write_json_config(work: Path, config: dict[str, Any]) -> Path:
    """``config`` in ``work`` as ``lich-bench.json``; its path."""
    path = work / "lich-bench.json"
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    return path


class Gateway:
    """``lich gateway webhook`` as a subprocess; ``url`` once it listens."""

    def __init__(self, config: Path, work: Path) -> None:
        self.config = config
        self.work = work
        self.log_path = work / "gateway.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, timeout_s: float = 60.0) -> Gateway:
        """Start and wait for ``event=webhook_listening`` in its log."""
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "lich", "--config", str(self.config),
                 "--work-dir", str(self.work), "gateway", "webhook"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=_clean_env(),
                cwd=str(self.work),
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
            found = re.search(r"event=webhook_listening \S* ?.*?port=(\d+)", text)
            if found:
                self.url = f"http://127.0.0.1:{found.group(1)}"
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"the gateway exited with {self.proc.returncode}:\n{text}")
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("the gateway did not start listening in time")

    @property
    def pid(self) -> int:
        """The gateway's process id."""
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> int | None:
        """SIGTERM, wait for the graceful stop; returns the exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


class _Connection:
    """One keep-alive HTTP/1.1 connection, just enough to POST JSON and read the answer.

    The load generator shares two cores with the gateway and the model; httpx
    would spend more CPU per request than the gateway's own web layer, and that
    CPU would be taken from the system under test. This client costs little.
    """

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def post_json(self, path: str, payload: Any) -> tuple[int, bytes]:
        assert self.reader is not None
        assert self.writer is not None
        body = json.dumps(payload).encode()
        self.writer.write(
            b"POST %s HTTP/1.1\r\nhost: %s:%d\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s"
            % (path.encode(), self.host.encode(), self.port, len(body), body)
        )
        status = int((await self.reader.readline()).split()[1])
        length, chunked = 0, False
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
        if not chunked:
            return status, await self.reader.readexactly(length)
        data = bytearray()
        while size := int((await self.reader.readline()).split(b";")[0], 16):
            data += await self.reader.readexactly(size)
            await self.reader.readline()
        await self.reader.readline()
        return status, bytes(data)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except OSError:
                pass


async def _webhook_load(url: str, k: int, m: int, prefix: str) -> dict[str, Any]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    connections = [_Connection(host, int(port)) for _ in range(k)]
    latencies: list[float] = []
    problems: list[str] = []

    async def conversation(connection: _Connection, chat: str) -> None:
        for i in range(m):
            started = time.perf_counter()
            status, body = await connection.post_json(
                "/message", {"text": f"message {i}", "chat_id": chat})
            latencies.append(time.perf_counter() - started)
            try:
                reply = json.loads(body).get("reply") if status == 200 else None
            except ValueError:
                reply = None
            if reply != EXPECT:
                problems.append(f"{chat}#{i}: HTTP {status} {body[:200]!r}")

    try:
        # Connections are opened before the clock starts: the load is the messages.
        await asyncio.gather(*(c.open() for c in connections))
        started = time.perf_counter()
        await asyncio.gather(*(conversation(c, f"{prefix}-{i}")
                               for i, c in enumerate(connections)))
        elapsed = time.perf_counter() - started
    finally:
        await asyncio.gather(*(c.close() for c in connections))
    return {"elapsed_s": elapsed, "latencies_s": latencies, "problems": problems[:10],
            "problem_count": len(problems)}


def _direct_load(config: Path, k: int, m: int, prefix: str) -> dict[str, Any]:
    spec = {"config": str(config), "k": k, "m": m, "prefix": prefix,
            "history_cap": HISTORY_CAP, "expect": EXPECT}
    proc = subprocess.run(
        [sys.executable, "-m", "bench._direct", json.dumps(spec)],
        capture_output=True, text=True, cwd=_repo_root(), env=_clean_env(), timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the direct run failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _stats(k: int, m: int, run: dict[str, Any]) -> dict[str, Any]:
    lat = run["latencies_s"]
    return {
        "elapsed_s": run["elapsed_s"],
        "messages": len(lat),
        "msgs_per_s": k * m / run["elapsed_s"],
        "p50_s": percentile(lat, 50),
        "p99_s": percentile(lat, 99),
        "problem_count": run["problem_count"],
        "problems": run["problems"],
    }


def run(loads: Sequence[tuple[int, int]] = ((1, 20), (50, 10), (500, 4)),
        reps: int = 3) -> dict[str, Any]:
    """Run B3 (each ``(K, M)`` load ``reps`` times per side) and return its results."""
    loads = sorted(loads)
    largest = max(k for k, _ in loads)
    out: dict[str, Any] = {"params": {"loads": [list(x) for x in loads], "reps": reps,
                                      "history_cap": HISTORY_CAP},
                           "loads": {}, "checks": []}
    with tempfile.TemporaryDirectory(prefix="lich-bench-b3-") as tmp, \
            ModelServer(TOOL, [1]) as model:
        work = Path(tmp)
        config = write_config(work, model.base_url(1), max_conversations=4 * largest + 100,
                              connections=largest + 10)
        gateway = Gateway(config, work).start()
        try:
            idle = rss_kib(gateway.pid)
            out["gateway_idle_rss_kib"] = idle["rss"]
            out["gateway_idle_peak_kib"] = idle["peak"]
            warm = asyncio.run(_webhook_load(gateway.url, 1, 1, "warmup"))
            out["checks"] += warm["problems"]
            for k, m in loads:
                rows: dict[str, list[dict[str, Any]]] = {"direct": [], "webhook": []}
                rss_before = rss_kib(gateway.pid)["rss"]
                for rep in range(reps):
                    order = ("direct", "webhook") if rep % 2 == 0 else ("webhook", "direct")
                    for side in order:
                        prefix = f"k{k}-r{rep}"
                        model_cpu = cpu_seconds(model.pid)
                        if side == "direct":
                            result = _direct_load(config, k, m, prefix)
                            extra = {"peak_rss_kib": result["peak_rss_kib"],
                                     "rss_after_kib": result["rss_after_kib"],
                                     "rss_before_kib": result["rss_before_kib"],
                                     "cpu_ms_per_msg": result["cpu_s"] / (k * m) * 1000}
                        else:
                            gateway_cpu, own_cpu = cpu_seconds(gateway.pid), time.process_time()
                            result = asyncio.run(_webhook_load(gateway.url, k, m, prefix))
                            extra = {
                                "cpu_ms_per_msg":
                                    (cpu_seconds(gateway.pid) - gateway_cpu) / (k * m) * 1000,
                                "client_cpu_ms_per_msg":
                                    (time.process_time() - own_cpu) / (k * m) * 1000,
                            }
                        # The direct side's figure includes its warm-up message (and start-up).
                        extra["model_cpu_ms_per_msg"] = \
                            (cpu_seconds(model.pid) - model_cpu) / (k * m) * 1000
                        rows[side].append({**_stats(k, m, result), **extra})
                        if result["problem_count"]:
                            out["checks"].append(f"{side} K={k}: {result['problem_count']} bad "
                                                 f"replies, e.g. {result['problems'][:2]}")
                after = rss_kib(gateway.pid)
                conversations = k * reps
                out["loads"][str(k)] = {
                    "m": m,
                    "runs": rows,
                    "msgs_per_s": {s: summary([r["msgs_per_s"] for r in rows[s]]) for s in rows},
                    "p50_s": {s: summary([r["p50_s"] for r in rows[s]]) for s in rows},
                    "p99_s": {s: summary([r["p99_s"] for r in rows[s]]) for s in rows},
                    "cpu_ms_per_msg": {s: summary([r["cpu_ms_per_msg"] for r in rows[s]])
                                       for s in rows},
                    "ratio": summary([w["msgs_per_s"] / d["msgs_per_s"]
                                      for w, d in zip(rows["webhook"], rows["direct"],
                                                      strict=True)]),
                    "gateway_rss_before_kib": rss_before,
                    "gateway_rss_after_kib": after["rss"],
                    "gateway_peak_rss_kib": after["peak"],
                    "gateway_rss_per_conversation_kib":
                        max(0, after["rss"] - rss_before) / conversations,
                    "direct_peak_rss_kib": summary([r["peak_rss_kib"] for r in rows["direct"]]),
                    "direct_rss_per_conversation_kib": summary(
                        [max(0, r["rss_after_kib"] - r["rss_before_kib"]) / k
                         for r in rows["direct"]]),
                }
        finally:
            code = gateway.stop()
            out["gateway_exit_code"] = code
            out["gateway_log_tail"] = gateway.log_path.read_text(
                encoding="utf-8", errors="replace").splitlines()[-5:]
    if code != 0:
        out["checks"].append(f"the gateway exited with {code}")
    targets = []
    if str(TARGET_K) in out["loads"]:
        # Issue 20's target (0.7 before it).
        targets.append(Target(f"B3 webhook ÷ direct throughput at K={TARGET_K}", ">=", 0.9,
                              out["loads"][str(TARGET_K)]["ratio"]["median"]))
    out["targets"] = [t.as_dict() for t in targets]
    return out


def tables(result: dict[str, Any]) -> list[tuple[str, str]]:
    """(title, Markdown table) pairs for the report."""
    head = ["K", "M", "side", "msgs/s", "p50 ms", "p99 ms", "webhook ÷ direct",
            "CPU ms/msg", "peak RSS MiB", "RSS/conversation KiB", "RSS/1,000 conversations MiB"]
    body = []
    for k, e in result["loads"].items():
        for side in ("direct", "webhook"):
            thr = e["msgs_per_s"][side]
            if side == "webhook":
                ratio = (f"{fmt_ratio(e['ratio']['median'])} "
                         f"({fmt_ratio(e['ratio']['min'])}–{fmt_ratio(e['ratio']['max'])})")
                peak = fmt_kib(e["gateway_peak_rss_kib"])
                per_kib = e["gateway_rss_per_conversation_kib"]
            else:
                ratio = "—"
                peak = fmt_kib(e["direct_peak_rss_kib"]["median"])
                per_kib = e["direct_rss_per_conversation_kib"]["median"]
            body.append([k, e["m"], side,
                         f"{thr['median']:.0f} ({thr['min']:.0f}–{thr['max']:.0f})",
                         fmt_ms(e["p50_s"][side]["median"], 1),
                         fmt_ms(e["p99_s"][side]["median"], 1), ratio,
                         f"{e['cpu_ms_per_msg'][side]['median']:.2f}", peak, f"{per_kib:.1f}",
                         fmt_kib(per_kib * 1000)])
    title = (f"B3 gateway — K conversations × M messages (one tool turn each), median (min–max) "
             f"of {result['params']['reps']} alternating runs; gateway idle RSS "
             f"{fmt_kib(result['gateway_idle_rss_kib'])} MiB")
    return [(title, markdown_table(head, body))]
