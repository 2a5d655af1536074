"""B3's baseline, in a process of its own: the gateway's load on ``Agent.run`` directly.

``python -m bench._direct SPEC_JSON`` loads the lich config file named in the
spec (the same file the gateway is started with), then runs K conversations
concurrently on one shared :class:`lich.Agent`, each sending M messages one
after the other, as the gateway's bus does: a stable session id per
conversation, the history kept in memory and capped to the same
``history_cap``, a cancel token per run. It prints one JSON line: the
elapsed and CPU time, every message's latency, RSS before and after, and the peak.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

from bench._common import rss_kib

__all__ = ["main", "run_load"]


async def run_load(spec: dict[str, Any]) -> dict[str, Any]:
    """Run the load described by ``spec``; see the module docstring."""
    from lich.agent import Agent
    from lich.cancel import CancelToken
    from lich.config import load_config
    from lich.gateway.bus import cap_history
    from lich.types import Message

    env = {k: v for k, v in os.environ.items() if not k.startswith("LICH_")}
    config = load_config(config_path=spec["config"], env=env).config
    agent = Agent(config)
    cap = int(spec["history_cap"])
    k, m, prefix = int(spec["k"]), int(spec["m"]), spec["prefix"]
    latencies: list[float] = []
    problems: list[str] = []

    async def conversation(chat: str) -> None:
        history: list[Message] = []
        session_id = f"direct-{chat}"
        for i in range(m):
            started = time.perf_counter()
            result = await agent.run(f"message {i}", history=list(history),
                                     session_id=session_id, cancel=CancelToken())
            latencies.append(time.perf_counter() - started)
            if result.text != spec["expect"]:
                problems.append(f"{chat}#{i}: {result.stopped_reason} {result.text!r}")
            history = cap_history(result.messages, cap)

    try:
        await conversation(f"{prefix}-warmup")  # imports, connections, first-call caches
        latencies.clear()
        before = rss_kib()
        cpu_started = time.process_time()
        started = time.perf_counter()
        await asyncio.gather(*(conversation(f"{prefix}-{i}") for i in range(k)))
        elapsed = time.perf_counter() - started
        cpu_used = time.process_time() - cpu_started
        after = rss_kib()
    finally:
        await agent.aclose()
    return {
        "elapsed_s": elapsed,
        "cpu_s": cpu_used,
        "latencies_s": latencies,
        "rss_before_kib": before["rss"],
        "rss_after_kib": after["rss"],
        "peak_rss_kib": after["peak"],
        "problems": problems[:10],
        "problem_count": len(problems),
    }


def main(argv: list[str]) -> int:
    """Run the spec given as the only argument and print the result as one JSON line."""
    spec = json.loads(argv[0])
    print(json.dumps(asyncio.run(run_load(spec))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
