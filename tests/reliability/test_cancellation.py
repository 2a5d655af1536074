"""Cancellation at random points of real runs, many times.

Each run is an :class:`lich.Agent` over the failover router (scripted providers that
sometimes answer 429, so the router backs off), with a small context budget (so the
loop compresses), and tools that take a while: an async one, a sync one in a worker
thread, ``terminal`` running ``sleep``, and a slow before-hook. A point is picked
(model call, tool, terminal, compression, backoff, before-hook), and shortly after
the run reaches it — a random delay — the run is cancelled, by its cancel token or
by cancelling its task.

Every run must end ``aborted`` (a token) or re-raise the cancellation (a task) with
``run_end`` recording ``aborted``; the transcript reads back clean with every tool
call answered (for a cancelled task, once the reader has closed the call that was
cut off); and nothing is left behind: no asyncio task, no child process (the
``sleep`` of ``terminal`` included), no worker thread.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from lich.agent import Agent
from lich.cancel import CancelToken
from lich.context import COMPRESSION_SYSTEM_PROMPT
from lich.events import CompressStart, Envelope, LlmStart, Retry, ToolCallStart
from lich.hooks import hookimpl
from lich.sessions import JsonlSessionStore
from lich.testing import Fail, Reply, ScriptedChat, ScriptRequest, make_test_config
from lich.tools import ToolContext, tool
from lich.types import (
    AssistantMessage,
    ChatOptions,
    ChatResult,
    Message,
    ToolCall,
    ToolDefinition,
    ToolMessage,
    UserMessage,
)
from lich_builtin_tools import builtin_tools
from lich_providers.failover import FailoverRouter

from .conftest import TALLY, check_pairs, child_pids, read_session, run_ends, scaled

POINTS = ("model_call", "async_tool", "sync_tool", "terminal", "compression", "backoff",
          "before_hook")
# What every slow thing would take if the cancel did not land: far beyond the bound on
# a cancelled run (CANCEL_BOUND_S), so a missed cancel fails that bound instead of a
# wall-clock assertion on how quickly the run ended.
SLOW_S = 600.0
CANCEL_BOUND_S = 30.0  # generous: only detects a cancel that did not land


class _Provider:
    """A :class:`lich.types.Provider` over a scripted chat function."""

    def __init__(self, chat: ScriptedChat) -> None:
        self._chat = chat
        self.name = "scripted"
        self.model = "m"

    async def chat(self, messages: Sequence[Message], tools: Sequence[ToolDefinition],
                   options: ChatOptions) -> ChatResult:
        return await self._chat(messages, tools, options)

    async def aclose(self) -> None:
        return None


class _Plugin:
    """The slow tools, the terminal, and a slow before-hook (for calls addressed to it)."""

    def __init__(self, work: Path, marker: str) -> None:
        self.work = work
        self.marker = marker
        self.sync_running = threading.Event()
        self.sync_done = threading.Event()

    @hookimpl
    def lich_register_tools(self, registry: Any) -> None:
        @tool(timeout_s=60)
        async def nap_async(seconds: float) -> str:
            """Sleep, cooperatively."""
            await asyncio.sleep(seconds)
            return "woke up"

        running, done = self.sync_running, self.sync_done

        @tool(timeout_s=60)
        def nap_sync(seconds: float, ctx: ToolContext) -> str:
            """Sleep in a worker thread, polling for a cancel as a good tool does."""
            running.set()
            try:
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    if ctx.cancel.cancelled:
                        return "stopped early"
                    time.sleep(0.005)
                return "woke up"
            finally:
                done.set()

        @tool
        def echo(text: str) -> str:
            """Say it back, at length (so that the context fills up)."""
            return text * 200

        registry.register(nap_async)
        registry.register(nap_sync)
        registry.register(echo)
        terminal = next(t for t in builtin_tools(None) if t.name == "terminal")
        registry.register(terminal)

    @hookimpl
    async def lich_before_tool_call(self, call: ToolCall) -> None:
        if call.args.get("text") == "hook":
            await asyncio.sleep(SLOW_S)


def responder_for(point: str, marker: str) -> Any:
    """What the model does in a run aimed at ``point``; each run first makes a quick
    tool call (so the history has something in it), then heads for the point."""
    state = {"failed": False}

    def respond(request: ScriptRequest) -> Any:
        if request.messages and request.messages[0].content == COMPRESSION_SYSTEM_PROMPT:
            return Reply("the user wants a long count; echo ran a few times", delay_s=0.3)
        done = len(request.tool_results_since_user())
        if done == 0:
            return Reply(tool_calls=(ToolCall("warm", "echo", {"text": "warm up "}),))
        if point == "model_call":
            return Reply("too late", delay_s=SLOW_S)
        if point == "async_tool":
            call = ToolCall(f"c{done}", "nap_async", {"seconds": SLOW_S})
        elif point == "sync_tool":
            call = ToolCall(f"c{done}", "nap_sync", {"seconds": SLOW_S})
        elif point == "terminal":
            call = ToolCall(f"c{done}", "terminal", {"command": f"sleep {marker}"})
        elif point == "compression":
            call = ToolCall(f"c{done}", "echo", {"text": f"filler {done} "})
        elif point == "backoff":
            if not state["failed"]:
                state["failed"] = True
                return Fail(429, headers={"retry-after": str(SLOW_S)})
            return Reply("too late")
        else:  # before_hook
            call = ToolCall(f"c{done}", "echo", {"text": "hook"})
        # Two calls in one turn: a cancel during the first must close the second too.
        return Reply(tool_calls=(call, ToolCall(f"c{done}b", "echo", {"text": "after"})))

    return respond


def trigger(point: str, event: Any) -> bool:
    """Whether ``event`` means the run has reached ``point``."""
    if point == "model_call":
        return isinstance(event, LlmStart) and event.turn == 2
    if point == "compression":
        return isinstance(event, CompressStart)
    if point == "backoff":
        return isinstance(event, Retry)
    if isinstance(event, ToolCallStart):
        return event.call.id.startswith("c") and not event.call.id.endswith("b")
    return False


def earlier_conversation() -> list[Message]:
    """A finished earlier exchange, long enough to cross the compression threshold at
    once."""
    out: list[Message] = [UserMessage("an earlier question")]
    for i in range(10):
        out.append(AssistantMessage("", (ToolCall(f"e{i}", "echo", {"text": "x"}),)))
        out.append(ToolMessage(f"e{i}", "echo", "earlier result " * 120))
    out.append(AssistantMessage("the earlier answer"))
    return out


def live_processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[-1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != b"Z":
            found.append(int(entry))
    return found


async def one_run(tmp: Path, point: str, by_task: bool, delay_s: float) -> dict[str, Any]:
    # A unique duration: its `sleep` process can be found in /proc by it.
    marker = f"{SLOW_S:.0f}.{uuid.uuid4().int % 10**9:09d}"
    plugin = _Plugin(tmp, marker)
    chat = ScriptedChat(responder=responder_for(point, marker))
    router = FailoverRouter([_Provider(chat)], max_attempts=2, base_delay_s=0.01,
                            retry_after_cap_s=SLOW_S)
    config = make_test_config(
        tmp, max_turns=50, hook_timeout_s=SLOW_S * 2,
        # Small enough that a few long echo results cross the threshold.
        context_budget_tokens=4000 if point == "compression" else 10**9,
    )
    agent = Agent(config, plugins=[("slow", plugin)], chat=router)
    token = CancelToken()
    reached = asyncio.Event()

    def on_event(envelope: Envelope) -> None:
        if not reached.is_set() and trigger(point, envelope.event):
            reached.set()

    sid = f"cancel-{uuid.uuid4().hex[:8]}"
    history = earlier_conversation() if point == "compression" else None
    task = asyncio.ensure_future(agent.run("go", history=history, session_id=sid, cancel=token,
                                           on_event=on_event))
    await asyncio.wait_for(reached.wait(), 30)
    if point == "sync_tool":
        await asyncio.to_thread(plugin.sync_running.wait, 10)
    await asyncio.sleep(delay_s)
    if by_task:
        task.cancel()
    else:
        token.cancel()
    outcome: dict[str, Any] = {"sid": sid, "session_dir": config.session_dir, "marker": marker,
                               "plugin": plugin}
    try:
        result = await asyncio.wait_for(asyncio.shield(task), CANCEL_BOUND_S)
        outcome["reason"] = result.stopped_reason
    except asyncio.CancelledError:
        if not task.cancelled():
            raise
        outcome["reason"] = "cancelled-task"
    except TimeoutError:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        outcome["reason"] = f"still running {CANCEL_BOUND_S:g}s after the cancel"
    return outcome


@pytest.fixture(autouse=True)
def _bare_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``terminal`` runs ``bash -l``, and these runs kill it a few milliseconds in: with
    the developer's HOME that lands inside their profile (pyenv's rehash takes a lock
    file there, and a killed holder stalls every later login shell for a minute)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))


@pytest.mark.slow
async def test_cancel_at_random_points_leaves_a_valid_transcript_and_nothing_behind(
    tmp_path: Path, loop_errors: list[dict[str, Any]]
) -> None:
    rng = random.Random()
    seed = rng.randrange(10**6)
    rng.seed(seed)
    baseline_tasks = asyncio.all_tasks()
    baseline_children = child_pids()
    plan = [(point, rng.random() < 0.5, rng.uniform(0, 0.05))
            for _ in range(scaled(3)) for point in POINTS]
    rng.shuffle(plan)
    for n, (point, by_task, delay_s) in enumerate(plan):
        label = f"run {n}: {point}, by {'task' if by_task else 'token'}, +{delay_s:.3f}s " \
                f"(seed {seed})"
        work = tmp_path / f"run{n}"
        work.mkdir()
        outcome = await one_run(work, point, by_task, delay_s)
        assert outcome["reason"] == ("cancelled-task" if by_task else "aborted"), label

        contents = read_session(outcome["session_dir"], outcome["sid"])
        assert [e["stopped_reason"] for e in run_ends(contents)] == ["aborted"], label
        check_pairs(JsonlSessionStore(outcome["session_dir"]).history(outcome["sid"]))
        if not by_task:
            # A token lets the loop close every call itself.
            check_pairs(contents.messages)

        # Nothing left behind.
        for _ in range(5):
            await asyncio.sleep(0)
        leftover = asyncio.all_tasks() - baseline_tasks
        assert leftover == set(), (label, leftover)
        assert child_pids() - baseline_children == set(), label
        assert live_processes_with(outcome["marker"]) == [], label
        if point == "sync_tool":
            # The worker thread is told (ctx.cancel) and stops, rather than napping on.
            done = await asyncio.to_thread(outcome["plugin"].sync_done.wait, CANCEL_BOUND_S)
            assert done, f"{label}: the sync tool never saw its cancel"
        TALLY[f"cancellations at {point}"] += 1
        TALLY["cancellations survived"] += 1
    assert loop_errors == [], loop_errors
