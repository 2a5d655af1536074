"""Run by ``test_audit.py`` in a subprocess that the test kills with SIGKILL mid-run.

Usage: ``python _audit_child.py WORK_DIR READY_FILE``. The agent calls the
tool ``step`` for i = 1, 2, 3, …; on the fourth call the tool writes
READY_FILE and hangs, so the process is killed while a tool is running and
after three calls have finished.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from lich import Agent, tool
from lich.testing import Reply, ScriptedChat, ScriptRequest, make_test_config
from lich.types import ToolCall

HANG_AT = 4


class Steps:
    """An in-process plugin with the ``step`` tool."""

    def __init__(self, ready: Path) -> None:
        self.ready = ready

    def lich_register_tools(self, registry: Any) -> None:
        ready = self.ready

        @tool(timeout_s=600)
        def step(i: int) -> str:
            """Do step i."""
            if i == HANG_AT:
                ready.write_text("hanging")
                time.sleep(600)
            return f"step {i} done"

        registry.register(step)


def respond(request: ScriptRequest) -> Reply:
    done = len(request.tool_results_since_user())
    return Reply(tool_calls=(ToolCall(f"call_{done + 1}", "step", {"i": done + 1}),))


def main() -> None:
    work_dir, ready = Path(sys.argv[1]), Path(sys.argv[2])
    config = make_test_config(
        work_dir, plugins=("audit",), plugin_settings={"audit": {"path": "audit.jsonl"}},
        max_turns=10,
    )
    agent = Agent(config, plugins=[("steps", Steps(ready))], chat=ScriptedChat(responder=respond))
    agent.run_sync("count to ten")


if __name__ == "__main__":
    main()
