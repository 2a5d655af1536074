"""B1-cli and B2-cold — the ``lich`` command as a user runs it, against the raw loop run
the same way (a fresh process each).

The model is B1's scripted server in a process of its own. **lich**: the ``lich``
console script of this environment, ``lich --config FILE --work-dir DIR go``, the
config naming the ``openai_compat`` provider and the benchmark's tool as a
single-file plugin (``bench/_tool_plugin.py`` by path), transcripts on, stdout and
stderr to files, as ``lich … >out 2>log`` (so the progress lines are the plain
``[lich] …`` ones a log gets; files, not pipes: a pipe wakes its reader — this
process, on the same cores as lich and the model — at every line, and only lich writes
lines every turn, so that reader's work would be charged to lich);
variants with ``--json`` (every event as a JSON line) and streamed or not.
**raw**: ``python bench/_raw_cli.py`` — a process that imports httpx and runs the bare
loop (sync ``httpx.Client`` or async ``httpx.AsyncClient``) with the same system
prompt, tool schema and messages. Every process gets a clean environment (empty
``HOME``, no ``LICH_*``); variants and N are interleaved in a rotating order.

B1-cli (N = 1, 20, 100 tool turns): whole-run ratios, and the marginal cost of a
turn — (run at the largest N − run at the next) ÷ the turns between, per
repetition — against the raw loops' (issue 20 states its targets on that). That
difference of two whole processes carries both processes' start-up noise, and a
ratio of two such differences explodes when the divisor's comes out near zero: the
targets take the ratio of the medians (not the median of paired ratios). Beside it,
the same cost read inside the run at the largest N: the model server's arrival times
of the request after turn a and after turn b (the client's work per turn and the
server's reply, start-up and exit left out), ÷ (b − a), paired per repetition. The
targets are judged on that one: on a shared host a fresh process's CPU time varies by
tens of milliseconds from run to run, as much as the 80 turns between N = 20 and 100
cost, so the difference of two processes can put a variant at half the raw loop's
cost per turn (seen: 0.46 ×); the server's clock sees only the turns, and it is
outside lich.
B2-cold (N = 0: the task is answered by one model call): the whole process against
the raw one making the same request.

CPU time is each child's own (``resource.getrusage(RUSAGE_CHILDREN)`` around it).
"""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import _tool_plugin
from bench._common import Target, fmt_ms, fmt_ratio, fmt_spread, markdown_table, summary
from bench._model_server import ModelServer
from bench._tool_plugin import TOOL
from bench.b2_startup import _clean_env

__all__ = ["CLI_VARIANTS", "CliVariant", "check", "commands", "run", "tables", "workspace"]

MODEL = "scripted"
TASK = "go"
BENCH = Path(__file__).resolve().parent


@dataclass(frozen=True)
class CliVariant:
    """``kind``: ``"lich"``, ``"raw sync"`` or ``"raw"`` (async); ``args``: extra flags."""

    kind: str
    stream: bool
    args: tuple[str, ...] = ()


CLI_VARIANTS: dict[str, CliVariant] = {
    "raw sync": CliVariant("raw sync", False),
    "raw sync stream": CliVariant("raw sync", True),
    "raw": CliVariant("raw", False),
    "raw stream": CliVariant("raw", True),
    "lich": CliVariant("lich", False),
    "lich stream": CliVariant("lich", True),
    "lich --json": CliVariant("lich", False, ("--json",)),
    "lich stream --json": CliVariant("lich", True, ("--json",)),
}


def _lich_command() -> list[str]:
    script = Path(sys.executable).parent / "lich"
    return [str(script)] if script.exists() else [sys.executable, "-m", "lich"]


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string


def _write_config(path: Path, base_url: str, stream: bool, turns: int) -> None:
    path.write_text(
        f"plugins = [\"openai_compat\", {_toml_str(str(BENCH / '_tool_plugin.py'))}]\n"
        f"stream = {'true' if stream else 'false'}\n"
        f"max_turns = {turns + 1}\n\n"
        "[[providers]]\n"
        "kind = \"openai_compat\"\n"
        "name = \"bench\"\n"
        f"model = {_toml_str(MODEL)}\n"
        f"base_url = {_toml_str(base_url)}\n",
        encoding="utf-8")


def check(name: str, v: CliVariant, n: int, proc: subprocess.CompletedProcess[str]) -> str:
    """What is wrong with a run's outcome ('' when it answered as scripted)."""
    if proc.returncode != 0:
        return f"exited {proc.returncode}: {proc.stderr[-400:]}"
    if v.kind != "lich":
        got = json.loads(proc.stdout)
        return "" if got == {"calls": n + 1, "text": "done"} else f"answered {got}"
    if "--json" in v.args:
        events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
        kinds = [e.get("type") for e in events]
        if kinds.count("tool_call_end") != n or not events or kinds[-1] != "run_end" \
                or events[-1].get("stopped_reason") != "final":
            return f"events {kinds[-3:]}, {kinds.count('tool_call_end')} tool calls"
        return ""
    lines = proc.stderr.count(f"[lich] tool {TOOL}(")
    if proc.stdout.strip() != "done" or lines != n:
        return f"stdout {proc.stdout.strip()[-80:]!r}, {lines} tool lines on stderr"
    return ""


def workspace(root: Path) -> tuple[Path, dict[str, str]]:
    """A work dir and a clean environment (its own empty ``HOME``) under ``root``."""
    work, home = root / "work", root / "home"
    work.mkdir()
    home.mkdir()
    return work, _clean_env(home)


def commands(root: Path, work: Path, server: ModelServer, turns: Sequence[int],
             variants: Sequence[str]) -> dict[tuple[int, str], list[str]]:
    """The command line of each (N, variant), its config or spec file written in ``root``."""
    from lich.agent import default_system_prompt

    d = _tool_plugin.echo_tool.definition()
    tools = [{"type": "function", "function": {
        "name": d.name, "description": d.description, "parameters": dict(d.parameters)}}]
    argv: dict[tuple[int, str], list[str]] = {}
    for n in turns:
        spec = root / f"raw-{n}.json"
        spec.write_text(json.dumps({
            "base_url": server.base_url(n), "model": MODEL, "task": TASK, "tools": tools,
            "system": default_system_prompt(str(work.resolve()))}), encoding="utf-8")
        for stream in (False, True):
            _write_config(root / f"lich-{n}-{int(stream)}.toml", server.base_url(n), stream, n)
        for name in variants:
            v = CLI_VARIANTS[name]
            if v.kind == "lich":
                argv[n, name] = [*_lich_command(), "--config",
                                 str(root / f"lich-{n}-{int(v.stream)}.toml"),
                                 "--work-dir", str(work), *v.args, TASK]
            else:
                argv[n, name] = [sys.executable, str(BENCH / "_raw_cli.py"), str(spec),
                                 "sync" if v.kind == "raw sync" else "async",
                                 "stream" if v.stream else "whole"]
    return argv


def run(turns: Sequence[int] = (1, 20, 100), reps: int = 5,
        variants: Sequence[str] = tuple(CLI_VARIANTS), warm_up: bool = True) -> dict[str, Any]:
    """Run B1-cli (or B2-cold, with ``turns=(0,)``) and return its results (JSON-able).

    ``warm_up``: one unmeasured round first (the smoke test skips it).
    """
    checks: list[str] = []
    wall: dict[int, dict[str, list[float]]] = {n: {v: [] for v in variants} for n in turns}
    cpu: dict[int, dict[str, list[float]]] = {n: {v: [] for v in variants} for n in turns}
    tool_turns = sorted(n for n in turns if n > 0)
    # Turns a → b inside the run at b (the model server's arrival times), per variant.
    span = (tool_turns[-2], tool_turns[-1]) if len(tool_turns) >= 2 else None
    in_run: dict[str, list[float]] = {v: [] for v in variants}
    with ModelServer(TOOL, list(turns)) as server, \
            tempfile.TemporaryDirectory(prefix="lich-bench-cli-") as tmp:
        root = Path(tmp)
        work, env = workspace(root)
        argv = commands(root, work, server, turns, variants)

        def once(n: int, name: str) -> tuple[float, float, float | None]:
            out_path, err_path = root / "stdout.txt", root / "stderr.txt"
            with out_path.open("w+b") as out, err_path.open("w+b") as err:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                started = time.perf_counter()
                done = subprocess.run(argv[n, name], cwd=work, env=env, stdout=out,
                                      stderr=err, stdin=subprocess.DEVNULL, timeout=300,
                                      check=False)
                elapsed = time.perf_counter() - started
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
            proc = subprocess.CompletedProcess(
                done.args, done.returncode, out_path.read_text(encoding="utf-8"),
                err_path.read_text(encoding="utf-8"))
            problem = check(name, CLI_VARIANTS[name], n, proc)
            # Request k arrives after k tool turns (request 0 is the task's first call).
            arrived = server.take_times(n)
            per_turn = None
            if span is not None and n == span[1]:
                if len(arrived) == n + 1:
                    per_turn = (arrived[n] - arrived[span[0]]) / (n - span[0])
                elif not problem:
                    problem = f"the model server saw {len(arrived)} requests, not {n + 1}"
            if problem:
                checks.append(f"{name} N={n}: {problem}")
            cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            return elapsed, cpu_s, per_turn

        for n in turns if warm_up else ():  # the file system caches, the server's threads
            for name in variants:
                once(n, name)
        for rep in range(reps):
            shift = rep % len(variants)
            order = [*variants[shift:], *variants[:shift]]
            for n in turns:
                for name in order:
                    w, c, per_turn = once(n, name)
                    wall[n][name].append(w)
                    cpu[n][name].append(c)
                    if per_turn is not None:
                        in_run[name].append(per_turn)
    return _results(turns, reps, variants, wall, cpu, checks, in_run)


def _base(name: str, sync: bool) -> str:
    base = "raw sync" if sync else "raw"
    return f"{base} stream" if CLI_VARIANTS[name].stream else base


def _ratios(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    return summary([x / y for x, y in zip(a, b, strict=True)])


def _median_ratio(a: Sequence[float], b: Sequence[float]) -> float:
    """median(a) ÷ median(b): for differences, whose paired ratios explode."""
    return float(statistics.median(a) / statistics.median(b))


def _results(turns: Sequence[int], reps: int, variants: Sequence[str],
             wall: dict[int, dict[str, list[float]]], cpu: dict[int, dict[str, list[float]]],
             checks: list[str], in_run: dict[str, list[float]] | None = None
             ) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {}
    for n in turns:
        per_n: dict[str, Any] = {}
        for name in variants:
            e: dict[str, Any] = {"samples_s": wall[n][name], "cpu_samples_s": cpu[n][name],
                                 "total_s": summary(wall[n][name]),
                                 "cpu_s": summary(cpu[n][name])}
            if CLI_VARIANTS[name].kind == "lich":
                for key, sync in (("sync", True), ("async", False)):
                    base = _base(name, sync)
                    if base in wall[n]:
                        e[f"vs_{key}"] = base
                        e[f"ratio_{key}"] = _ratios(wall[n][name], wall[n][base])
                        e[f"cpu_ratio_{key}"] = _ratios(cpu[n][name], cpu[n][base])
            per_n[name] = e
        rows[str(n)] = per_n
    marginal: dict[str, Any] = {}
    tool_turns = sorted(n for n in turns if n > 0)
    if len(tool_turns) >= 2:
        a, b = tool_turns[-2], tool_turns[-1]
        per_turn = {name: [(y - x) / (b - a) for x, y in zip(wall[a][name], wall[b][name],
                                                                strict=True)]
                    for name in variants}
        cpu_turn = {name: [(y - x) / (b - a) for x, y in zip(cpu[a][name], cpu[b][name],
                                                                strict=True)]
                    for name in variants}
        marginal = {"between": [a, b], "variants": {}}
        in_run = in_run or {}
        for name in variants:
            m: dict[str, Any] = {"per_turn_s": summary(per_turn[name]),
                                 "cpu_per_turn_s": summary(cpu_turn[name])}
            inside = in_run.get(name, [])
            if inside:
                m["in_run_per_turn_s"] = summary(inside)
            if CLI_VARIANTS[name].kind == "lich":
                for key, sync in (("sync", True), ("async", False)):
                    base = _base(name, sync)
                    if base in per_turn:
                        m[f"ratio_{key}"] = _median_ratio(per_turn[name], per_turn[base])
                        m[f"cpu_ratio_{key}"] = _median_ratio(cpu_turn[name], cpu_turn[base])
                        m[f"paired_ratio_{key}"] = _ratios(per_turn[name], per_turn[base])
                        base_inside = in_run.get(base, [])
                        if inside and len(base_inside) == len(inside):
                            m[f"in_run_ratio_{key}"] = _ratios(inside, base_inside)
            marginal["variants"][name] = m
    targets = []
    if marginal:
        a, b = marginal["between"]
        for name, m in marginal["variants"].items():
            if "in_run_ratio_sync" in m:
                targets.append(Target(
                    f"B1-cli {name}: cost per turn inside the run (N={b}) ÷ sync raw "
                    f"(whole processes N={a}→{b}: {m['ratio_sync']:.2f} ×, CPU "
                    f"{m['cpu_ratio_sync']:.2f} ×)", "<=", 1.5,
                    m["in_run_ratio_sync"]["median"]))
            elif "ratio_sync" in m:
                targets.append(Target(
                    f"B1-cli {name}: cost per turn (N={a}→{b}) ÷ sync raw (CPU: "
                    f"{m['cpu_ratio_sync']:.2f} ×)", "<=", 1.5, m["ratio_sync"]))
    if 0 in turns:
        for name in ("lich stream", "lich"):
            e = rows["0"].get(name, {})
            if "ratio_sync" in e:
                targets.append(Target(
                    f"B2-cold `{' '.join(['lich', *CLI_VARIANTS[name].args])} TASK` "
                    f"({'stream' if CLI_VARIANTS[name].stream else 'no stream'}) ÷ python + "
                    f"httpx, same request (CPU: {e['cpu_ratio_sync']['median']:.2f} ×)",
                    "<=", 1.5, e["ratio_sync"]["median"]))
    return {"params": {"turns": list(turns), "reps": reps, "variants": list(variants)},
            "runs": rows, "marginal": marginal, "checks": checks,
            "targets": [t.as_dict() for t in targets]}


def _get(e: dict[str, Any], key: str, fmt: Any = fmt_ratio) -> str:
    return fmt(e[key]["median"]) if key in e else "—"


def tables(result: dict[str, Any]) -> list[tuple[str, str]]:
    """(title, Markdown table) pairs for the report."""
    cold = result["params"]["turns"] == [0]
    label = "B2-cold" if cold else "B1-cli"
    head = ["N", "variant", "total ms", "CPU ms", "÷ sync raw", "CPU ÷ sync raw",
            "÷ async raw", "CPU ÷ async raw"]
    body = []
    for n, per_n in result["runs"].items():
        for name, e in per_n.items():
            body.append([n, name, fmt_spread(e["total_s"], lambda x: fmt_ms(x, 1)),
                         fmt_ms(e["cpu_s"]["median"], 1),
                         fmt_spread(e["ratio_sync"], fmt_ratio) if "ratio_sync" in e else "—",
                         _get(e, "cpu_ratio_sync"),
                         fmt_spread(e["ratio_async"], fmt_ratio) if "ratio_async" in e else "—",
                         _get(e, "cpu_ratio_async")])
    title = (f"{label} — fresh processes, median (min–max) of {result['params']['reps']} "
             "interleaved runs; ratios paired per run against the raw loop of the same "
             "streaming mode")
    out = [(title, markdown_table(head, body))]
    marginal = result["marginal"]
    if marginal:
        a, b = marginal["between"]
        head2 = ["variant", "ms per turn", "CPU ms per turn", "÷ sync raw", "CPU ÷ sync raw",
                 "÷ async raw", "CPU ÷ async raw", "in-run ms per turn", "in-run ÷ sync raw",
                 "in-run ÷ async raw"]

        def plain(m: dict[str, Any], key: str) -> str:
            return fmt_ratio(m[key]) if key in m else "—"

        def spread(m: dict[str, Any], key: str) -> str:
            return fmt_spread(m[key], fmt_ratio) if key in m else "—"

        body2 = [[name, fmt_ms(m["per_turn_s"]["median"], 3),
                  fmt_ms(m["cpu_per_turn_s"]["median"], 3),
                  plain(m, "ratio_sync"), plain(m, "cpu_ratio_sync"),
                  plain(m, "ratio_async"), plain(m, "cpu_ratio_async"),
                  (fmt_ms(m["in_run_per_turn_s"]["median"], 3)
                   if "in_run_per_turn_s" in m else "—"),
                  spread(m, "in_run_ratio_sync"), spread(m, "in_run_ratio_async")]
                 for name, m in marginal["variants"].items()]
        out.append((f"B1-cli — cost of one more tool turn: (run at N={b} − run at N={a}) ÷ "
                    f"{b - a}, medians of {result['params']['reps']} repetitions and their "
                    "ratio; in-run: the model server's time from the request after turn "
                    f"{a} to the one after turn {b} of the N={b} run, ÷ {b - a}, paired per "
                    "repetition", markdown_table(head2, body2)))
    return out
