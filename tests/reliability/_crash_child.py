"""The process ``test_crash_safety.py`` kills with SIGKILL at a random point.

Usage: ``python _crash_child.py WORK_DIR SESSION_ID SEED``.

A real :class:`lich.Agent` run loop (in-process scripted model, the ``audit``
plugin from ``lich-examples``, a sync ``step`` tool) that goes on for thousands of
turns, one to three tool calls each, with small random pauses in the model call
and in the tool, so a kill can land anywhere: in a model call, in a tool, in a hook,
between two records or in the middle of writing one.

Every record is reported on stdout *after* it was written (``S <sha1>`` for a
session record, ``A <sha1>`` for an audit line, the hash of the line without its
newline), so the parent knows exactly which records were complete before the kill.
"""

from __future__ import annotations

import hashlib
import random
import sys
import time
from pathlib import Path
from typing import Any

import lich_examples.audit as audit

from lich import Agent, tool
from lich.sessions import SessionWriter
from lich.testing import Reply, ScriptedChat, ScriptRequest, make_test_config
from lich.types import ToolCall

STEPS = 10_000


def _report(tag: str, path: Path, before: int) -> None:
    with open(path, "rb") as f:
        f.seek(before)
        data = f.read()
    for line in data.split(b"\n"):
        if line:
            sys.stdout.write(f"{tag} {hashlib.sha1(line).hexdigest()}\n")
    sys.stdout.flush()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def instrument() -> None:
    """Report every session record and audit line once it is written."""
    append = SessionWriter.append

    def reporting_append(self: SessionWriter, kind: str, **fields: Any) -> None:
        before = _size(self.path)
        append(self, kind, **fields)
        _report("S", self.path, before)

    SessionWriter.append = reporting_append  # type: ignore[method-assign]
    append_line = audit.append_line

    def reporting_append_line(path: Path, record: Any, *, fsync: bool = True) -> None:
        before = _size(path)
        append_line(path, record, fsync=fsync)
        _report("A", path, before)

    audit.append_line = reporting_append_line


class Steps:
    """An in-process plugin with the sync ``step`` tool."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def lich_register_tools(self, registry: Any) -> None:
        rng = self.rng

        @tool(timeout_s=60)
        def step(i: int) -> str:
            """Do step i (a little work, a little waiting)."""
            time.sleep(rng.random() * 0.003)
            return f"step {i} done " + "." * rng.randrange(0, 400)

        registry.register(step)


def main() -> None:
    work_dir, session_id, seed = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    instrument()

    def respond(request: ScriptRequest) -> Reply:
        done = len(request.tool_results_since_user())
        if done >= STEPS:
            return Reply("all steps done")
        calls = tuple(ToolCall(f"call_{done + k}", "step", {"i": done + k})
                      for k in range(rng.randint(1, 3)))
        return Reply(rng.choice(["", "next", "going on"]), calls,
                     delay_s=rng.random() * 0.002)

    config = make_test_config(
        work_dir, plugins=("audit",), plugin_settings={"audit": {"path": "audit.jsonl"}},
        max_turns=STEPS, context_budget_tokens=10**9,
    )
    agent = Agent(config, plugins=[("steps", Steps(rng))], chat=ScriptedChat(responder=respond))
    agent.run_sync("count a long way", session_id=session_id)


if __name__ == "__main__":
    main()
