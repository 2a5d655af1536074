"""Path rules against a racing link (#28.14): ``write_file(src/*)`` is allowed, and a
thread points the link ``src/sub`` at ``src/real`` and at ``../.github`` in turn while
an agent writes ``src/sub/x`` again and again. Whatever the timing, nothing lands in
``.github/``: the path the tool opens is judged again, with its directories held."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from lich import hookimpl
from lich.agent import Agent
from lich.config import LichConfig
from lich.hooks import Approval
from lich.testing import ScriptedChat
from lich.testing.scripted import Reply
from lich.types import ToolCall, ToolMessage

WRITES = 150


def _swap_forever(work: Path, stop: threading.Event, swaps: list[int]) -> None:
    """Point the link ``src/sub`` at ``real`` (inside ``src/``) and at ``../.github`` in
    turn until ``stop``, each time atomically (a new link renamed over the old one)."""
    sub, tmp = work / "src" / "sub", work / "src" / "sub.tmp"
    while True:
        for target in ("../.github", "real"):
            if stop.wait(0.0001):
                return
            os.symlink(target, tmp)
            os.replace(tmp, sub)
        swaps[0] += 1


def _run_writes(work: Path, **approvals: object) -> list[ToolMessage]:
    config = LichConfig(work_dir=str(work), persist_sessions=False, max_turns=WRITES + 5,
                        tables={"approvals": dict(approvals)})
    script = [Reply("", (ToolCall(f"c{i}", "write_file",
                                  {"path": "src/sub/x.txt", "content": f"write {i}"}),))
              for i in range(WRITES)]
    agent = Agent(config, chat=ScriptedChat([*script, "done"]))
    result = asyncio.run(agent.run("write"))
    return [m for m in result.messages if isinstance(m, ToolMessage)]


def _race(work: Path, **approvals: object) -> tuple[list[ToolMessage], int]:
    (work / "src" / "real").mkdir(parents=True)
    (work / ".github").mkdir()
    os.symlink("real", work / "src" / "sub")
    stop = threading.Event()
    swaps = [0]
    swapper = threading.Thread(target=_swap_forever, args=(work, stop, swaps), daemon=True)
    swapper.start()
    try:
        results = _run_writes(work, **approvals)
    finally:
        stop.set()
        swapper.join(timeout=30)
    assert not swapper.is_alive()
    return results, swaps[0]


def test_an_allowed_write_never_lands_where_a_swapped_link_points(tmp_path: Path) -> None:
    results, swaps = _race(tmp_path, mode="deny-unlisted", allow=["write_file(src/*)"])
    assert swaps > 0
    assert list((tmp_path / ".github").iterdir()) == []
    written = [r for r in results if not r.is_error]
    refused = [r for r in results if r.is_error]
    assert len(results) == WRITES
    # Each call either wrote inside src/sub or was refused naming why.
    assert all("path_changed" in r.content or "not allowed by any rule" in r.content
               or "No such file" in r.content or "not_found" in r.content
               for r in refused), {r.content for r in refused}
    if written:
        assert (tmp_path / "src" / "real" / "x.txt").exists()


def test_a_deny_rule_is_applied_to_the_path_opened(tmp_path: Path) -> None:
    results, swaps = _race(tmp_path, mode="allow", allow=["write_file"],
                           deny=["write_file(.github/*)"])
    assert swaps > 0
    assert list((tmp_path / ".github").iterdir()) == []
    assert len(results) == WRITES


def test_without_a_race_the_write_goes_through(tmp_path: Path) -> None:
    (tmp_path / "src" / "sub").mkdir(parents=True)
    results = _run_writes(tmp_path, mode="deny-unlisted", allow=["write_file(src/*)"])
    assert not any(r.is_error for r in results), results[0].content
    assert (tmp_path / "src" / "sub" / "x.txt").read_text() == f"write {WRITES - 1}"


class SwapThenApprove:
    """An approver that says yes — after pointing ``src/sub`` at ``.github`` while the
    person "thinks"."""

    def __init__(self, work: Path) -> None:
        self.work = work

    @hookimpl
    def lich_request_approval(self, run: object, request: object) -> Approval:
        tmp = self.work / "src" / "sub.tmp"
        os.symlink("../.github", tmp)
        os.replace(tmp, self.work / "src" / "sub")
        return Approval(True, approver="test")


def test_a_person_approves_the_path_as_it_resolved_when_asked(tmp_path: Path) -> None:
    (tmp_path / "src" / "real").mkdir(parents=True)
    (tmp_path / ".github").mkdir()
    os.symlink("real", tmp_path / "src" / "sub")
    config = LichConfig(work_dir=str(tmp_path), persist_sessions=False)
    call = ToolCall("c1", "write_file", {"path": "src/sub/x.txt", "content": "x"})
    agent = Agent(config, chat=ScriptedChat([Reply("", (call,)), "done"]),
                  plugins=[("swap", SwapThenApprove(tmp_path))])
    result = asyncio.run(agent.run("write"))
    (message,) = [m for m in result.messages if isinstance(m, ToolMessage)]
    assert message.is_error
    assert ("path_changed: src/sub/x.txt resolved to src/real/x.txt when it was approved "
            "and to .github/x.txt now") in message.content
    assert list((tmp_path / ".github").iterdir()) == []


class SlowSecondCheck:
    """A check hook that answers at once, then takes its time on the re-check."""

    def __init__(self) -> None:
        self.calls = 0

    @hookimpl
    async def lich_check_tool_call(self, call: ToolCall, run: object) -> None:
        self.calls += 1
        if self.calls > 1:
            await asyncio.sleep(2)


def test_a_re_check_that_does_not_answer_in_time_refuses_the_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import lich.executor

    monkeypatch.setattr(lich.executor, "_PATH_CHECK_TIMEOUT_S", 0.2)
    (tmp_path / "src" / "real").mkdir(parents=True)
    os.symlink("real", tmp_path / "src" / "sub")
    config = LichConfig(work_dir=str(tmp_path), persist_sessions=False,
                        tables={"approvals": {"allow": ["write_file(src/*)"]}})
    call = ToolCall("c1", "write_file", {"path": "src/sub/x.txt", "content": "x"})
    agent = Agent(config, chat=ScriptedChat([Reply("", (call,)), "done"]),
                  plugins=[("slow", SlowSecondCheck())])
    result = asyncio.run(agent.run("write"))
    (message,) = [m for m in result.messages if isinstance(m, ToolMessage)]
    assert "path_unchecked: src/sub/x.txt resolves to src/real/x.txt" in message.content
    assert not (tmp_path / "src" / "real" / "x.txt").exists()
