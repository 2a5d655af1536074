"""What a reader of `lich`'s pipes sees, and when: every ``--json`` line and every
progress line is readable as soon as its event happened, not when the run ends.

A real `lich` subprocess with real pipes: the scripted model answers the first call
with a tool call and then "thinks" until the test lets it go. While it does, the
events so far must already have reached the test through the pipe.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest

from lich.testing import Reply, ScriptRequest, wait_for
from lich.types import ToolCall

from .conftest import lich_command, write_config


def _responder(release: threading.Event) -> Any:
    def respond(request: ScriptRequest) -> Any:
        if not request.tool_results_since_user():
            return Reply(tool_calls=(ToolCall("c1", "list_dir", {"path": "."}),))
        release.wait(30)  # the model thinks until the test has seen the lines
        return Reply("done")

    return respond


def _reader(stream: IO[str]) -> queue.SimpleQueue[str]:
    """The lines of ``stream`` as they arrive (a thread reads it line by line)."""
    lines: queue.SimpleQueue[str] = queue.SimpleQueue()

    def read() -> None:
        for line in stream:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _until(lines: queue.SimpleQueue[str], got: list[str], last: Callable[[str], bool],
           what: str) -> None:
    def seen() -> bool:
        while not lines.empty():
            got.append(lines.get())
        return any(last(line) for line in got)

    wait_for(seen, what=what, timeout=30)


def _second_llm_start(line: str) -> bool:
    event = json.loads(line)
    return bool(event["type"] == "llm_start" and event["turn"] == 2)


@pytest.fixture
def release() -> Any:
    event = threading.Event()
    yield event
    event.set()


@pytest.mark.parametrize("json_flag", [True, False], ids=["json", "progress"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_each_line_reaches_a_pipe_reader_when_its_event_happens(
    work: Path, scripted: Any, release: threading.Event, json_flag: bool, stream: bool
) -> None:
    server = scripted(responder=_responder(release))
    write_config(work, server.base_url, extra=f"stream = {str(stream).lower()}")
    args = ["--json"] if json_flag else []
    # Python's own buffering as users get it: stdout block-buffered in a pipe, stderr
    # line-buffered; what makes each line visible must be lich's doing.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.Popen([*lich_command(), *args, "look around"], cwd=work,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        assert proc.stderr is not None
        stdout, stderr = _reader(proc.stdout), _reader(proc.stderr)
        got: list[str] = []
        # The second model call is held: lich is waiting, every line so far was written.
        if json_flag:
            _until(stdout, got, _second_llm_start, "the second llm_start on stdout")
        else:
            _until(stderr, got, lambda line: line == "[lich] turn 2\n",
                   "the second turn's line on stderr")
        assert proc.poll() is None
        release.set()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if json_flag:
        events = [json.loads(line) for line in got]
        assert [e["type"] for e in events] == [
            "run_start", "turn_start", "llm_start", "llm_end", "tool_call_start",
            "tool_call_end", "turn_end", "turn_start", "llm_start"]
        assert [e["seq"] for e in events] == list(range(1, 10))
        assert all(line.endswith("\n") and line.count("\n") == 1 for line in got)
    else:
        assert [line.split(":")[0] for line in got] == [
            "[lich] turn 1\n", '[lich] tool list_dir(path=".")', "[lich] turn 2\n"]
