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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench import _tool_plugin
from bench._common import Target, fmt_ms, fmt_ratio, fmt_spread, markdown_table, summary
from bench._model_server import ModelServer
from bench._raw_cli import StreamedAnswer
from bench._tool_plugin import TOOL, bench_echo

__all__ = ["IDLE_PLUGINS", "VARIANTS", "RawLoop", "SyncRawLoop", "Variant", "run", "tables"]

MODEL = "scripted"


@dataclass(frozen=True)
class Variant:
    """One way of running the N-turn loop.

    ``kind``: ``"raw"`` (the bare async httpx loop), ``"raw sync"`` (the same with a
    sync ``httpx.Client``) or ``"lich"`` (``Agent.run``). ``config``: set on top of
    the lich variant's config; ``objects``: makes extra plugin objects (and says how
    to reset them between runs). A lich variant with ``config`` or ``objects`` is also
    paired with plain ``lich`` (``÷ lich``, extra ms per turn): what those plugins cost.
    ``threaded_tool``: the tool without ``runs_inline`` (in a worker thread), paired so too.
    """

    kind: str
    stream: bool = False
    persist: bool = True
    config: dict[str, Any] = field(default_factory=dict)
    objects: Callable[[], list[tuple[str, Any]]] | None = None
    threaded_tool: bool = False

    @property
    def is_lich(self) -> bool:
        return self.kind == "lich"


# Builtin plugins that do nothing until configured, loaded without their config ("lich
# idle plugins"): what being installed and enabled but unused costs per turn — budgets
# with no budget, MCP with no servers, the postgres store without a DSN, the gateway, the
# nats bus. Adding one is one more name here.
IDLE_PLUGINS: tuple[str, ...] = ("budgets", "mcp", "postgres", "gateway", "nats")


def _otel_in_memory() -> list[tuple[str, Any]]:
    """The ``otel`` plugin exporting to an in-memory exporter (no network, no thread)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from lich.otel.plugin import OtelPlugin

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _EXPORTERS.append(exporter)
    return [("otel", OtelPlugin(provider, environ={}, install_global=False))]


_EXPORTERS: list[Any] = []  # emptied between runs (outside the timing)

_PRICES: dict[str, Any] = {
    # genai-prices' bundled data: the server counts as OpenAI, the model is gpt-4o.
    "tables": {"prices": {"providers": {"bench": "openai"}}},  # the prices plugin's table
    "model": "gpt-4o",
}

VARIANTS: dict[str, Variant] = {
    "raw": Variant("raw"),
    "raw stream": Variant("raw", stream=True),
    "raw sync": Variant("raw sync"),
    "raw sync stream": Variant("raw sync", stream=True),
    "lich": Variant("lich"),
    "lich stream": Variant("lich", stream=True),
    "lich no-sessions": Variant("lich", persist=False),
    # The tool as an ordinary plain function, run in a worker thread: the hop's cost.
    "lich thread tool": Variant("lich", threaded_tool=True),
    # Pricing every call and checking a cost budget before each.
    "lich prices": Variant("lich", config={
        "plugins": ("openai_compat", "prices", "budgets"), "max_cost_usd": 1000.0, **_PRICES}),
    # The approvals plugin on its default rules; the tool is read-only, so each call
    # is allowed (the rules are still applied to it).
    "lich approvals": Variant("lich", config={"plugins": ("openai_compat", "approvals")}),
    # OpenTelemetry spans (in-memory exporter) and prices, as issue 20 states the target.
    "lich otel+prices": Variant("lich", config={"plugins": ("openai_compat", "prices"),
                                                **_PRICES}, objects=_otel_in_memory),
    "lich idle plugins": Variant("lich", config={"plugins": ("openai_compat", *IDLE_PLUGINS)}),
}
TARGET_VARIANT = "lich"
# The plugin variants' extra cost per turn over plain "lich" is reported here, over
# HTTP, but judged by B8 (in process, no HTTP): two HTTP round trips per turn on two
# shared cores vary by more than the 0.05 ms an allowed approval may cost.
# The variants every lich path is held to ≤ 1.5× the sync raw loop with (issue 20).
PATH_VARIANTS = ("lich", "lich stream")


def _new_messages(system_prompt: str, text: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": text}]


def _body(messages: list[dict[str, Any]], tools: list[dict[str, Any]],
          stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": MODEL, "messages": messages, "tools": tools}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def _take(messages: list[dict[str, Any]], message: dict[str, Any]) -> str | None:
    """Append the reply and run its tool calls; the final text, or None to go on."""
    tool_calls = message.get("tool_calls") or []
    item: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    if tool_calls:
        item["tool_calls"] = tool_calls
    messages.append(item)
    if not tool_calls:
        return str(item["content"])
    for call in tool_calls:
        args = json.loads(call["function"]["arguments"] or "{}")
        output = bench_echo(**args)
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    return None


class RawLoop:
    """The bare loop: what any harness must at least do per turn, with httpx and dicts
    (an ``httpx.AsyncClient``: the floor for an asyncio harness on httpx)."""

    def __init__(self, client: Any, base_url: str, system_prompt: str, tools: list[dict[str, Any]]):
        self.client = client
        self.url = f"{base_url}/chat/completions"
        self.system_prompt = system_prompt
        self.tools = tools

    async def run(self, text: str, stream: bool) -> tuple[int, str]:
        """Run to the final answer; returns (model calls, final text)."""
        messages = _new_messages(self.system_prompt, text)
        calls_made = 0
        while True:
            body = _body(messages, self.tools, stream)
            if stream:
                chunks = StreamedAnswer()
                async with self.client.stream("POST", self.url, json=body) as response:
                    response.raise_for_status()
                    async for line in response.aiter_lines():
                        chunks.line(line)
                message = chunks.message()
            else:
                response = await self.client.post(self.url, json=body)
                response.raise_for_status()
                message = response.json()["choices"][0]["message"]
            calls_made += 1
            final = _take(messages, message)
            if final is not None:
                return calls_made, final


class SyncRawLoop(RawLoop):
    """The same loop with a sync ``httpx.Client``: the floor of any Python loop on httpx."""

    def run_sync(self, text: str, stream: bool) -> tuple[int, str]:
        """Run to the final answer; returns (model calls, final text)."""
        messages = _new_messages(self.system_prompt, text)
        calls_made = 0
        while True:
            body = _body(messages, self.tools, stream)
            if stream:
                chunks = StreamedAnswer()
                with self.client.stream("POST", self.url, json=body) as response:
                    response.raise_for_status()
                    for line in response.iter_lines():
                        chunks.line(line)
                message = chunks.message()
            else:
                response = self.client.post(self.url, json=body)
                response.raise_for_status()
                message = response.json()["choices"][0]["message"]
            calls_made += 1
            final = _take(messages, message)
            if final is not None:
                return calls_made, final


def tool_schemas() -> list[dict[str, Any]]:
    """The bench tool as the raw loops send it (what lich sends for it)."""
    d = _tool_plugin.echo_tool.definition()
    return [{"type": "function", "function": {"name": d.name, "description": d.description,
                                              "parameters": dict(d.parameters)}}]


async def _measure(turns: Sequence[int], reps: int, variants: Sequence[str]) -> dict[str, Any]:
    import httpx

    from lich.agent import Agent, default_system_prompt
    from lich.config import LichConfig, ProviderConfig

    wall: dict[int, dict[str, list[float]]] = {n: {v: [] for v in variants} for n in turns}
    cpu: dict[int, dict[str, list[float]]] = {n: {v: [] for v in variants} for n in turns}
    checks: list[str] = []
    agents: dict[tuple[int, str], Agent] = {}
    raw_client = httpx.AsyncClient(timeout=60)
    sync_client = httpx.Client(timeout=60)
    try:
        with ModelServer(TOOL, list(turns)) as server, \
                tempfile.TemporaryDirectory(prefix="lich-bench-b1-") as work:
            raws: dict[int, RawLoop] = {}
            sync_raws: dict[int, SyncRawLoop] = {}
            for n in turns:
                for name in variants:
                    v = VARIANTS[name]
                    if not v.is_lich:
                        continue
                    extra = dict(v.config)
                    model = extra.pop("model", MODEL)
                    values: dict[str, Any] = {
                        "providers": (ProviderConfig(kind="openai_compat", name="bench",
                                                     model=model, base_url=server.base_url(n)),),
                        "plugins": ("openai_compat",),
                        "work_dir": work,
                        "stream": v.stream,
                        "persist_sessions": v.persist,
                        "max_turns": n + 1,
                        **extra,
                    }
                    config = LichConfig(**values)
                    tool_plugin = _tool_plugin.THREADED if v.threaded_tool else _tool_plugin
                    objects = [("bench_tool", tool_plugin), *(v.objects() if v.objects else [])]
                    agents[n, name] = Agent(config, plugins=objects)
                    failed = [r.entry for r in agents[n, name].host.reports
                              if r.status != "loaded"]
                    if failed:  # a variant without its plugins would measure nothing
                        checks.append(f"{name} N={n}: plugins not loaded: {', '.join(failed)}")
                prompt = default_system_prompt(str(work))
                raws[n] = RawLoop(raw_client, server.base_url(n), prompt, tool_schemas())
                sync_raws[n] = SyncRawLoop(sync_client, server.base_url(n), prompt,
                                           tool_schemas())

            async def once(n: int, name: str) -> tuple[float, float]:
                v = VARIANTS[name]
                for exporter in _EXPORTERS:
                    exporter.clear()
                gc.collect()
                cpu_started = time.process_time()
                started = time.perf_counter()
                if v.is_lich:
                    result = await agents[n, name].run("go")
                    elapsed = time.perf_counter() - started
                    cpu_used = time.process_time() - cpu_started
                    if (result.stopped_reason, result.outcome.turns_used, result.text) != (
                        "final", n + 1, "done"
                    ):
                        checks.append(f"{name} N={n}: {result.stopped_reason} after "
                                      f"{result.outcome.turns_used} turns, text {result.text!r}")
                    if "prices" in v.config.get("plugins", ()) and result.cost_usd is None:
                        checks.append(f"{name} N={n}: the calls were not priced")
                    spans = sum(len(e.get_finished_spans()) for e in _EXPORTERS)
                    if v.objects is _otel_in_memory and spans != 1 + (n + 1) + n:
                        checks.append(f"{name} N={n}: {spans} spans recorded")
                else:
                    if v.kind == "raw sync":
                        calls, text = sync_raws[n].run_sync("go", v.stream)
                    else:
                        calls, text = await raws[n].run("go", v.stream)
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
        sync_client.close()  # noqa: ASYNC212 (the sync loop blocks this loop on purpose)
        for agent in agents.values():
            await agent.aclose()
    return {"wall": wall, "cpu": cpu, "checks": checks}


def baseline(name: str, sync: bool = False) -> str:
    """The raw loop a variant is paired with: async (default) or sync, same streaming."""
    base = "raw sync" if sync else "raw"
    return f"{base} stream" if VARIANTS[name].stream else base


def paired(s: Sequence[float], base: Sequence[float], n: int = 1) -> dict[str, dict[str, Any]]:
    """Ratio and difference per turn of ``s`` against ``base``, paired sample by sample."""
    return {
        "ratio": summary([a / b for a, b in zip(s, base, strict=True)]),
        "extra_per_turn_s": summary([(a - b) / n for a, b in zip(s, base, strict=True)]),
    }


def run(turns: Sequence[int] = (1, 20, 100), reps: int = 7,
        variants: Sequence[str] = tuple(VARIANTS)) -> dict[str, Any]:
    """Run B1 and return its results (JSON-able).

    Per N and variant: wall time of a whole run (``total_s``) and per tool turn
    (``per_turn_s``), the client process's CPU time per turn (``cpu_per_turn_s``;
    the model server runs in its own process), and for lich variants, paired with
    the raw runs of the same streaming mode in the same repetition: against the
    async raw loop ``ratio`` (lich ÷ raw), ``overhead_per_turn_s`` ((lich − raw) / N)
    and ``cpu_ratio`` / ``cpu_overhead_per_turn_s``; against the sync raw loop
    ``ratio_sync`` and ``cpu_ratio_sync``. Plugin variants also get ``ratio_vs_lich``
    and ``extra_per_turn_s`` (and their CPU forms) against plain ``lich``.
    """
    measured = asyncio.run(_measure(turns, reps, variants))
    wall, cpu = measured["wall"], measured["cpu"]
    rows: dict[str, dict[str, Any]] = {}
    for n in turns:
        per_n: dict[str, Any] = {}
        for name in variants:
            v = VARIANTS[name]
            s, c = wall[n][name], cpu[n][name]
            entry: dict[str, Any] = {
                "samples_s": s,
                "cpu_samples_s": c,
                "total_s": summary(s),
                "per_turn_s": summary([x / n for x in s]),
                "cpu_per_turn_s": summary([x / n for x in c]),
            }
            base = baseline(name)
            if v.is_lich and base in wall[n]:
                entry["vs"] = base
                pw, pc = paired(s, wall[n][base], n), paired(c, cpu[n][base], n)
                entry["ratio"] = pw["ratio"]
                entry["overhead_per_turn_s"] = pw["extra_per_turn_s"]
                entry["cpu_ratio"] = pc["ratio"]
                entry["cpu_overhead_per_turn_s"] = pc["extra_per_turn_s"]
            sync_base = baseline(name, sync=True)
            if v.kind != "raw sync" and sync_base in wall[n]:
                entry["vs_sync"] = sync_base
                entry["ratio_sync"] = paired(s, wall[n][sync_base])["ratio"]
                entry["cpu_ratio_sync"] = paired(c, cpu[n][sync_base])["ratio"]
            if v.is_lich and (v.config or v.objects or v.threaded_tool) \
                    and TARGET_VARIANT in wall[n]:
                # The same loop without the extra plugins (or with the tool inline), in the
                # same repetition.
                pw = paired(s, wall[n][TARGET_VARIANT], n)
                pc = paired(c, cpu[n][TARGET_VARIANT], n)
                entry["ratio_vs_lich"] = pw["ratio"]
                entry["extra_per_turn_s"] = pw["extra_per_turn_s"]
                entry["cpu_ratio_vs_lich"] = pc["ratio"]
                entry["cpu_extra_per_turn_s"] = pc["extra_per_turn_s"]
            per_n[name] = entry
        rows[str(n)] = per_n
    targets = []
    top = str(max(turns))
    for name in PATH_VARIANTS:
        e = rows[top].get(name, {})
        if "ratio_sync" in e:
            targets.append(Target(f"B1 {name} ÷ sync raw at N={top} (CPU: "
                                  f"{e['cpu_ratio_sync']['median']:.2f} ×)", "<=", 1.5,
                                  e["ratio_sync"]["median"]))
    main = rows[top].get(TARGET_VARIANT, {})
    if "ratio" in main:
        targets.append(Target(f"B1 lich ÷ async raw at N={top} (stream off, sessions on)",
                              "<=", 1.5, main["ratio"]["median"]))
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


def _get(e: dict[str, Any], key: str, fmt: Callable[[float], str] = _ms3) -> str:
    return fmt(e[key]["median"]) if key in e else "—"


def tables(result: dict[str, Any]) -> list[tuple[str, str]]:
    """(title, Markdown table) pairs for the report."""
    out = []
    head = ["N", "variant", "total ms", "per turn ms", "CPU/turn ms", "÷ sync raw",
            "CPU ÷ sync raw", "÷ async raw", "CPU ÷ async raw", "overhead/turn ms",
            "CPU overhead/turn ms"]
    body = []
    for n, per_n in result["runs"].items():
        for name, e in per_n.items():
            body.append([
                n, name, fmt_spread(e["total_s"], lambda x: fmt_ms(x, 1)),
                _get(e, "per_turn_s"), _get(e, "cpu_per_turn_s"),
                fmt_spread(e["ratio_sync"], fmt_ratio) if "ratio_sync" in e else "—",
                _get(e, "cpu_ratio_sync", fmt_ratio),
                fmt_spread(e["ratio"], fmt_ratio) if "ratio" in e else "—",
                _get(e, "cpu_ratio", fmt_ratio),
                _get(e, "overhead_per_turn_s"), _get(e, "cpu_overhead_per_turn_s")])
    out.append(("B1 loop overhead — median (min–max) of "
                f"{result['params']['reps']} interleaved runs; ratios paired per run against "
                "the raw loop of the same streaming mode", markdown_table(head, body)))
    turns = [n for n in result["runs"] if int(n) > 1]
    if len(turns) >= 2:
        a, b = turns[-2], turns[-1]
        head2 = ["variant", f"per turn N={a}", f"per turn N={b}",
                 f"overhead/turn N={a}", f"overhead/turn N={b}",
                 f"CPU overhead/turn N={a}", f"CPU overhead/turn N={b}"]
        body2 = []
        for name in result["runs"][b]:
            ea, eb = result["runs"][a][name], result["runs"][b][name]
            body2.append([name, _get(ea, "per_turn_s"), _get(eb, "per_turn_s"),
                          _get(ea, "overhead_per_turn_s"), _get(eb, "overhead_per_turn_s"),
                          _get(ea, "cpu_overhead_per_turn_s"),
                          _get(eb, "cpu_overhead_per_turn_s")])
        out.append(("B1 per-turn cost against history length (ms, medians)",
                    markdown_table(head2, body2)))
    body3 = [[n, name, fmt_spread(e["ratio_vs_lich"], fmt_ratio),
              fmt_spread(e["extra_per_turn_s"], _ms3), _get(e, "cpu_extra_per_turn_s")]
             for n, per_n in result["runs"].items() for name, e in per_n.items()
             if "ratio_vs_lich" in e]
    if body3:
        out.append((f"B1 plugins enabled (or the tool in a thread) ÷ plain \"{TARGET_VARIANT}\", "
                    "paired per run",
                    markdown_table(["N", "variant", "÷ lich", "extra/turn ms",
                                    "CPU extra/turn ms"], body3)))
    return out
