"""B8 — what each builtin plugin adds per turn, measured in process without HTTP.

B1 measures the plugins over real HTTP, where a turn costs milliseconds of CPU
(httpx, the event loop's socket rounds) and the run-to-run spread on a busy
machine is wider than a plugin's whole cost. Here the model is a chat function
in the same process: N turns, each asking for one call of B1's trivial tool
(the usage growing with the history, as a real one does), then an answer; no
transcript. What is left per turn is lich's own loop, the executor, the tool's
thread hop — and the plugins. Every variant is paired with ``plain`` in the same
repetition, in a rotating order, and its extra CPU time per turn
(``time.process_time``, which includes the tool's worker thread) reported as
the median and the quartiles of those pairs.

Reported besides: which per-turn hooks a run of the variant calls at all
(:meth:`lich.plugins.PluginHost.needs`: a plugin loaded but not configured
declares its hooks idle with :func:`lich.hooks.needed_when`).
"""

from __future__ import annotations

import asyncio
import gc
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench import _tool_plugin
from bench._common import Target, fmt_ms, markdown_table, summary
from bench._tool_plugin import TOOL
from bench.b1_loop import _EXPORTERS, _otel_in_memory

__all__ = ["PER_TURN_HOOKS", "VARIANTS", "run", "tables"]

# The hooks lich may call on every model call, tool call or event of a run.
PER_TURN_HOOKS = ("lich_before_model_call", "lich_price_call", "lich_before_tool_call",
                  "lich_check_tool_call", "lich_after_tool_call", "lich_event")

_PRICES: dict[str, Any] = {"tables": {"prices": {"providers": {"bench": "openai"}}}}

# name -> (config on top of the plain one, plugin objects to add)
VARIANTS: dict[str, tuple[dict[str, Any], Callable[[], list[tuple[str, Any]]] | None]] = {
    "plain": ({}, None),
    # Loaded, not configured: the default plugins that do nothing until told to
    # (budgets, MCP with no servers, postgres without a DSN, the gateway) and nats.
    "idle plugins": ({"plugins": ("budgets", "mcp", "postgres", "gateway", "nats")}, None),
    # The approvals plugin on its default rules: the read-only tool is allowed.
    "approvals": ({"plugins": ("approvals",)}, None),
    "prices": ({"plugins": ("prices",), **_PRICES}, None),
    "prices+budget": ({"plugins": ("prices", "budgets"), "max_cost_usd": 1000.0, **_PRICES},
                      None),
    "otel": ({}, _otel_in_memory),
    # Issue 20's target: otel (in-memory exporter) and prices enabled.
    "otel+prices": ({"plugins": ("prices",), **_PRICES}, _otel_in_memory),
}
# Targets on the extra CPU per turn over plain (ms).
TARGETS: dict[str, float] = {"approvals": 0.05, "otel+prices": 0.3}


def _chat(turns: int) -> Callable[..., Any]:
    """A chat function answering ``turns`` tool turns, then ``done``."""
    from lich.types import AssistantMessage, ChatResult, ToolCall, Usage

    async def chat(messages: Sequence[Any], tools: Sequence[Any], options: Any) -> ChatResult:
        turn = sum(1 for m in messages if getattr(m, "role", "") == "assistant")
        prompt = 200 + 40 * turn
        usage = Usage(prompt_tokens=prompt, completion_tokens=12, total_tokens=prompt + 12)
        if turn >= turns:
            return ChatResult(AssistantMessage("done"), usage, "stop", "gpt-4o", "bench")
        call = ToolCall(id=f"call_{turn}", name=TOOL, args={"text": f"turn {turn}"})
        return ChatResult(AssistantMessage("", (call,)), usage, "tool_calls", "gpt-4o", "bench")

    return chat


async def _measure(turns: int, reps: int, variants: Sequence[str]) -> dict[str, Any]:
    from lich.agent import Agent
    from lich.config import LichConfig, ProviderConfig

    cpu: dict[str, list[float]] = {v: [] for v in variants}
    checks: list[str] = []
    hooks: dict[str, list[str]] = {}
    agents: dict[str, Agent] = {}
    with tempfile.TemporaryDirectory(prefix="lich-bench-b8-") as work:
        try:
            for name in variants:
                extra, objects = VARIANTS[name]
                values: dict[str, Any] = {
                    # A provider of a registered kind, so that prices know its API URL;
                    # the chat function answers in its name, nothing is sent to it.
                    "providers": (ProviderConfig(kind="openai_compat", name="bench",
                                                 model="gpt-4o",
                                                 base_url="http://127.0.0.1:9/v1"),),
                    "work_dir": work, "persist_sessions": False, "stream": False,
                    "max_turns": turns + 1, **extra,
                    "plugins": ("openai_compat", *extra.get("plugins", ())),
                }
                config = LichConfig(**values)
                agent = Agent(config, chat=_chat(turns),
                              plugins=[("bench_tool", _tool_plugin),
                                       *(objects() if objects else [])])
                agents[name] = agent
                failed = [r.entry for r in agent.host.reports if r.status != "loaded"]
                if failed:
                    checks.append(f"{name}: plugins not loaded: {', '.join(failed)}")
                hooks[name] = [h for h in PER_TURN_HOOKS if agent.host.needs(h, config)]

            async def once(name: str) -> float:
                for exporter in _EXPORTERS:
                    exporter.clear()
                gc.collect()
                started = time.process_time()
                result = await agents[name].run("go")
                used = time.process_time() - started
                if (result.stopped_reason, result.outcome.turns_used, result.text) != (
                        "final", turns + 1, "done"):
                    checks.append(f"{name}: {result.stopped_reason} after "
                                  f"{result.outcome.turns_used} turns, text {result.text!r}")
                if "prices" in name and result.cost_usd is None:
                    checks.append(f"{name}: the calls were not priced")
                spans = sum(len(e.get_finished_spans()) for e in _EXPORTERS)
                if VARIANTS[name][1] is _otel_in_memory and spans != 1 + (turns + 1) + turns:
                    checks.append(f"{name}: {spans} spans recorded")
                return used

            for name in variants:  # warm-up: imports, caches, the tool's thread
                await once(name)
            for rep in range(reps):
                shift = rep % len(variants)
                for name in [*variants[shift:], *variants[:shift]]:
                    cpu[name].append(await once(name))
        finally:
            for agent in agents.values():
                await agent.aclose()
    return {"cpu": cpu, "checks": checks, "hooks": hooks}


def _quartiles(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"q1": ordered[len(ordered) // 4], "q3": ordered[(3 * len(ordered)) // 4]}


def run(turns: int = 100, reps: int = 21, variants: Sequence[str] = tuple(VARIANTS)
        ) -> dict[str, Any]:
    """Run B8; per variant: CPU per turn, and against ``plain`` in the same repetition
    the extra CPU per turn (``cpu_extra_per_turn_s``: median, min, max, quartiles);
    ``hooks``: the per-turn hooks its runs call."""
    if "plain" not in variants:
        variants = ("plain", *variants)
    measured = asyncio.run(_measure(turns, reps, variants))
    cpu = measured["cpu"]
    rows: dict[str, Any] = {}
    for name in variants:
        entry: dict[str, Any] = {"cpu_samples_s": cpu[name],
                                 "cpu_per_turn_s": summary([c / turns for c in cpu[name]]),
                                 "hooks": measured["hooks"][name]}
        if name != "plain":
            extra = [(a - b) / turns for a, b in zip(cpu[name], cpu["plain"], strict=True)]
            entry["cpu_extra_per_turn_s"] = {**summary(extra), **_quartiles(extra)}
        rows[name] = entry
    targets = [Target(f"B8 {name}: extra CPU per turn over plain, in process", "<=", limit,
                      rows[name]["cpu_extra_per_turn_s"]["median"] * 1000, "ms")
               for name, limit in TARGETS.items() if name in rows]
    return {"params": {"turns": turns, "reps": reps, "variants": list(variants)},
            "runs": rows, "checks": measured["checks"],
            "targets": [t.as_dict() for t in targets]}


def tables(result: dict[str, Any]) -> list[tuple[str, str]]:
    """(title, Markdown table) pairs for the report."""
    body = []
    for name, e in result["runs"].items():
        extra = e.get("cpu_extra_per_turn_s")
        body.append([
            name, fmt_ms(e["cpu_per_turn_s"]["median"], 3),
            fmt_ms(extra["median"], 3) if extra else "—",
            f"{fmt_ms(extra['q1'], 3)} … {fmt_ms(extra['q3'], 3)}" if extra else "—",
            ", ".join(h.removeprefix("lich_") for h in e["hooks"]) or "none",
        ])
    p = result["params"]
    return [(f"B8 plugins in process (no HTTP), N = {p['turns']}, median of {p['reps']} "
             "interleaved runs; extra CPU paired per run against plain",
             markdown_table(["variant", "CPU/turn ms", "extra CPU/turn ms",
                             "extra CPU/turn IQR ms", "per-turn hooks called"], body))]
