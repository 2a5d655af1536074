"""Helpers of the approval tests: a plugin whose ``note`` tool asks first, a scripted
model that calls tools, and a real ``lich`` process on a pseudo-terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lich.testing import ScriptRequest, wait_for

from .conftest import lich_command

PLUGIN = '''
"""Test tools: `note` (writes a file, asks first, previews a diff; locked.txt is
blocked), `peek` (read-only)."""
import difflib
from pathlib import Path

from lich import Ask, Block, hookimpl, tool


def _preview(args, work_dir):
    path = Path(work_dir) / args["path"]
    if not path.exists():
        return None
    old = path.read_text(encoding="utf-8").splitlines(keepends=True)
    new = (args["text"] + "\\n").splitlines(keepends=True)
    return "".join(difflib.unified_diff(old, new, "a/" + args["path"], "b/" + args["path"]))


@tool(preview=_preview)
def note(path: str, text: str) -> str:
    """Write text to a file of the work dir."""
    Path(path).write_text(text + "\\n", encoding="utf-8")
    return "wrote " + path


@tool(read_only=True)
def peek() -> str:
    """Look, change nothing."""
    return "peeked"


@hookimpl
def lich_register_tools(registry):
    registry.register(note)
    registry.register(peek)


@hookimpl
def lich_before_tool_call(call):
    if call.name != "note":
        return None
    if call.args.get("path") == "locked.txt":
        return Block("locked.txt is locked")
    return Ask("notes need a human")
'''


def write_plugin(work: Path) -> Path:
    """``<work>/asking.py``: the plugin above."""
    path = work / "asking.py"
    path.write_text(PLUGIN, encoding="utf-8")
    return path


def tool_results(requests: Sequence[ScriptRequest]) -> list[str]:
    """The tool messages' contents the model was sent last (in order)."""
    if not requests:
        return []
    return [m.content for m in requests[-1].messages if m.role == "tool"]


_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]"
                   r"|\x1b[=>78]|\r")


def terminal_env(**extra: str) -> dict[str, str]:
    """The environment of a ``lich`` on the pseudo-terminal: a known terminal type and
    width, and prompt_toolkit not waiting for cursor-position answers."""
    env = dict(os.environ)
    env.update(TERM="xterm", COLUMNS="200", LINES="50", PROMPT_TOOLKIT_NO_CPR="1",
               NO_COLOR="1")
    env.pop("VISUAL", None)
    env.pop("EDITOR", None)
    env.update(extra)
    return env


# The pseudo-terminal becomes the new session's controlling terminal, as a real one is
# (so /dev/tty is it), then lich is started in its place.
_AS_CONTROLLING_TERMINAL = (
    "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


class Terminal:
    """A real ``lich ARGS`` with stdin, stdout and stderr on one pseudo-terminal
    (``stderr``: a file for stderr instead), which is its controlling terminal
    (``controlling=False``: a terminal on its descriptors, none to open as /dev/tty).

    What it writes is collected by a reader thread; :meth:`expect` polls it (bounded)
    for the next occurrence of a text, escape sequences removed.
    """

    def __init__(self, args: Sequence[str], cwd: Path, env: dict[str, str],
                 stderr: Any = None, controlling: bool = True) -> None:
        self.leader, follower = pty.openpty()
        # 50 rows, 200 columns: nothing the tests look for is wrapped.
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        try:
            self.proc = subprocess.Popen(
                [*([sys.executable, "-c", _AS_CONTROLLING_TERMINAL] if controlling else []),
                 *lich_command(), *args],
                cwd=cwd, env=env, stdin=follower, stdout=follower,
                stderr=follower if stderr is None else stderr, start_new_session=True,
                close_fds=True,
            )
        finally:
            os.close(follower)
        self._data = bytearray()
        self._lock = threading.Lock()
        self._pos = 0
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        while True:
            try:
                chunk = os.read(self.leader, 65536)
            except OSError:  # EIO: every follower end is closed
                return
            if not chunk:
                return
            with self._lock:
                self._data += chunk

    @property
    def text(self) -> str:
        """Everything written so far, without escape sequences."""
        with self._lock:
            raw = bytes(self._data)
        return _ANSI.sub("", raw.decode("utf-8", errors="replace"))

    def expect(self, needle: str, timeout: float = 60) -> str:
        """Wait until ``needle`` appears after the previous match; the text up to it."""

        def found() -> int | None:
            index = self.text.find(needle, self._pos)
            if index >= 0:
                return index + 1  # truthy even at 0
            if self.proc.poll() is not None and not self._reader.is_alive():
                raise AssertionError(f"lich exited ({self.proc.returncode}) before "
                                     f"{needle!r} appeared:\n{self.text}")
            return None

        try:
            index = wait_for(found, timeout, f"{needle!r} on the terminal") - 1
        except AssertionError:
            raise AssertionError(f"{needle!r} did not appear; the terminal shows:\n"
                                 f"{self.text}") from None
        before = self.text[self._pos:index]
        self._pos = index + len(needle)
        return before

    def send(self, keys: str) -> None:
        """Type ``keys`` (``\\r`` is Enter, ``\\x03`` Ctrl-C, ``\\x04`` Ctrl-D)."""
        os.write(self.leader, keys.encode())

    def wait(self, timeout: float = 60) -> int:
        """The exit code, once the process ends (and the reader read everything)."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"lich did not exit; the terminal shows:\n{self.text}") from None
        self._reader.join(timeout)
        return code

    def close(self) -> None:
        """Stop the process (by its pid) if it still runs; release the terminal."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self._reader.join(30)
        os.close(self.leader)
