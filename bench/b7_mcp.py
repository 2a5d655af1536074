"""B7 — MCP: the per-call cost of an MCP tool through lich against the SDK's own client.

Both sides call ``echo`` of the same stdio server (:mod:`bench._mcp_server`, one
process each), ``calls`` times in a row, in the same run:

* **direct** — an ``mcp.Client`` in this event loop, ``await client.call_tool``;
* **lich** — the tool ``mcp__bench__echo`` of an :class:`lich.Agent` with the
  ``mcp`` plugin, through the agent's executor and hooked runner (the path a
  model's call takes: before/after hooks, limits, the hand-off to the MCP
  plugin's own loop and back).

Both are open at once in one event loop and their reps interleaved (the order
swapped every rep), so that a busy machine slows both alike. Each rep is timed
as a whole (wall clock, and this process's CPU time, which counts the MCP
plugin's loop thread but neither server) and divided by ``calls``; the ratio of
the wall-clock medians is the overhead lich adds (the target), the per-rep
paired ratios show its spread. The first call of each side is made before timing.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import Target, fmt_ms, fmt_ratio, markdown_table, summary

__all__ = ["run", "tables"]

_SERVER = Path(__file__).with_name("_mcp_server.py")


async def _both(calls: int, reps: int, work: Path) -> dict[str, Any]:
    """Both sides open at once in this event loop, their reps interleaved (the order
    swapped every rep), so that the machine's load falls on both alike."""
    from mcp import Client, StdioServerParameters

    from lich.agent import Agent
    from lich.executor import HookedToolRunner
    from lich.hooks import RunInfo
    from lich.testing import ScriptedChat, make_test_config
    from lich.types import ToolCall

    checks: list[str] = []
    config = make_test_config(work, plugins=("mcp",), mcp={"servers": {"bench": {
        "command": sys.executable, "args": [str(_SERVER)], "startup_timeout_s": 120}}})
    agent = Agent(config, chat=ScriptedChat([]))
    params = StdioServerParameters(command=sys.executable, args=[str(_SERVER)])
    try:
        runner = HookedToolRunner(agent.executor, agent.host,
                                  RunInfo("bench", "bench", "", str(work), config,
                                          tools=agent.tools))
        async with Client(params) as client:

            async def direct() -> None:
                for i in range(calls):
                    result = await client.call_tool("echo", {"text": str(i)})
                text = getattr(result.content[0], "text", None)
                if text != str(calls - 1):
                    checks.append(f"direct: the last call answered {text!r}")

            async def through_lich() -> None:
                for i in range(calls):
                    outcome = await runner(
                        ToolCall(str(i), "mcp__bench__echo", {"text": str(i)}), None)
                if outcome.result.output != str(calls - 1):
                    checks.append(f"lich: the last call answered {outcome.result!r}")

            await client.call_tool("echo", {"text": "warm"})
            warm = await runner(ToolCall("w", "mcp__bench__echo", {"text": "warm"}), None)
            if warm.result.output != "warm":
                checks.append(f"lich: the warm-up call answered {warm.result!r}")
            sides = {"direct": direct, "lich": through_lich}
            wall: dict[str, list[float]] = {name: [] for name in sides}
            cpu: dict[str, list[float]] = {name: [] for name in sides}
            for rep in range(reps):
                order = list(sides) if rep % 2 == 0 else list(reversed(sides))
                for name in order:
                    # process_time: this process's threads, so the lich side's CPU
                    # includes the MCP plugin's loop thread; neither server is counted.
                    started, cpu_started = time.perf_counter(), time.process_time()
                    await sides[name]()
                    wall[name].append((time.perf_counter() - started) / calls)
                    cpu[name].append((time.process_time() - cpu_started) / calls)
    finally:
        await agent.aclose()
    return {"wall": wall, "cpu": cpu, "checks": checks}


def run(calls: int = 100, reps: int = 9) -> dict[str, Any]:
    """Run B7 and return its results (JSON-able)."""
    with tempfile.TemporaryDirectory(prefix="lich-bench-b7-") as tmp:
        measured = asyncio.run(_both(calls, reps, Path(tmp)))
    wall, cpu = measured["wall"], measured["cpu"]
    out: dict[str, Any] = {"params": {"calls": calls, "reps": reps},
                           "checks": measured["checks"]}
    out["direct_per_call_s"] = summary(wall["direct"])
    out["lich_per_call_s"] = summary(wall["lich"])
    out["direct_cpu_per_call_s"] = summary(cpu["direct"])
    out["lich_cpu_per_call_s"] = summary(cpu["lich"])
    ratio = out["lich_per_call_s"]["median"] / out["direct_per_call_s"]["median"]
    out["ratio"] = ratio
    out["paired_ratio"] = summary([lich / direct for lich, direct
                                   in zip(wall["lich"], wall["direct"], strict=True)])
    out["cpu_ratio"] = (out["lich_cpu_per_call_s"]["median"]
                        / out["direct_cpu_per_call_s"]["median"])
    out["overhead_per_call_s"] = (out["lich_per_call_s"]["median"]
                                  - out["direct_per_call_s"]["median"])
    out["targets"] = [Target(f"B7 lich ÷ SDK client per MCP call ({calls} calls)", "<=", 1.5,
                             ratio).as_dict()]
    return out


def tables(result: dict[str, Any]) -> list[tuple[str, str]]:
    """(title, Markdown table) pairs for the report."""
    head = ["path", "per call (median)", "min", "max", "CPU per call (median)"]
    body = []
    for label, key in (("SDK client, direct", "direct"),
                       ("through lich (executor, hooks, plugin loop)", "lich")):
        s, c = result[f"{key}_per_call_s"], result[f"{key}_cpu_per_call_s"]
        body.append([label, fmt_ms(s["median"], 3), fmt_ms(s["min"], 3), fmt_ms(s["max"], 3),
                     fmt_ms(c["median"], 3)])
    paired = result["paired_ratio"]
    body.append(["lich ÷ direct", fmt_ratio(result["ratio"]), fmt_ratio(paired["min"]),
                 fmt_ratio(paired["max"]), fmt_ratio(result["cpu_ratio"])])
    body.append(["overhead per call", fmt_ms(result["overhead_per_call_s"], 3), "", "", ""])
    params = result["params"]
    return [(f"B7 MCP — {params['calls']} calls × {params['reps']} interleaved reps, stdio; "
             "lich ÷ direct min/max are of the reps' paired ratios",
             markdown_table(head, body))]
