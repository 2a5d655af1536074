"""B5 — memory: the peak RSS of an N-turn run and of an idle gateway.

Each is read from a process of its own (``/proc/<pid>/status`` VmRSS and
VmHWM, and ``getrusage``): the run in :mod:`bench._memory_run` against the
scripted model (served by a third process), the gateway as
``python -m lich gateway webhook`` after it started listening, before any
message. ``python -c`` with nothing imported gives the interpreter's own floor.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import fmt_kib, markdown_table, rss_kib, summary
from bench._model_server import ModelServer
from bench._tool_plugin import TOOL
from bench.b3_gateway import Gateway, _clean_env, _repo_root, write_config

__all__ = ["run", "tables"]

# VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec from the forking parent.
_BARE = ("print([l.split()[1] for l in open('/proc/self/status') "
         "if l.startswith('VmHWM')][0])")


def run(turns: int = 100, reps: int = 3) -> dict[str, Any]:
    """Run B5 and return its results (JSON-able)."""
    out: dict[str, Any] = {"params": {"turns": turns, "reps": reps}, "checks": []}
    runs: list[dict[str, Any]] = []
    idle: list[dict[str, int]] = []
    bare: list[int] = []
    with tempfile.TemporaryDirectory(prefix="lich-bench-b5-") as tmp, \
            ModelServer(TOOL, [turns, 1]) as model:
        work = Path(tmp)
        for rep in range(reps):
            proc = subprocess.run(
                [sys.executable, "-m", "bench._memory_run", model.base_url(turns),
                 model.base_url(1), str(turns), str(work)],
                capture_output=True, text=True, cwd=_repo_root(), env=_clean_env(), timeout=300,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"the measured run failed:\n{proc.stderr[-2000:]}")
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            if (result["turns_used"], result["text"]) != (turns + 1, "done"):
                out["checks"].append(f"run {rep}: {result['turns_used']} turns, "
                                     f"{result['text']!r}")
            runs.append(result)
            bare.append(int(subprocess.run([sys.executable, "-S", "-c", _BARE],
                                           capture_output=True, text=True,
                                           check=True).stdout))
            gateway_dir = work / f"gateway{rep}"
            gateway_dir.mkdir()
            config = write_config(gateway_dir, model.base_url(1), max_conversations=200)
            gateway = Gateway(config, gateway_dir).start()
            try:
                time.sleep(0.5)  # let start-up garbage settle; nothing else happens
                idle.append(rss_kib(gateway.pid))
            finally:
                gateway.stop()
    out["run_peak_rss_kib"] = summary([r["peak_rss_kib"] for r in runs])
    out["run_rss_start_kib"] = summary([r["rss_start_kib"] for r in runs])
    out["run_rss_before_kib"] = summary([r["rss_before_kib"] for r in runs])
    out["first_call_growth_kib"] = summary([r["rss_before_kib"] - r["rss_start_kib"]
                                            for r in runs])
    # Above the high-water mark the warm-up left, what the long run needed at its peak.
    out["run_growth_kib"] = summary([r["peak_rss_kib"] - max(r["rss_before_kib"],
                                                             r["peak_before_kib"])
                                     for r in runs])
    out["run_messages"] = runs[0]["messages"] if runs else 0
    out["gateway_idle_rss_kib"] = summary([i["rss"] for i in idle])
    out["gateway_idle_peak_kib"] = summary([i["peak"] for i in idle])
    out["python_bare_peak_kib"] = summary(bare)
    out["targets"] = []  # the issue sets no memory target: B5 reports
    return out


def tables(result: dict[str, Any]) -> list[tuple[str, str]]:
    """(title, Markdown table) pairs for the report."""
    turns = result["params"]["turns"]

    def mib(key: str) -> str:
        return fmt_kib(result[key]["median"])

    head = ["process", "RSS MiB", "peak RSS MiB"]
    body = [
        ["agent built, no model call yet", mib("run_rss_start_kib"), "—"],
        ["after a first short run (imports httpx, TLS defaults)", mib("run_rss_before_kib"),
         "—"],
        [f"then a {turns}-turn run ({result['run_messages']} messages, sessions on)", "—",
         f"{mib('run_peak_rss_kib')} (+{mib('run_growth_kib')})"],
        ["idle gateway (webhook), after start", mib("gateway_idle_rss_kib"),
         mib("gateway_idle_peak_kib")],
        ["`python -S -c` (the interpreter alone)", "—", mib("python_bare_peak_kib")],
    ]
    return [(f"B5 memory — medians of {result['params']['reps']} processes",
             markdown_table(head, body))]
