"""Shared kit of the reliability suite: iteration scale, a tally of what was tried,
transcript and leak checks.

Iteration counts are small so the suite stays fast in CI; set
``LICH_RELIABILITY_SCALE=10`` (or more) to multiply them for a local soak run.
The tally (faults injected, plugins tried, inputs generated, kills survived …)
is printed at the end of the run; ``docs/reliability.md`` quotes it.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from lich.sessions import JsonlSessionStore, SessionContents
from lich.types import AssistantMessage, Message, SystemMessage, ToolMessage, UserMessage


def _scale() -> int:
    raw = os.environ.get("LICH_RELIABILITY_SCALE", "1").strip() or "1"
    try:
        return max(1, int(raw))
    except ValueError:
        raise pytest.UsageError(
            f"LICH_RELIABILITY_SCALE must be a whole number, got {raw!r}"
        ) from None


SCALE = _scale()

TALLY: Counter[str] = Counter()
"""What the suite tried, by kind; printed in the terminal summary."""


def scaled(n: int) -> int:
    """``n`` iterations in CI, ``n * LICH_RELIABILITY_SCALE`` locally."""
    return n * SCALE


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not TALLY:
        return
    terminalreporter.section(f"reliability tally (LICH_RELIABILITY_SCALE={SCALE})")
    for key in sorted(TALLY):
        terminalreporter.write_line(f"{key}: {TALLY[key]}")


@pytest.fixture
async def loop_errors() -> AsyncIterator[list[dict[str, Any]]]:
    """Everything the event loop's exception handler sees during the test
    ("Task exception was never retrieved" and the like). Tests assert it is empty."""
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    yield seen
    loop.set_exception_handler(previous)


def check_pairs(messages: Sequence[Message], *, allow_dangling: bool = False) -> None:
    """Assert the message sequence is one a provider accepts: a system message first
    (if any), every tool message answering a call of the assistant turn before it, and
    (unless ``allow_dangling``) every call answered."""
    pending: dict[str, str] = {}
    for i, message in enumerate(messages):
        if isinstance(message, SystemMessage):
            assert i == 0, f"system message at {i}"
        if isinstance(message, ToolMessage):
            assert message.tool_call_id in pending, f"tool result {message.tool_call_id} at {i} " \
                "answers no open call"
            assert pending.pop(message.tool_call_id) == message.name
            continue
        if not allow_dangling:
            assert not pending, f"calls {sorted(pending)} unanswered before message {i}"
        pending = {}
        if isinstance(message, AssistantMessage):
            pending = {c.id: c.name for c in message.tool_calls}
        else:
            assert isinstance(message, UserMessage | SystemMessage)
    if not allow_dangling:
        assert not pending, f"calls {sorted(pending)} unanswered at the end"


def read_session(session_dir: str | Path, session_id: str) -> SessionContents:
    """A session read back, asserting it has no problems and no torn line."""
    contents = JsonlSessionStore(session_dir).read(session_id)
    assert contents.problems == (), contents.problems
    assert not contents.torn_tail
    return contents


def run_ends(contents: SessionContents) -> list[dict[str, Any]]:
    """The ``run_end`` meta records of a session."""
    return [r for r in contents.records if r["kind"] == "meta" and r.get("event") == "run_end"]


def recorded_events(contents: SessionContents) -> list[str]:
    """The types of the events recorded in a session."""
    return [r["event"]["type"] for r in contents.records if r["kind"] == "event"]


def child_pids(parent: int | None = None) -> set[int]:
    """Live (non-zombie) processes whose parent is ``parent`` (this process by default),
    found by scanning /proc."""
    parent = os.getpid() if parent is None else parent
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("latin-1")
        except OSError:
            continue
        # The command name is in parentheses and may contain spaces: split after it.
        fields = stat.rsplit(")", 1)[-1].split()
        state, ppid = fields[0], int(fields[1])
        if ppid == parent and state != "Z":
            found.add(int(entry))
    return found


def descendants(pids: Iterable[int]) -> set[int]:
    """``pids`` and every live process below them."""
    out: set[int] = set()
    todo = list(pids)
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        out.add(pid)
        todo.extend(child_pids(pid))
    return out


_LOOPBACK = ("127.", "::1", "localhost", "0:0:0:0:0:0:0:1")


def _is_loopback(address: Any) -> bool:
    if isinstance(address, tuple) and address:
        address = address[0]
    if isinstance(address, bytes):
        address = address.decode("ascii", "replace")
    if not isinstance(address, str):
        return False
    return address.startswith(_LOOPBACK) or address == "" or address.startswith("/")


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Refuse (and record) every connection and name lookup that is not loopback or a
    Unix socket, for the whole test; the test fails if anything tried."""
    import socket

    attempts: list[str] = []
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> Any:
        if self.family != socket.AF_UNIX and not _is_loopback(address):
            attempts.append(f"connect {address!r}")
            raise OSError(f"network guard: refused connection to {address!r}")
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> Any:
        if self.family != socket.AF_UNIX and not _is_loopback(address):
            attempts.append(f"connect_ex {address!r}")
            raise OSError(f"network guard: refused connection to {address!r}")
        return real_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host is not None and not _is_loopback(host):
            attempts.append(f"getaddrinfo {host!r}")
            raise socket.gaierror(socket.EAI_NONAME, f"network guard: no lookup of {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield attempts
    assert attempts == [], f"traffic off loopback was attempted: {attempts[:5]}"
