"""B7 — MCP: the per-call cost of an MCP tool through lich against the SDK's own client.

Both sides call ``echo`` of the same stdio server (:mod:`bench._mcp_server`, one
process each), ``calls`` times in a row, in the same run:

* **direct** — an ``mcp.Client`` in this event loop, ``await client.call_tool``;
* **lich** — the tool ``mcp__bench__echo`` of an :class:`lich.Agent` with the
  ``mcp`` plugin, through the agent's executor and hooked runner (the path a
  model's call takes: before/after hooks, limits, the hand-off to the MCP
  plugin's own loop and back).

Each rep is timed as a whole and divided by ``calls``; the ratio of the medians
is the overhead lich adds. The first call of each side is made before timing.
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


async def _direct(calls: int, reps: int) -> tuple[list[float], list[str]]:
    from mcp import Client, StdioServerParameters

    checks: list[str] = []
    per_call: list[float] = []
    params = StdioServerParameters(command=sys.executable, args=[str(_SERVER)])
    async with Client(params) as client:
        await client.call_tool("echo", {"text": "warm"})
        for _ in range(reps):
            started = time.perf_counter()
            for i in range(calls):
                result = await client.call_tool("echo", {"text": str(i)})
            per_call.append((time.perf_counter() - started) / calls)
            text = getattr(result.content[0], "text", None)
            if text != str(calls - 1):
                checks.append(f"direct: the last call answered {text!r}")
    return per_call, checks


async def _through_lich(calls: int, reps: int, work: Path) -> tuple[list[float], list[str]]:
    from lich.agent import Agent
    from lich.executor import HookedToolRunner
    from lich.hooks import RunInfo
    from lich.testing import ScriptedChat, make_test_config
    from lich.types import ToolCall

    checks: list[str] = []
    per_call: list[float] = []
    config = make_test_config(work, plugins=("mcp",), mcp={"servers": {"bench": {
        "command": sys.executable, "args": [str(_SERVER)], "startup_timeout_s": 120}}})
    agent = Agent(config, chat=ScriptedChat([]))
    try:
        runner = HookedToolRunner(agent.executor, agent.host,
                                  RunInfo("bench", "bench", "", str(work), config,
                                          tools=agent.tools))
        warm = await runner(ToolCall("w", "mcp__bench__echo", {"text": "warm"}), None)
        if warm.result.output != "warm":
            checks.append(f"lich: the warm-up call answered {warm.result!r}")
        for _ in range(reps):
            started = time.perf_counter()
            for i in range(calls):
                outcome = await runner(ToolCall(str(i), "mcp__bench__echo", {"text": str(i)}),
                                       None)
            per_call.append((time.perf_counter() - started) / calls)
            if outcome.result.output != str(calls - 1):
                checks.append(f"lich: the last call answered {outcome.result!r}")
    finally:
        await agent.aclose()
    return per_call, checks


def run(calls: int = 100, reps: int = 5) -> dict[str, Any]:
    """Run B7 and return its results (JSON-able)."""
    with tempfile.TemporaryDirectory(prefix="lich-bench-b7-") as tmp:
        direct, direct_checks = asyncio.run(_direct(calls, reps))
        lich, lich_checks = asyncio.run(_through_lich(calls, reps, Path(tmp)))
    out: dict[str, Any] = {"params": {"calls": calls, "reps": reps},
                           "checks": direct_checks + lich_checks}
    out["direct_per_call_s"] = summary(direct)
    out["lich_per_call_s"] = summary(lich)
    ratio = out["lich_per_call_s"]["median"] / out["direct_per_call_s"]["median"]
    out["ratio"] = ratio
    out["overhead_per_call_s"] = (out["lich_per_call_s"]["median"]
                                  - out["direct_per_call_s"]["median"])
    out["targets"] = [Target(f"B7 lich ÷ SDK client per MCP call ({calls} calls)", "<=", 1.5,
                             ratio).as_dict()]
    return out


def tables(result: dict[str, Any]) -> list[tuple[str, str]]:
    """(title, Markdown table) pairs for the report."""
    head = ["path", "per call (median)", "min", "max"]
    body = []
    for label, key in (("SDK client, direct", "direct_per_call_s"),
                       ("through lich (executor, hooks, plugin loop)", "lich_per_call_s")):
        s = result[key]
        body.append([label, fmt_ms(s["median"], 3), fmt_ms(s["min"], 3), fmt_ms(s["max"], 3)])
    body.append(["lich ÷ direct", fmt_ratio(result["ratio"]), "", ""])
    body.append(["overhead per call", fmt_ms(result["overhead_per_call_s"], 3), "", ""])
    params = result["params"]
    return [(f"B7 MCP — {params['calls']} calls × {params['reps']} reps, stdio",
             markdown_table(head, body))]
