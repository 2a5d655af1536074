"""Ctrl-C: a real SIGINT to a `lich` subprocess cancels the run cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from lich.sessions import read_session_file
from lich.testing import Reply, ScriptRequest, wait_for

from .conftest import SCHEMA_PATH, lich_command, write_config

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def _blocking_responder(release: threading.Event) -> Any:
    def respond(request: ScriptRequest) -> Any:
        if request.last_user().startswith("slow"):
            release.wait(30)  # until the test is over: the model "thinks" forever
            return Reply("too late")
        return Reply(f"answer to {request.last_user()}")

    return respond


@pytest.fixture
def release() -> Any:
    event = threading.Event()
    yield event
    event.set()


def test_sigint_mid_run_exits_130_and_keeps_the_transcript(
    work: Path, scripted: Any, release: threading.Event
) -> None:
    server = scripted(responder=_blocking_responder(release))
    write_config(work, server.base_url)
    proc = subprocess.Popen(
        [*lich_command(), "--json", "slow question"], cwd=work, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=dict(os.environ),
    )
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert first["type"] == "run_start"
        # Wait until the model call is in flight, then press Ctrl-C.
        wait_for(lambda: len(server.requests) == 1, what="the model call to be in flight")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    assert proc.returncode == 130, err
    assert "Traceback" not in err
    lines = [first, *(json.loads(line) for line in out.splitlines() if line.strip())]
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))
    for line in lines:
        validator.validate(line)
    assert lines[-1]["type"] == "run_end"
    assert lines[-1]["stopped_reason"] == "aborted"
    # The transcript is complete and readable.
    path = work / ".lich" / "sessions" / f"{first['session_id']}.jsonl"
    contents = read_session_file(path)
    assert contents.problems == ()
    assert not contents.torn_tail
    assert [m.content for m in contents.messages if m.role == "user"] == ["slow question"]
    end = contents.records[-1]
    assert end["kind"] == "meta"
    assert end["event"] == "run_end"
    assert end["stopped_reason"] == "aborted"


def test_sigint_in_chat_cancels_the_answer_not_the_chat(
    work: Path, scripted: Any, release: threading.Event
) -> None:
    server = scripted(responder=_blocking_responder(release))
    write_config(work, server.base_url)
    proc = subprocess.Popen(
        [*lich_command(), "chat"], cwd=work, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=dict(os.environ),
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write("slow one\n")
        proc.stdin.flush()
        wait_for(lambda: len(server.requests) == 1, what="the model call to be in flight")
        proc.send_signal(signal.SIGINT)
        proc.stdin.write("quick one\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=30)  # closes stdin: the chat ends after it
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    assert proc.returncode == 0, err
    assert "cancelling" in err
    assert "answer to quick one" in out
    assert "too late" not in out
    # The second question was asked in the same conversation.
    assert server.user_messages(1) == ["slow one", "quick one"]


def test_sigterm_cancels_like_ctrl_c_and_exits_143(
    work: Path, scripted: Any, release: threading.Event
) -> None:
    server = scripted(responder=_blocking_responder(release))
    write_config(work, server.base_url)
    proc = subprocess.Popen([*lich_command(), "slow question"], cwd=work,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ))
    try:
        wait_for(lambda: len(server.requests) == 1, what="the model call to be in flight")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    assert proc.returncode == 143, err
    assert "run aborted" in err
    sessions = list((work / ".lich" / "sessions").glob("*.jsonl"))
    assert read_session_file(sessions[0]).records[-1]["stopped_reason"] == "aborted"


def test_a_closed_stdout_stops_the_run_quietly(work: Path, scripted: Any) -> None:
    """`lich … | head -1`: once the reader is gone the run is cancelled, no traceback."""
    calls: list[int] = []

    def endless(request: ScriptRequest) -> Any:
        from lich.types import ToolCall

        calls.append(1)
        n = len(request.tool_results_since_user())
        return Reply(f"step {n}\n" * 3, (ToolCall(f"c{n}", "list_dir", {"path": "."}),))

    server = scripted(responder=endless)
    write_config(work, server.base_url)
    proc = subprocess.Popen([*lich_command(), "--max-turns", "50", "go"], cwd=work,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ))
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("step 0")
        proc.stdout.close()  # the reader leaves
        err = proc.stderr.read() if proc.stderr else ""
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    assert proc.returncode == 1, err
    assert "Traceback" not in err
    assert "raised on" not in err
    assert len(calls) < 50  # it stopped early instead of running out its budget
    assert server.requests
