"""B6 — telemetry overhead: the same N-turn run with the ``otel`` plugin and without.

Both variants are B1's ``lich`` run (``openai_compat`` against the scripted
model in its own process, streaming off, sessions on, the trivial tool). The
``otel`` variants add the plugin as configured in production: its own tracer
provider, the SDK's batch processor and the OTLP/HTTP exporter sending to a
collector stand-in on 127.0.0.1 (:mod:`bench._otlp_sink`, its own process, which
decodes what it receives and counts the spans). The encoding and sending happen
in the processor's thread of the measured process, so they are in the numbers.
Variants run interleaved in a rotating order; the ratio and the per-turn
overhead are paired per repetition (an ``otel`` run against the ``plain`` run
right next to it).
"""

from __future__ import annotations

import asyncio
import gc
import tempfile
import time
from typing import Any

from bench import _tool_plugin
from bench._common import Target, fmt_ms, fmt_ratio, fmt_spread, markdown_table, summary
from bench._model_server import ModelServer
from bench._otlp_sink import OtlpSink
from bench._tool_plugin import TOOL

__all__ = ["VARIANTS", "run", "tables"]

MODEL = "scripted"
BASELINE = "plain"
# name -> the [otel] table, or None for no otel plugin
VARIANTS: dict[str, dict[str, Any] | None] = {
    "plain": None,
    "otel": {},
    "otel capture": {"capture_content": True},
}
TARGET_VARIANT = "otel"


async def _measure(turns: int, reps: int) -> dict[str, Any]:
    from lich.agent import Agent
    from lich.config import LichConfig, ProviderConfig
    from lich.otel.plugin import OtelPlugin

    wall: dict[str, list[float]] = {v: [] for v in VARIANTS}
    cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
    checks: list[str] = []
    agents: dict[str, Agent] = {}
    plugins: list[OtelPlugin] = []
    spans_expected = 0
    with ModelServer(TOOL, [turns]) as server, OtlpSink() as sink, \
            tempfile.TemporaryDirectory(prefix="lich-bench-b6-") as work:
        try:
            for name, settings in VARIANTS.items():
                objects: list[tuple[str, object]] = [("bench_tool", _tool_plugin)]
                otel: dict[str, Any] = {}
                if settings is not None:
                    # Its own plugin (and provider) per variant; not the global provider,
                    # which a process gets once.
                    plugin = OtelPlugin(environ={}, install_global=False)
                    plugins.append(plugin)
                    objects.append(("otel", plugin))
                    otel = {"endpoint": sink.url, **settings}
                config = LichConfig(
                    providers=(ProviderConfig(kind="openai_compat", name="bench", model=MODEL,
                                              base_url=server.base_url(turns)),),
                    plugins=("openai_compat",), work_dir=work, stream=False,
                    persist_sessions=True, max_turns=turns + 1,
                    tables={"otel": otel} if otel else {},
                )
                agents[name] = Agent(config, plugins=objects)

            async def once(name: str) -> tuple[float, float]:
                nonlocal spans_expected
                gc.collect()
                cpu_started = time.process_time()
                started = time.perf_counter()
                result = await agents[name].run("go")
                elapsed = time.perf_counter() - started
                cpu_used = time.process_time() - cpu_started
                if (result.stopped_reason, result.outcome.turns_used, result.text) != (
                    "final", turns + 1, "done"
                ):
                    checks.append(f"{name}: {result.stopped_reason} after "
                                  f"{result.outcome.turns_used} turns, text {result.text!r}")
                if VARIANTS[name] is not None:
                    # invoke_agent, a chat span per model call, an execute_tool per call
                    spans_expected += 1 + (turns + 1) + turns
                return elapsed, cpu_used

            for name in VARIANTS:  # warm-up: connections, imports, the tracer provider
                await once(name)
            names = list(VARIANTS)
            for rep in range(reps):
                shift = rep % len(names)
                for name in [*names[shift:], *names[:shift]]:
                    w, c = await once(name)
                    wall[name].append(w)
                    cpu[name].append(c)
            for plugin in plugins:
                if plugin.tracing is not None:
                    plugin.tracing.provider.force_flush()  # type: ignore[attr-defined]
            received = sink.spans()
            if received != spans_expected:
                checks.append(f"the collector received {received} spans, "
                              f"expected {spans_expected}")
        finally:
            for agent in agents.values():
                await agent.aclose()
            for plugin in plugins:
                if plugin.tracing is not None:
                    plugin.tracing.shutdown()
    return {"wall": wall, "cpu": cpu, "checks": checks, "spans": spans_expected}


def run(turns: int = 100, reps: int = 9) -> dict[str, Any]:
    """Run B6 and return its results (JSON-able).

    Per variant: wall and CPU time of a whole run and per turn; for the ``otel``
    variants, paired with the ``plain`` run of the same repetition, ``ratio`` =
    otel ÷ plain and ``overhead_per_turn_s`` = (otel − plain) / N, in wall time and
    in CPU time.
    """
    measured = asyncio.run(_measure(turns, reps))
    wall, cpu = measured["wall"], measured["cpu"]
    rows: dict[str, dict[str, Any]] = {}
    for name in VARIANTS:
        s, c = wall[name], cpu[name]
        entry: dict[str, Any] = {
            "samples_s": s,
            "cpu_samples_s": c,
            "total_s": summary(s),
            "per_turn_s": summary([x / turns for x in s]),
            "cpu_per_turn_s": summary([x / turns for x in c]),
        }
        if name != BASELINE:
            base, base_cpu = wall[BASELINE], cpu[BASELINE]
            entry["vs"] = BASELINE
            entry["ratio"] = summary([a / b for a, b in zip(s, base, strict=True)])
            entry["overhead_per_turn_s"] = summary(
                [(a - b) / turns for a, b in zip(s, base, strict=True)])
            entry["cpu_ratio"] = summary([a / b for a, b in zip(c, base_cpu, strict=True)])
            entry["cpu_overhead_per_turn_s"] = summary(
                [(a - b) / turns for a, b in zip(c, base_cpu, strict=True)])
        rows[name] = entry
    main = rows[TARGET_VARIANT]
    # About 2 spans per turn, some tens of microseconds each in the SDK on the loop,
    # plus their encoding and sending in the batch processor's thread.
    targets = [
        Target(f"B6 otel ÷ plain at N={turns} (spans exported over OTLP/HTTP)", "<=", 1.25,
               main["ratio"]["median"]),
        Target(f"B6 otel CPU overhead per turn at N={turns}", "<=", 0.5,
               main["cpu_overhead_per_turn_s"]["median"] * 1000, "ms"),
    ]
    return {
        "params": {"turns": turns, "reps": reps, "variants": list(VARIANTS), "tool": TOOL},
        "runs": rows,
        "spans_exported": measured["spans"],
        "checks": measured["checks"],
        "targets": [t.as_dict() for t in targets],
    }


def _ms3(x: float) -> str:
    return fmt_ms(x, 3)


def tables(result: dict[str, Any]) -> list[tuple[str, str]]:
    """(title, Markdown table) pairs for the report."""
    head = ["variant", "total ms", "per turn ms", "overhead/turn ms", "÷ plain",
            "CPU/turn ms", "CPU overhead/turn ms", "CPU ÷ plain"]
    body = []
    for name, e in result["runs"].items():
        paired = "ratio" in e
        body.append([
            name, fmt_spread(e["total_s"], lambda x: fmt_ms(x, 1)),
            _ms3(e["per_turn_s"]["median"]),
            fmt_spread(e["overhead_per_turn_s"], _ms3) if paired else "—",
            fmt_spread(e["ratio"], fmt_ratio) if paired else "—",
            _ms3(e["cpu_per_turn_s"]["median"]),
            _ms3(e["cpu_overhead_per_turn_s"]["median"]) if paired else "—",
            fmt_ratio(e["cpu_ratio"]["median"]) if paired else "—",
        ])
    params = result["params"]
    return [(f"B6 telemetry overhead at N={params['turns']} tool turns — median (min–max) of "
             f"{params['reps']} interleaved runs, paired per run; "
             f"{result['spans_exported']} spans exported",
             markdown_table(head, body))]
