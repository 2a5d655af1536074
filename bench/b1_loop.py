"""B1 — loop overhead: lich's ``Agent.run`` against a minimal raw httpx loop.

Both talk to the same :class:`lich.testing.ScriptedServer` (OpenAI dialect) on
127.0.0.1, answering ``tool_loop_responder(N, TOOL)``: N replies that each ask
for one call of a trivial tool, then a final answer. lich goes through the
``openai_compat`` provider plugin with the tool registered by an in-process
plugin; the raw loop sends the same payloads (the growing message list and the
tool schema), parses each reply, runs the same tool function and appends the
results. Variants run interleaved, in a rotating order, so that drift in the
machine's load hits them alike; ratios and differences are paired per
repetition (a lich run against the raw run right next to it).
"""

from __future__ import annotations

import asyncio
import gc
import json
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from bench import _tool_plugin
from bench._common import Target, fmt_ms, fmt_ratio, fmt_spread, markdown_table, summary
from bench._model_server import ModelServer
from bench._tool_plugin import TOOL, bench_echo

__all__ = ["VARIANTS", "RawLoop", "run", "tables"]

MODEL = "scripted"

# name -> (is lich, stream, persist sessions); a lich variant is compared with the raw
# loop of the same streaming mode.
VARIANTS: dict[str, tuple[bool, bool, bool]] = {
    "raw": (False, False, False),
    "raw stream": (False, True, False),
    "lich": (True, False, True),
    "lich stream": (True, True, True),
    "lich no-sessions": (True, False, False),
    "lich prices": (True, False, True),
}
TARGET_VARIANT = "lich"
# Config on top of a variant's: "lich prices" prices every call from genai-prices' bundled
# data (the server counts as OpenAI, the configured model is gpt-4o) and checks a cost
# budget before each call. Its ratio against "lich" (paired per repetition) is what
# pricing costs per turn.
EXTRA: dict[str, dict[str, Any]] = {
    "lich prices": {
        "plugins": ("openai_compat", "prices", "budgets"),
        "prices": {"providers": {"bench": "openai"}},
        "max_cost_usd": 1000.0,
        "model": "gpt-4o",
    },
}


class RawLoop:
    """The bare loop: what any harness must at least do per turn, with httpx and dicts."""

    def __init__(self, client: Any, base_url: str, system_prompt: str, tools: list[dict[str, Any]]):
        self.client = client
        self.url = f"{base_url}/chat/completions"
        self.system_prompt = system_prompt
        self.tools = tools

    async def run(self, text: str, stream: bool) -> tuple[int, str]:
        """Run to the final answer; returns (model calls, final text)."""
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": text},
        ]
        calls_made = 0
        while True:
            body: dict[str, Any] = {"model": MODEL, "messages": messages, "tools": self.tools}
            if stream:
                body["stream"] = True
                body["stream_options"] = {"include_usage": True}
                message = await self._stream(body)
            else:
                response = await self.client.post(self.url, json=body)
                response.raise_for_status()
                message = response.json()["choices"][0]["message"]
            calls_made += 1
            tool_calls = message.get("tool_calls") or []
            item: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
            if tool_calls:
                item["tool_calls"] = tool_calls
            messages.append(item)
            if not tool_calls:
                return calls_made, item["content"]
            for call in tool_calls:
                args = json.loads(call["function"]["arguments"] or "{}")
                output = bench_echo(**args)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})

    async def _stream(self, body: dict[str, Any]) -> dict[str, Any]:
        content: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        async with self.client.stream("POST", self.url, json=body) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if not line.startswith("data: "):
                    continue
                data = line[6:]
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if delta.get("content"):
                        content.append(delta["content"])
                    for tc in delta.get("tool_calls") or []:
                        slot = calls.setdefault(tc["index"], {"id": "", "name": "", "args": []})
                        slot["id"] = slot["id"] or tc.get("id") or ""
                        fn = tc.get("function") or {}
                        slot["name"] = slot["name"] or fn.get("name") or ""
                        slot["args"].append(fn.get("arguments") or "")
        message: dict[str, Any] = {"role": "assistant", "content": "".join(content)}
        if calls:
            message["tool_calls"] = [
                {"id": s["id"], "type": "function",
                 "function": {"name": s["name"], "arguments": "".join(s["args"])}}
                for _, s in sorted(calls.items())
            ]
        return message


async def _measure(turns: Sequence[int], reps: int, variants: Sequence[str]) -> dict[str, Any]:
    import httpx

    from lich.agent import Agent, default_system_prompt
    from lich.config import LichConfig, ProviderConfig

    wall: dict[int, dict[str, list[float]]] = {n: {v: [] for v in variants} for n in turns}
    cpu: dict[int, dict[str, list[float]]] = {n: {v: [] for v in variants} for n in turns}
    checks: list[str] = []
    agents: dict[tuple[int, str], Agent] = {}
    raw_client = httpx.AsyncClient(timeout=60)
    try:
        with ModelServer(TOOL, list(turns)) as server, \
                tempfile.TemporaryDirectory(prefix="lich-bench-b1-") as work:
            raws: dict[int, RawLoop] = {}
            for n in turns:
                for name in variants:
                    is_lich, stream, persist = VARIANTS[name]
                    if not is_lich:
                        continue
                    extra = dict(EXTRA.get(name, {}))
                    model = extra.pop("model", MODEL)
                    values: dict[str, Any] = {
                        "providers": (ProviderConfig(kind="openai_compat", name="bench",
                                                     model=model, base_url=server.base_url(n)),),
                        "plugins": ("openai_compat",),
                        "work_dir": work,
                        "stream": stream,
                        "persist_sessions": persist,
                        "max_turns": n + 1,
                        **extra,
                    }
                    config = LichConfig(**values)
                    agents[n, name] = Agent(config, plugins=[("bench_tool", _tool_plugin)])
                tools = [{"type": "function",
                          "function": {"name": d.name, "description": d.description,
                                       "parameters": dict(d.parameters)}}
                         for d in [_tool_plugin.echo_tool.definition()]]
                raws[n] = RawLoop(raw_client, server.base_url(n),
                               default_system_prompt(str(work)), tools)

            async def once(n: int, name: str) -> tuple[float, float]:
                is_lich, stream, _ = VARIANTS[name]
                gc.collect()
                cpu_started = time.process_time()
                started = time.perf_counter()
                if is_lich:
                    result = await agents[n, name].run("go")
                    elapsed = time.perf_counter() - started
                    cpu_used = time.process_time() - cpu_started
                    if (result.stopped_reason, result.outcome.turns_used, result.text) != (
                        "final", n + 1, "done"
                    ):
                        checks.append(f"{name} N={n}: {result.stopped_reason} after "
                                      f"{result.outcome.turns_used} turns, text {result.text!r}")
                    if name in EXTRA and result.cost_usd is None:
                        checks.append(f"{name} N={n}: the calls were not priced")
                else:
                    calls, text = await raws[n].run("go", stream)
                    elapsed = time.perf_counter() - started
                    cpu_used = time.process_time() - cpu_started
                    if (calls, text) != (n + 1, "done"):
                        checks.append(f"{name} N={n}: {calls} model calls, text {text!r}")
                return elapsed, cpu_used

            for n in turns:  # warm-up: connections, imports, caches
                for name in variants:
                    await once(n, name)
            for rep in range(reps):
                # Rotate the order so that no variant always runs first (or after the same one).
                shift = rep % len(variants)
                order = [*variants[shift:], *variants[:shift]]
                for n in turns:
                    for name in order:
                        w, c = await once(n, name)
                        wall[n][name].append(w)
                        cpu[n][name].append(c)
    finally:
        await raw_client.aclose()
        for agent in agents.values():
            await agent.aclose()
    return {"wall": wall, "cpu": cpu, "checks": checks}


def _baseline(name: str) -> str:
    return "raw stream" if VARIANTS[name][1] else "raw"


def run(turns: Sequence[int] = (1, 20, 100), reps: int = 7,
        variants: Sequence[str] = tuple(VARIANTS)) -> dict[str, Any]:
    """Run B1 and return its results (JSON-able).

    Per N and variant: wall time of a whole run (``total_s``) and per tool turn
    (``per_turn_s``), the client process's CPU time per turn (``cpu_per_turn_s``;
    the model server runs in its own process), and for lich variants, paired with
    the raw run of the same streaming mode in the same repetition,
    ``overhead_per_turn_s`` = (lich − raw) / N and ``ratio`` = lich ÷ raw, in
    wall time and in CPU time (``cpu_overhead_per_turn_s``).
    """
    measured = asyncio.run(_measure(turns, reps, variants))
    wall, cpu = measured["wall"], measured["cpu"]
    rows: dict[str, dict[str, Any]] = {}
    for n in turns:
        per_n: dict[str, Any] = {}
        for name in variants:
            s, c = wall[n][name], cpu[n][name]
            entry: dict[str, Any] = {
                "samples_s": s,
                "cpu_samples_s": c,
                "total_s": summary(s),
                "per_turn_s": summary([x / n for x in s]),
                "cpu_per_turn_s": summary([x / n for x in c]),
            }
            base = _baseline(name)
            if VARIANTS[name][0] and base in wall[n]:
                raw, raw_cpu = wall[n][base], cpu[n][base]
                entry["vs"] = base
                entry["overhead_per_turn_s"] = summary(
                    [(a - b) / n for a, b in zip(s, raw, strict=True)])
                entry["ratio"] = summary([a / b for a, b in zip(s, raw, strict=True)])
                entry["cpu_overhead_per_turn_s"] = summary(
                    [(a - b) / n for a, b in zip(c, raw_cpu, strict=True)])
            if name in EXTRA and TARGET_VARIANT in wall[n]:
                # The same loop without the extra plugins, in the same repetition.
                plain = wall[n][TARGET_VARIANT]
                entry["ratio_vs_lich"] = summary([a / b for a, b in zip(s, plain, strict=True)])
                entry["extra_per_turn_s"] = summary(
                    [(a - b) / n for a, b in zip(s, plain, strict=True)])
            per_n[name] = entry
        rows[str(n)] = per_n
    targets = []
    top = str(max(turns))
    main = rows[top].get(TARGET_VARIANT, {})
    if "ratio" in main:
        targets.append(Target(f"B1 lich ÷ raw at N={top} (stream off, sessions on)", "<=", 1.5,
                              main["ratio"]["median"]))
        targets.append(Target(f"B1 per-turn overhead at N={top} (stream off, sessions on)",
                              "<=", 1.0, main["overhead_per_turn_s"]["median"] * 1000, "ms"))
    return {
        "params": {"turns": list(turns), "reps": reps, "variants": list(variants), "tool": TOOL},
        "runs": rows,
        "checks": measured["checks"],
        "targets": [t.as_dict() for t in targets],
    }


def _ms3(x: float) -> str:
    return fmt_ms(x, 3)


def tables(result: dict[str, Any]) -> list[tuple[str, str]]:
    """(title, Markdown table) pairs for the report."""
    out = []
    head = ["N", "variant", "total ms", "per turn ms", "overhead/turn ms", "÷ raw",
            "CPU/turn ms", "CPU overhead/turn ms"]
    body = []
    for n, per_n in result["runs"].items():
        for name, e in per_n.items():
            over = fmt_spread(e["overhead_per_turn_s"], _ms3) if "overhead_per_turn_s" in e \
                else "—"
            ratio = fmt_spread(e["ratio"], fmt_ratio) if "ratio" in e else "—"
            cpu_over = _ms3(e["cpu_overhead_per_turn_s"]["median"]) \
                if "cpu_overhead_per_turn_s" in e else "—"
            body.append([n, name, fmt_spread(e["total_s"], lambda x: fmt_ms(x, 1)),
                         _ms3(e["per_turn_s"]["median"]), over, ratio,
                         _ms3(e["cpu_per_turn_s"]["median"]), cpu_over])
    out.append(("B1 loop overhead — median (min–max) of "
                f"{result['params']['reps']} interleaved runs; overhead and ratio paired per run",
                markdown_table(head, body)))
    turns = [n for n in result["runs"] if int(n) > 1]
    if len(turns) >= 2:
        a, b = turns[-2], turns[-1]
        head2 = ["variant", f"per turn N={a}", f"per turn N={b}",
                 f"overhead/turn N={a}", f"overhead/turn N={b}",
                 f"CPU overhead/turn N={a}", f"CPU overhead/turn N={b}"]
        body2 = []

        def get(e: dict[str, Any], key: str) -> str:
            return _ms3(e[key]["median"]) if key in e else "—"

        for name in result["runs"][b]:
            ea, eb = result["runs"][a][name], result["runs"][b][name]
            body2.append([name, get(ea, "per_turn_s"), get(eb, "per_turn_s"),
                          get(ea, "overhead_per_turn_s"), get(eb, "overhead_per_turn_s"),
                          get(ea, "cpu_overhead_per_turn_s"), get(eb, "cpu_overhead_per_turn_s")])
        out.append(("B1 per-turn cost against history length (ms, medians)",
                    markdown_table(head2, body2)))
    body3 = [[n, name, fmt_spread(e["ratio_vs_lich"], fmt_ratio),
              fmt_spread(e["extra_per_turn_s"], _ms3)]
             for n, per_n in result["runs"].items() for name, e in per_n.items()
             if "ratio_vs_lich" in e]
    if body3:
        out.append((f"B1 plugins enabled ÷ disabled (\"{TARGET_VARIANT}\"), paired per run",
                    markdown_table(["N", "variant", "÷ lich", "extra/turn ms"], body3)))
    return out
