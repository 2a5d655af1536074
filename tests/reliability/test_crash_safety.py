"""Crash safety: a process writing a session transcript and an audit log is killed
with SIGKILL at random points, over and over.

Each time: every record the child reported as written (``_crash_child.py`` reports a
record only after it was written) is read back, byte for byte, in order; nothing in
the middle is corrupt; at most the one record being written at the kill is missing
from the report. Every other time the last line of both files is additionally cut
in half (what a machine crash mid-write leaves): the reader reports a torn tail and
skips it, and after the resume the torn line is reported as a corrupt line, skipped,
while everything around it is read. Then the session is resumed in process with
``Agent.run(..., session_id=...)``: the model sees the whole history, with the call
that was cut off answered ``cancelled``, and the run ends ``final``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from lich_examples.audit import read_audit_log

from lich.agent import Agent
from lich.hooks import hookimpl
from lich.sessions import JsonlSessionStore
from lich.testing import Reply, ScriptedChat, ScriptRequest, WaitTimeout, make_test_config, wait_for
from lich.tools import tool
from lich.types import ToolCall, ToolMessage, UserMessage

from .conftest import TALLY, check_pairs, scaled

CHILD = Path(__file__).parent / "_crash_child.py"


class _Child:
    """The child process and the records it reported, read by a thread."""

    def __init__(self, work: Path, session_id: str, seed: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(work), session_id, str(seed)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=work,
        )
        self.reported: dict[str, list[str]] = {"S": [], "A": []}
        self.started = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            tag, _, digest = raw.decode().strip().partition(" ")
            self.reported[tag].append(digest)
            self.started.set()

    def kill_after(self, delay_s: float) -> None:
        with contextlib.suppress(WaitTimeout):
            wait_for(lambda: self.started.is_set() or self.proc.poll() is not None, 60,
                     interval=0.05)
        if not self.started.is_set():
            self.proc.kill()
            raise AssertionError(f"the child never wrote a record: {self._stderr()}")
        time.sleep(delay_s)  # a random point of the child's writing: what is tested
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self._reader.join(30)
        assert self.proc.returncode == -signal.SIGKILL, self._stderr()

    def _stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")[-2000:]


def complete_lines(path: Path) -> tuple[list[bytes], bytes]:
    """The newline-terminated lines of ``path`` and the unterminated rest."""
    data = path.read_bytes()
    *lines, rest = data.split(b"\n")
    return [line for line in lines if line], rest


def check_reported(path: Path, reported: list[str], what: str) -> list[bytes]:
    """Every reported record is in the file, in order; at most one more (written, not
    yet reported when the kill came) follows."""
    lines, _rest = complete_lines(path)
    digests = [hashlib.sha1(line).hexdigest() for line in lines]
    assert digests[: len(reported)] == reported, f"{what}: a reported record is missing"
    assert len(digests) - len(reported) <= 1, f"{what}: {len(digests) - len(reported)} extra"
    return lines


def tear_last_line(path: Path, rng: random.Random) -> int:
    """Cut the last line of ``path`` somewhere in its middle; returns its line number."""
    data = path.read_bytes()
    body = data[:-1] if data.endswith(b"\n") else data
    start = body.rfind(b"\n") + 1
    cut = start + rng.randint(1, max(1, len(body) - start - 1))
    path.write_bytes(data[:cut])
    return data[:start].count(b"\n") + 1


class _Steps:
    """The same ``step`` tool as the child's, for the resumed run."""

    @hookimpl
    def lich_register_tools(self, registry: Any) -> None:
        @tool
        def step(i: int) -> str:
            """Do step i."""
            return f"step {i} done"

        registry.register(step)


def _resume_responder(request: ScriptRequest) -> Reply:
    if request.last_user() != "continue":
        return Reply("unexpected")
    if not request.tool_results_since_user():
        return Reply(tool_calls=(ToolCall("call_resume", "step", {"i": -1}),))
    return Reply("resumed and done")


@pytest.mark.slow
async def test_sigkill_at_random_points_loses_nothing(tmp_path: Path) -> None:
    rng = random.Random()
    seed = rng.randrange(10**6)
    rng.seed(seed)
    iterations = scaled(6)
    for i in range(iterations):
        work = tmp_path / f"run{i}"
        work.mkdir()
        sid = f"crash-{i}"
        child = _Child(work, sid, rng.randrange(10**6))
        child.kill_after(rng.uniform(0.0, 0.8))
        label = f"iteration {i} (seed {seed})"
        session = JsonlSessionStore(work / ".lich" / "sessions").path_for(sid)
        audit_log = work / "audit.jsonl"

        # Everything written before the kill reads back, nothing is corrupt.
        lines = check_reported(session, child.reported["S"], f"{label}: session")
        store = JsonlSessionStore(work / ".lich" / "sessions")
        contents = store.read(sid)
        assert contents.problems == (), (label, contents.problems)
        assert len(contents.records) == len(lines), label
        last_kind = contents.records[-1]["kind"]
        TALLY[f"kills after a '{last_kind}' record"] += 1
        if audit_log.exists():
            audit_lines = check_reported(audit_log, child.reported["A"], f"{label}: audit")
            assert len(read_audit_log(audit_log, strict=True)) == len(audit_lines)
        else:
            assert child.reported["A"] == [], label

        # Every other time: the last line torn in half, as a machine crash would leave it.
        torn_line = None
        if i % 2 == 1 and len(lines) > 2:
            torn_line = tear_last_line(session, rng)
            torn = store.read(sid)
            assert torn.torn_tail, label
            assert torn.problems == (), label
            assert len(torn.records) == len(lines) - 1, label
            if audit_log.exists() and audit_log.stat().st_size:
                tear_last_line(audit_log, rng)
                assert len(read_audit_log(audit_log)) == len(child.reported["A"]) - (
                    1 if len(audit_lines) == len(child.reported["A"]) else 0)
        before = store.history(sid)
        check_pairs(before)

        # Resume in process: the whole history goes to the model, the run ends final.
        chat = ScriptedChat(responder=_resume_responder)
        config = make_test_config(
            work, plugins=("audit",), plugin_settings={"audit": {"path": "audit.jsonl"}},
            context_budget_tokens=10**9,
        )
        agent = Agent(config, plugins=[("steps", _Steps())], chat=chat)
        result = await agent.run("continue", session_id=sid)
        assert (result.stopped_reason, result.text) == ("final", "resumed and done"), label
        sent = chat.requests[0].messages
        assert list(sent[: len(before)]) == before, label
        assert sent[len(before)] == UserMessage("continue")
        check_pairs(sent)

        after = store.read(sid)
        if torn_line is None:
            assert after.problems == (), (label, after.problems)
        else:
            assert len(after.problems) == 1, (label, after.problems)
            assert after.problems[0].startswith(f"line {torn_line}: corrupt record skipped")
        assert not after.torn_tail
        check_pairs(store.history(sid))
        ends = [r for r in after.records if r.get("event") == "run_end"]
        assert [e["stopped_reason"] for e in ends] == ["final"], label
        resumed_audit = read_audit_log(audit_log)
        assert resumed_audit[-1]["call_id"] == "call_resume", label
        assert all(isinstance(r, dict) for r in resumed_audit)
        TALLY["sigkills survived"] += 1
        TALLY["records written before a kill, all read back"] += len(child.reported["S"]) + len(
            child.reported["A"])
        if torn_line is not None:
            TALLY["torn lines reported and skipped"] += 1


def test_a_cut_off_call_is_answered_cancelled_on_resume(tmp_path: Path) -> None:
    """The history handed to the model after a kill in the middle of a tool: the
    assistant's call is closed with a ``cancelled`` result right after its turn."""
    store = JsonlSessionStore(tmp_path)
    writer = store.open("cut")
    from lich.types import AssistantMessage, SystemMessage

    call = ToolCall("c1", "step", {"i": 1})
    for message in (SystemMessage("s"), UserMessage("go"), AssistantMessage("", (call,))):
        writer.message(message)
    writer.close()
    history = store.history("cut")
    assert isinstance(history[-1], ToolMessage)
    assert history[-1].tool_call_id == "c1"
    assert json.loads(history[-1].content)["error"] == "cancelled"
    check_pairs(history)
