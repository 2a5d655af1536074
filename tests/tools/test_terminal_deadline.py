"""terminal: a timed-out call returns its partial output within the executor's limit,
however long killing takes, and leaves no detached child behind.

Each test runs real processes: a pipe holder outside the call that ignores SIGTERM,
a kill slowed down as a loaded machine slows it, a child that clears its environment
and double-forks into a new session before the first poll.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lich.testing import async_wait_for
from lich_builtin_tools import _procs

from .conftest import Runner, kill_quietly, process_alive, wait_until_dead

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads /proc and relies on Linux process tracking")

# A process outside the call (started by the test, so no kill of the call reaches it)
# that takes the descriptors sent to it over a unix socket and keeps them open,
# ignoring SIGTERM: the call's pipes then never reach EOF by themselves.
_HOLDER = r"""
import array, signal, socket, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
srv = socket.socket(socket.AF_UNIX)
srv.bind(sys.argv[1])
srv.listen(1)
print("ready", flush=True)
conn, _ = srv.accept()
fds = array.array("i")
msg, anc, _, _ = conn.recvmsg(1, socket.CMSG_LEN(2 * fds.itemsize))
held = [anc]
while True:
    time.sleep(1)
"""

# Run inside the call: hands its stdout and stderr to the holder.
_SEND = (
    "import array, socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
    "s.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [1, 2]))])"
)


def _start_holder(sock: Path) -> subprocess.Popen[bytes]:
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(sock)],
                              stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert holder.stdout is not None
    assert holder.stdout.readline() == b"ready\n"
    return holder


async def test_pipes_held_open_outside_the_call_do_not_lose_the_partial_output(
    run: Runner, work: Path, tmp_path: Path,
) -> None:
    sock = tmp_path / "holder.sock"
    holder = _start_holder(sock)
    command = (f"trap '' TERM; echo $$ > bash.pid; echo partial-output; echo to-stderr >&2; "
               f"{sys.executable} -c \"{_SEND}\" {sock}; sleep 100")
    try:
        result = await run("terminal", {"command": command}, settings={"timeout_s": 3.0})
        pid = int((work / "bash.pid").read_text())
        # The tool's own timeout, with what the command printed: not the executor's
        # "timeout: tool:terminal exceeded 3s", which carries no output.
        assert result.error == "timeout", result.error
        assert "partial-output" in result.output
        assert "to-stderr" in result.output
        assert result.output.endswith("]")
        assert wait_until_dead([pid]) == []
        assert holder.poll() is None  # the holder is not the call's: it was left alone
    finally:
        holder.kill()
        holder.wait()


async def test_a_kill_slowed_by_load_does_not_lose_the_partial_output(
    run: Runner, work: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a loaded machine walking /proc can take seconds: the call must answer
    anyway, and the kill still finishes after it."""
    real_kill_all = _procs.CallProcesses.kill_all

    def slow_kill_all(self: _procs.CallProcesses) -> int:
        time.sleep(5.0)  # in the kill's own thread: longer than the whole limit
        return real_kill_all(self)

    monkeypatch.setattr(_procs.CallProcesses, "kill_all", slow_kill_all)
    command = "trap '' TERM; echo $$ > bash.pid; sleep 100 & echo $! > bg.pid; " \
              "echo partial-output; sleep 100"
    result = await run("terminal", {"command": command}, settings={"timeout_s": 3.0})
    pids = [int((work / name).read_text()) for name in ("bash.pid", "bg.pid")]
    try:
        assert result.error == "timeout", result.error
        assert "partial-output" in result.output
        assert result.output.endswith("[exit -1]")  # not reaped yet when it answered
        assert wait_until_dead(pids) == []  # the kill went on after the answer
    finally:
        kill_quietly(pids)


def _written(path: Path) -> bool:
    return path.exists() and bool(path.read_text().strip())


def _environ(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


def _session(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as fh:
        return int(fh.read().rsplit(b")", 1)[1].split()[3])


async def test_a_child_that_clears_its_env_and_setsids_at_once_dies_with_the_call(
    run: Runner, work: Path,
) -> None:
    """The escape: double-fork into a new session and drop the call's mark from the
    environment, all before the first poll records anything."""
    command = ("echo $$ > bash.pid; "
               "( setsid sh -c 'echo $$ > orphan.pid; exec env -i sleep 100' & ); "
               "sleep 100")
    call = asyncio.ensure_future(run("terminal", {"command": command, "timeout_ms": 4000}))
    orphan_file = work / "orphan.pid"
    await async_wait_for(lambda: call.done() or _written(orphan_file),
                         what="the detached child's pid file", interval=0.02)
    orphan = int(orphan_file.read_text())
    bash = int((work / "bash.pid").read_text())
    try:
        # What it escaped while the call ran: another session, an empty environment
        # (read it while it lives, once env -i has run), a parent that is not bash's child.
        await async_wait_for(lambda: b"LICH_TOOL_CALL" not in _environ(orphan),
                             what="env -i to have run", interval=0.02)
        assert _session(orphan) != _session(bash)
        result = await call
        assert result.error == "timeout"
        assert wait_until_dead([orphan, bash]) == []
    finally:
        kill_quietly([orphan, bash])


async def test_a_finished_call_leaves_its_setsid_server_running(
    run: Runner, work: Path,
) -> None:
    """Tracking setsid children is for calls that are killed: a call that ends by itself
    keeps its detached background job (``setsid server &`` is a common pattern)."""
    command = "setsid sh -c 'echo $$ > server.pid; exec sleep 100' > /dev/null 2>&1 & " \
              "while [ ! -s server.pid ]; do sleep 0.01; done"
    result = await run("terminal", {"command": command})
    server = int((work / "server.pid").read_text())
    try:
        assert result.ok, result.output
        assert process_alive(server)
    finally:
        kill_quietly([server])
        if process_alive(server):
            os.kill(server, signal.SIGKILL)
