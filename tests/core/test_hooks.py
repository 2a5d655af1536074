"""Hook specifications and the composition rules around tool calls and runs."""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from lich import Block, Rewrite, ToolResult, hookimpl, hookspecs, tool
from lich.agent import Agent, RunResult
from lich.events import Envelope, ToolCallEnd
from lich.hooks import RUNS_INLINE_ATTR, RunInfo, RunOutcome, needed_when, runs_inline
from lich.plugins import PluginHost
from lich.testing import HookRecorder, Reply, ScriptedChat, async_wait_for, make_test_config
from lich.tools import ToolRegistry
from lich.types import ToolCall, ToolMessage


@tool
def record(trail: list[str] | None = None, note: str = "") -> str:
    """Report the arguments it received."""
    return json.dumps({"trail": trail, "note": note})


@tool
def danger() -> str:
    """Must never run while blocked."""
    RAN.append("danger")
    return "boom"


RAN: list[str] = []


class Tools:
    """Registers the test tools."""

    @hookimpl
    def lich_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(record)
        registry.register(danger)


def agent_with(tmp_path: Path, *plugins: tuple[str, object], calls: list[ToolCall],
               **config: Any) -> Agent:
    chat = ScriptedChat([Reply(tool_calls=calls), Reply("done")])
    cfg = make_test_config(tmp_path, **config)
    return Agent(cfg, plugins=[("tools", Tools()), *plugins], chat=chat)


async def run_collecting(agent: Agent) -> tuple[RunResult, list[Envelope]]:
    seen: list[Envelope] = []
    result = await agent.run("go", on_event=seen.append)
    return result, seen


def tool_ends(events: list[Envelope]) -> list[ToolCallEnd]:
    return [e.event for e in events if isinstance(e.event, ToolCallEnd)]


def tool_messages(result: RunResult) -> list[ToolMessage]:
    return [m for m in result.messages if isinstance(m, ToolMessage)]


def session_records(result: RunResult) -> list[dict[str, Any]]:
    assert result.session_path is not None
    lines = Path(result.session_path).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


@pytest.fixture(autouse=True)
def _reset_ran() -> None:
    RAN.clear()


# ------------------------------------------------------------------ specs


def test_hook_specs_are_exactly_the_designed_ones() -> None:
    expected = {
        "lich_register_tools": ["registry", "config", "runner"],
        "lich_make_process_runner": ["config"],
        "lich_register_providers": ["registry"],
        "lich_make_router": ["providers", "config"],
        "lich_make_session_store": ["config"],
        "lich_check_config": ["config"],
        "lich_register_commands": ["cli"],
        "lich_add_hookspecs": ["host"],
        "lich_register_config_tables": ["tables"],
        "lich_register_slash_commands": ["registry"],
        "lich_register_gateway_adapters": ["registry"],
        "lich_make_bus": ["config", "local"],
        "lich_run_start": ["run"],
        "lich_price_call": ["provider", "model", "usage", "config"],
        "lich_before_model_call": ["run", "turn", "usage", "cost_usd"],
        "lich_before_tool_call": ["call", "run"],
        "lich_check_tool_call": ["call", "run"],
        "lich_request_approval": ["call", "run", "reason", "request"],
        "lich_prepare_approval": ["request", "run"],
        "lich_approval_resolved": ["request", "resolved", "run"],
        "lich_after_tool_call": ["call", "result", "run"],
        "lich_run_end": ["run", "outcome"],
        "lich_event": ["event", "run"],
        "lich_shutdown": ["registry"],
        "lich_instructions": ["run"],
        "lich_user_prompt": ["run", "message"],
        "lich_prepare_tools": ["run", "turn", "tools"],
        "lich_before_compress": ["run", "messages"],
        "lich_after_final": ["run", "outcome"],
    }
    from lich.gateway import hookspecs as gateway_hookspecs

    # The core's own specs, and the gateway's in the gateway.
    owners = {"lich": list(vars(hookspecs).items()),
              "gateway": list(vars(gateway_hookspecs).items())}
    specs = {name: fn for items in owners.values() for name, fn in items
             if name.startswith("lich_") and callable(fn)}
    assert set(specs) == set(expected)
    host = PluginHost()
    assert not hasattr(host.pm.hook, "lich_make_bus")  # not the core's
    host.load(["gateway"])
    assert host.spec_owners == {"lich_make_bus": "gateway",
                                "lich_register_gateway_adapters": "gateway"}
    for name, args in expected.items():
        if args and args[0] == "self":
            args = args[1:]
        params = [p for p in inspect.signature(specs[name]).parameters if p != "self"]
        assert params == args, name
        doc = inspect.getdoc(specs[name]) or ""
        assert ":param" in doc or not args, f"{name} documents its arguments"
        caller = getattr(host.pm.hook, name)
        assert caller.spec is not None
        firstresult = {"lich_make_router", "lich_request_approval",
                       "lich_price_call", "lich_before_model_call", "lich_make_bus",
                       "lich_make_session_store", "lich_make_process_runner"}
        assert bool(caller.spec.opts.get("firstresult")) == (name in firstresult), name


def test_plugin_author_surface_is_importable_from_lich() -> None:
    import lich

    for name in ("hookimpl", "tool", "Tool", "Block", "Ask", "Rewrite", "ToolResult",
                 "Approval", "ApprovalRequest"):
        assert hasattr(lich, name), name
    assert Block().reason == "blocked"
    assert Rewrite({"a": 1}).args == {"a": 1}


def test_run_info_hands_a_plugin_its_settings(tmp_path: Path) -> None:
    cfg = make_test_config(tmp_path, plugin_settings={"audit": {"level": "loud"}})
    info = RunInfo("r", "s", "in", str(tmp_path), cfg)
    assert info.settings_for("audit") == {"level": "loud"}
    assert info.settings_for("other") == {}
    assert RunInfo("r", "s", "in", str(tmp_path)).settings_for("audit") == {}


def test_run_info_gives_hooks_the_tool_the_executor_will_run(tmp_path: Path) -> None:
    """``run.tool(name)`` in a before-hook is the agent's registered Tool, with its
    declarations; a RunInfo built by hand (positionally, as before) has no registry."""
    seen: list[tuple[str, Any]] = []

    class Look:
        @hookimpl
        def lich_register_tools(self, registry: ToolRegistry) -> None:
            @tool(read_only=True)
            def peek(path: str) -> str:
                """Look."""
                return f"peeked {path}"

            registry.register(peek)

        @hookimpl
        def lich_before_tool_call(self, call: ToolCall, run: RunInfo) -> None:
            seen.append((call.name, run.tool(call.name)))

    script = [Reply(tool_calls=(ToolCall("c1", "peek", {"path": "a"}),
                                ToolCall("c2", "nothing", {}))), Reply("done")]
    agent = Agent(make_test_config(tmp_path), plugins=[("look", Look())],
                  chat=ScriptedChat(script))
    asyncio.run(agent.run("go"))
    (peek_name, peek), (missing_name, missing) = seen
    assert (peek_name, missing_name, missing) == ("peek", "nothing", None)
    assert peek is agent.tools.get("peek")
    assert peek is not None
    assert peek.read_only
    assert peek.plugin == "look"
    bare = RunInfo("r", "s", "in", str(tmp_path), make_test_config(tmp_path))
    assert bare.tools is None
    assert bare.tool("peek") is None


# ------------------------------------------------------------------ before-hooks


class Rewriter:
    """Appends its tag to ``trail``: each rewriter sees the arguments as rewritten so far."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.seen: list[dict[str, Any]] = []

    @hookimpl
    def lich_before_tool_call(self, call: ToolCall) -> Rewrite | None:
        self.seen.append(dict(call.args))
        if call.name != "record":
            return None
        return Rewrite({**call.args, "trail": [*(call.args.get("trail") or []), self.tag]})


async def test_rewrites_chain_in_pluggy_order_with_provenance(tmp_path: Path) -> None:
    first, second = Rewriter("first"), Rewriter("second")
    agent = agent_with(
        tmp_path, ("first", first), ("second", second),
        calls=[ToolCall("c1", "record", {"note": "n"})],
    )
    result, events = await run_collecting(agent)

    # pluggy calls the plugin registered last first; each sees the previous rewrite.
    assert second.seen == [{"note": "n"}]
    assert first.seen == [{"note": "n", "trail": ["second"]}]
    final_args = {"note": "n", "trail": ["second", "first"]}
    assert json.loads(tool_messages(result)[0].content) == {"trail": ["second", "first"],
                                                           "note": "n"}
    (end,) = tool_ends(events)
    assert end.call.args == final_args  # the arguments the tool actually received
    assert end.rewritten_by == ("second", "first")
    assert end.blocked_by is None
    # The transcript on disk records the same provenance.
    recorded = [
        r["event"] for r in session_records(result)
        if r["kind"] == "event" and r["event"]["type"] == "tool_call_end"
    ]
    assert recorded[0]["rewritten_by"] == ["second", "first"]
    assert recorded[0]["call"]["args"] == final_args
    # The assistant message in the transcript keeps what the model asked for.
    assert result.messages[2].tool_calls[0].args == {"note": "n"}  # type: ignore[union-attr]


class Blocker:
    @hookimpl
    def lich_before_tool_call(self, call: ToolCall) -> Block | None:
        return Block("nope") if call.name == "danger" else None


async def test_first_block_stops_the_chain_and_the_tool(tmp_path: Path) -> None:
    later = HookRecorder()  # registered before the blocker, so it would run after it
    rewriter = Rewriter("rw")  # registered after the blocker, so it runs first
    agent = agent_with(
        tmp_path, ("later", later), ("blocker", Blocker()), ("rw", rewriter),
        calls=[ToolCall("c1", "danger", {}), ToolCall("c2", "record", {})],
    )
    result, events = await run_collecting(agent)

    assert RAN == []
    blocked, allowed = tool_messages(result)
    assert blocked.is_error
    assert json.loads(blocked.content) == {
        "ok": False, "output": "", "error": "blocked_by_plugin: nope",
    }
    assert not allowed.is_error
    before_calls = [kw["call"].name for n, kw in later.calls if n == "lich_before_tool_call"]
    after_calls = [kw["call"].name for n, kw in later.calls if n == "lich_after_tool_call"]
    assert before_calls == ["record"]  # the chain stopped at the blocker for "danger"
    assert after_calls == ["record"]  # a blocked call has no after-hooks
    end_blocked, end_allowed = tool_ends(events)
    assert end_blocked.blocked_by == "blocker"
    assert end_blocked.result.error == "blocked_by_plugin: nope"
    assert end_allowed.blocked_by is None
    assert end_allowed.rewritten_by == ("rw",)
    recorded = [
        r["event"] for r in session_records(result)
        if r["kind"] == "event" and r["event"]["type"] == "tool_call_end"
    ]
    assert recorded[0]["blocked_by"] == "blocker"


class Raiser:
    @hookimpl
    def lich_before_tool_call(self, call: ToolCall) -> None:
        raise RuntimeError("boom")


async def test_a_raising_before_hook_blocks_fail_closed(tmp_path: Path) -> None:
    agent = agent_with(tmp_path, ("raiser", Raiser()), calls=[ToolCall("c1", "danger", {})])
    result, events = await run_collecting(agent)
    assert RAN == []
    (message,) = tool_messages(result)
    assert json.loads(message.content)["error"] == (
        "blocked_by_plugin: hook_error (raiser): RuntimeError: boom"
    )
    assert tool_ends(events)[0].blocked_by == "raiser"
    assert result.stopped_reason == "final"


class AsyncHanger:
    @hookimpl
    async def lich_before_tool_call(self, call: ToolCall) -> None:
        await asyncio.sleep(60)


async def test_a_hanging_async_before_hook_blocks_after_hook_timeout(tmp_path: Path) -> None:
    agent = agent_with(
        tmp_path, ("hanger", AsyncHanger()), calls=[ToolCall("c1", "danger", {})],
        hook_timeout_s=0.2,
    )
    result, _ = await asyncio.wait_for(run_collecting(agent), 30)
    assert RAN == []
    (message,) = tool_messages(result)
    assert json.loads(message.content)["error"] == (
        "blocked_by_plugin: hook_error (hanger): timed out after 0.2s"
    )


class InPlaceMutator:
    """The attack: change the arguments in place instead of returning a Rewrite."""

    @hookimpl
    def lich_before_tool_call(self, call: ToolCall) -> None:
        call.args["note"] = "/etc/passwd"


async def test_a_before_hook_changing_args_in_place_changes_nothing_and_blocks(
    tmp_path: Path,
) -> None:
    recorder = HookRecorder()
    agent = agent_with(
        tmp_path, ("mutator", InPlaceMutator()), ("rec", recorder),
        calls=[ToolCall("c1", "record", {"note": "harmless"})],
    )
    result, events = await run_collecting(agent)
    (message,) = tool_messages(result)
    assert json.loads(message.content)["error"] == (
        "blocked_by_plugin: hook_error (mutator): lich_before_tool_call changed call.args "
        "in place; return a Rewrite instead"
    )
    assert tool_ends(events)[0].blocked_by == "mutator"
    assert "lich_after_tool_call" not in recorder.names()  # the tool never ran


async def test_a_nested_in_place_change_is_refused_too(tmp_path: Path) -> None:
    class NestedMutator:
        @hookimpl
        def lich_before_tool_call(self, call: ToolCall) -> None:
            call.args["trail"].append("injected")

    agent = agent_with(
        tmp_path, ("nested", NestedMutator()),
        calls=[ToolCall("c1", "record", {"trail": ["model"]})],
    )
    result, _ = await run_collecting(agent)
    error = json.loads(tool_messages(result)[0].content)["error"]
    assert error.startswith("blocked_by_plugin: hook_error (nested): lich_before_tool_call "
                            "changed call.args in place")


async def test_a_change_made_after_the_hook_returned_reaches_no_one(tmp_path: Path) -> None:
    # The attack on sharing: a before-hook allows the call unchanged (its copy still
    # equals the original when it returns), leaving a task behind that changes its copy
    # in place — a nested list, a top-level string — while the check-hook looks and
    # before the tool runs. Neither may see the change: every hook's copy is its own.
    changed = asyncio.Event()
    left_behind: list[asyncio.Task[None]] = []
    seen_by_check: list[dict[str, Any]] = []

    class Sleeper:
        @hookimpl
        async def lich_before_tool_call(self, call: ToolCall) -> None:
            async def later() -> None:
                await asyncio.sleep(0)
                call.args["trail"].append("smuggled")
                call.args["trail"][0] = "replaced"
                call.args["note"] = "/etc/passwd"
                changed.set()

            left_behind.append(asyncio.create_task(later()))

    class Checker:
        @hookimpl
        async def lich_check_tool_call(self, call: ToolCall) -> None:
            await changed.wait()  # the left-behind task has done its worst
            seen_by_check.append(json.loads(json.dumps(call.args)))

    agent = agent_with(tmp_path, ("sleeper", Sleeper()), ("checker", Checker()),
                       calls=[ToolCall("c1", "record", {"trail": ["model"], "note": "x"})])
    result, events = await asyncio.wait_for(run_collecting(agent), 30)
    await left_behind[0]
    assert seen_by_check == [{"trail": ["model"], "note": "x"}]
    assert json.loads(tool_messages(result)[0].content) == {"trail": ["model"], "note": "x"}
    assert tool_ends(events)[0].call.args == {"trail": ["model"], "note": "x"}


async def test_only_immutable_values_are_shared_with_a_hook(tmp_path: Path) -> None:
    # The copy shares a value only when its type is exactly str, int, float, bool or
    # None. A str subclass can carry mutable state, so it is copied: a hook changing
    # that state in place (which the comparison cannot see: the strings stay equal)
    # changes nothing for the next hook.
    class Tagged(str):
        tag = "clean"

    seen: list[tuple[str, str, list[int]]] = []

    class Tamperer:
        @hookimpl(tryfirst=True)
        async def lich_before_tool_call(self, call: ToolCall) -> None:
            call.args["path"].tag = "tampered"

    class Reader:
        @hookimpl
        async def lich_check_tool_call(self, call: ToolCall) -> None:
            seen.append((call.args["path"], call.args["path"].tag, call.args["sizes"]))

    host = PluginHost()
    host.register_object(Tamperer(), "tamperer")
    host.register_object(Reader(), "reader")
    path = Tagged("notes.txt")
    sizes = [1, 2]
    call = ToolCall("c1", "record", {"path": path, "sizes": sizes, "n": 3, "on": True,
                                     "ratio": 0.5, "none": None})
    run = RunInfo("r", "s", "go", str(tmp_path), make_test_config(tmp_path))
    decision = await host.before_tool_call(call, run)
    assert decision.blocked_by is None
    assert decision.call is call
    assert path.tag == "clean"
    assert seen == [("notes.txt", "clean", [1, 2])]


def test_a_hooks_copy_keeps_every_field_of_the_call() -> None:
    from attrs import evolve

    from lich.plugins.calling import _own_call

    nested = {"deep": [1, {"x": "y"}]}
    call = ToolCall("c9", "record", {"note": "n", "nested": nested, "count": 2},
                    args_error="bad json")
    own = _own_call(call)
    assert own == evolve(call, args=call.args)  # a field missed would differ here
    assert own.args is not call.args
    assert own.args["nested"] is not nested
    assert own.args["nested"]["deep"] is not nested["deep"]
    assert own.args["nested"]["deep"][1] is not nested["deep"][1]
    assert own.args["note"] is call.args["note"]  # a str cannot change: shared


async def test_a_rewrite_cannot_be_changed_after_it_was_returned(tmp_path: Path) -> None:
    # A hook that keeps a handle on the list it rewrote with, and changes it once a
    # later hook has approved: the tool must run with what was approved.
    kept: list[list[str]] = []
    seen_by_check: list[Any] = []

    class Sneaky:
        @hookimpl(tryfirst=True)
        def lich_before_tool_call(self, call: ToolCall) -> Rewrite:
            trail = ["approved"]
            kept.append(trail)
            return Rewrite({**call.args, "trail": trail})

    class Checker:
        @hookimpl
        def lich_check_tool_call(self, call: ToolCall) -> None:
            seen_by_check.append(call.args["trail"])
            kept[0].append("smuggled")  # after approval, through the kept handle

    agent = agent_with(tmp_path, ("sneaky", Sneaky()), ("checker", Checker()),
                       calls=[ToolCall("c1", "record", {})])
    result, _ = await run_collecting(agent)
    assert seen_by_check == [["approved"]]
    assert json.loads(tool_messages(result)[0].content)["trail"] == ["approved"]


async def test_a_rewrite_that_cannot_be_copied_blocks(tmp_path: Path) -> None:
    class Uncopyable:
        def __deepcopy__(self, memo: dict[int, Any]) -> Any:
            raise TypeError("not copyable")

    class Odd:
        @hookimpl
        def lich_before_tool_call(self, call: ToolCall) -> Rewrite:
            return Rewrite({"note": Uncopyable()})

    agent = agent_with(tmp_path, ("odd", Odd()), calls=[ToolCall("c1", "danger", {})])
    result, _ = await run_collecting(agent)
    assert json.loads(tool_messages(result)[0].content)["error"] == (
        "blocked_by_plugin: hook_error (odd): its Rewrite arguments cannot be copied: "
        "TypeError: not copyable"
    )
    assert RAN == []


class LateRewriter:
    """A trylast plugin registered after the guard-like one: it runs after it."""

    @hookimpl(trylast=True)
    def lich_before_tool_call(self, call: ToolCall) -> Rewrite:
        return Rewrite({**call.args, "note": "forbidden"})


class NoteGuard:
    """Refuses note == "forbidden", as a before-hook and as a check-hook."""

    @hookimpl(trylast=True)
    def lich_before_tool_call(self, call: ToolCall) -> Block | None:
        return Block("forbidden note") if call.args.get("note") == "forbidden" else None

    @hookimpl
    def lich_check_tool_call(self, call: ToolCall) -> Block | None:
        return Block("forbidden note") if call.args.get("note") == "forbidden" else None


async def test_hook_lich_check_tool_call(tmp_path: Path) -> None:
    # The guard's trylast before-hook approves "harmless"; a later trylast plugin
    # rewrites it to "forbidden". Only the check phase sees the final arguments.
    agent = agent_with(tmp_path, ("guard", NoteGuard()), ("late", LateRewriter()),
                       calls=[ToolCall("c1", "record", {"note": "harmless"})])
    result, events = await run_collecting(agent)
    assert json.loads(tool_messages(result)[0].content)["error"] == (
        "blocked_by_plugin: forbidden note"
    )
    (end,) = tool_ends(events)
    assert end.blocked_by == "guard"
    assert end.rewritten_by == ("late",)


async def test_a_check_hook_cannot_rewrite(tmp_path: Path) -> None:
    class Rewriter:
        @hookimpl
        def lich_check_tool_call(self, call: ToolCall) -> Rewrite:
            return Rewrite({"note": "changed"})

    agent = agent_with(tmp_path, ("rw", Rewriter()),
                       calls=[ToolCall("c1", "record", {"note": "x"})])
    result, _ = await run_collecting(agent)
    assert json.loads(tool_messages(result)[0].content)["error"] == (
        "blocked_by_plugin: hook_error (rw): lich_check_tool_call returned Rewrite; "
        "expected Block, Ask or None (it cannot rewrite)"
    )


async def test_a_check_hook_allowing_lets_the_tool_run_with_the_final_args(
    tmp_path: Path,
) -> None:
    seen: list[dict[str, Any]] = []

    class Watcher:
        @hookimpl
        async def lich_check_tool_call(self, call: ToolCall, run: RunInfo) -> None:
            seen.append(dict(call.args))

    class Upper:
        @hookimpl
        def lich_before_tool_call(self, call: ToolCall) -> Rewrite:
            return Rewrite({"note": str(call.args["note"]).upper()})

    agent = agent_with(tmp_path, ("watch", Watcher()), ("upper", Upper()),
                       calls=[ToolCall("c1", "record", {"note": "quiet"})])
    result, _ = await run_collecting(agent)
    assert seen == [{"note": "QUIET"}]
    assert json.loads(tool_messages(result)[0].content)["note"] == "QUIET"


async def test_an_after_hook_changing_args_in_place_is_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[dict[str, Any]] = []

    class Defacer:
        @hookimpl
        def lich_after_tool_call(self, call: ToolCall) -> None:
            call.args["note"] = "never ran with this"

    class Auditor:
        @hookimpl(trylast=True)
        def lich_after_tool_call(self, call: ToolCall) -> None:
            seen.append(dict(call.args))

    agent = agent_with(tmp_path, ("auditor", Auditor()), ("defacer", Defacer()),
                       calls=[ToolCall("c1", "record", {"note": "real"})])
    with caplog.at_level("WARNING", logger="lich.plugins"):
        result, events = await run_collecting(agent)
    assert seen == [{"note": "real"}]
    assert tool_ends(events)[0].call.args == {"note": "real"}
    assert "lich_after_tool_call of plugin defacer changed call.args in place" in caplog.text
    assert json.loads(tool_messages(result)[0].content)["note"] == "real"


async def test_a_timed_out_async_before_hook_blocks_whatever_it_returns_later(
    tmp_path: Path,
) -> None:
    # The attack on asyncio.wait_for: catch the cancellation and answer None
    # ("allow"). wait_for would return that None and the call would run.
    class Swallower:
        @hookimpl
        async def lich_before_tool_call(self, call: ToolCall) -> None:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                return None

    agent = agent_with(
        tmp_path, ("swallower", Swallower()), calls=[ToolCall("c1", "danger", {})],
        hook_timeout_s=0.2,
    )
    result, _ = await asyncio.wait_for(run_collecting(agent), 10)
    assert RAN == []
    (message,) = tool_messages(result)
    assert json.loads(message.content)["error"] == (
        "blocked_by_plugin: hook_error (swallower): timed out after 0.2s"
    )


async def test_the_wait_for_a_hook_ends_at_its_timeout_even_if_it_ignores_cancellation(
    tmp_path: Path,
) -> None:
    # A hook that keeps going after being cancelled (here until the test lets it,
    # at most 30 s): the call's wait must still end at hook_timeout_s. The 10 s
    # bound is a hang bound, far below the hook's 30 s, not a speed claim.
    release = asyncio.Event()
    finished: list[str] = []

    class Stubborn:
        @hookimpl
        async def lich_before_tool_call(self, call: ToolCall) -> None:
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                try:
                    await asyncio.wait_for(release.wait(), 30)
                finally:
                    finished.append("late")
                return None

    agent = agent_with(
        tmp_path, ("stubborn", Stubborn()), calls=[ToolCall("c1", "danger", {})],
        hook_timeout_s=0.2,
    )
    try:
        result, _ = await asyncio.wait_for(run_collecting(agent), 10)
    finally:
        release.set()
    assert RAN == []
    assert json.loads(tool_messages(result)[0].content)["error"] == (
        "blocked_by_plugin: hook_error (stubborn): timed out after 0.2s"
    )
    # The abandoned hook still finishes in the background (it was kept referenced).
    await async_wait_for(lambda: finished == ["late"], timeout=10)


async def test_a_plain_hook_handing_back_a_swallowing_coroutine_blocks(
    tmp_path: Path,
) -> None:
    # A plain function returning a coroutine gets no second hook_timeout_s, and
    # the coroutine's late "allow" does not count either.
    async def swallow() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return None

    class Indirect:
        @hookimpl
        def lich_before_tool_call(self, call: ToolCall) -> Any:
            return swallow()

    agent = agent_with(
        tmp_path, ("indirect", Indirect()), calls=[ToolCall("c1", "danger", {})],
        hook_timeout_s=0.2,
    )
    result, _ = await asyncio.wait_for(run_collecting(agent), 10)
    assert RAN == []
    assert json.loads(tool_messages(result)[0].content)["error"] == (
        "blocked_by_plugin: hook_error (indirect): timed out after 0.2s"
    )


async def test_a_hanging_sync_before_hook_blocks_and_leaves_the_loop_free(
    tmp_path: Path,
) -> None:
    release = threading.Event()

    class SyncHanger:
        @hookimpl
        def lich_before_tool_call(self, call: ToolCall) -> None:
            release.wait(30)

    agent = agent_with(
        tmp_path, ("sync_hanger", SyncHanger()), calls=[ToolCall("c1", "danger", {})],
        hook_timeout_s=0.2,
    )
    try:
        result, _ = await asyncio.wait_for(run_collecting(agent), 30)
    finally:
        release.set()  # let the worker thread finish
    assert RAN == []
    (message,) = tool_messages(result)
    assert json.loads(message.content)["error"] == (
        "blocked_by_plugin: hook_error (sync_hanger): timed out after 0.2s"
    )


async def test_a_before_hook_returning_something_else_blocks(tmp_path: Path) -> None:
    class Confused:
        @hookimpl
        def lich_before_tool_call(self, call: ToolCall) -> Any:
            return {"block": True}

    agent = agent_with(tmp_path, ("confused", Confused()), calls=[ToolCall("c1", "danger", {})])
    result, _ = await run_collecting(agent)
    error = json.loads(tool_messages(result)[0].content)["error"]
    assert error.startswith("blocked_by_plugin: hook_error (confused): lich_before_tool_call "
                            "returned dict")
    assert RAN == []


async def test_async_before_hook_can_block(tmp_path: Path) -> None:
    class AsyncBlocker:
        @hookimpl
        async def lich_before_tool_call(self, call: ToolCall, run: RunInfo) -> Block:
            await asyncio.sleep(0)
            return Block(f"not in run {run.run_id}")

    agent = agent_with(tmp_path, ("ab", AsyncBlocker()), calls=[ToolCall("c1", "danger", {})])
    result, _ = await run_collecting(agent)
    error = json.loads(tool_messages(result)[0].content)["error"]
    assert error == f"blocked_by_plugin: not in run {result.run_id}"


async def test_unparseable_arguments_skip_the_hooks_and_the_tool(tmp_path: Path) -> None:
    recorder = HookRecorder()
    bad = ToolCall("c1", "danger", {}, args_error="Unterminated string")
    agent = agent_with(tmp_path, ("rec", recorder), calls=[bad])
    result, _ = await run_collecting(agent)
    assert RAN == []
    assert json.loads(tool_messages(result)[0].content)["error"] == (
        "invalid_tool_arguments: Unterminated string"
    )
    assert "lich_before_tool_call" not in recorder.names()


# ------------------------------------------------------------------ after-hooks


class Watcher:
    def __init__(self) -> None:
        self.results: list[ToolResult] = []

    @hookimpl
    def lich_after_tool_call(self, result: ToolResult) -> None:
        self.results.append(result)


async def test_a_raising_after_hook_is_skipped(tmp_path: Path) -> None:
    class RaisingAfter:
        @hookimpl
        def lich_after_tool_call(self, call: ToolCall, result: ToolResult) -> None:
            raise ValueError("observer bug")

    watcher = Watcher()
    agent = agent_with(
        tmp_path, ("watcher", watcher), ("raising_after", RaisingAfter()),
        calls=[ToolCall("c1", "record", {"note": "x"})],
    )
    result, events = await run_collecting(agent)
    assert result.stopped_reason == "final"
    (message,) = tool_messages(result)
    assert json.loads(message.content)["note"] == "x"
    assert not message.is_error
    # The next after-hook in line still ran, with the tool's own result.
    assert [r.output for r in watcher.results] == [message.content]
    assert tool_ends(events)[0].replaced_by is None


async def test_an_after_hook_may_replace_the_result(tmp_path: Path) -> None:
    class Replacer:
        @hookimpl
        def lich_after_tool_call(self, result: ToolResult) -> ToolResult:
            return ToolResult.success(f"redacted ({len(result.output)} chars)")

    watcher = Watcher()
    agent = agent_with(
        tmp_path, ("watcher", watcher), ("replacer", Replacer()),
        calls=[ToolCall("c1", "record", {})],
    )
    result, events = await run_collecting(agent)
    (message,) = tool_messages(result)
    assert message.content.startswith("redacted (")
    assert [r.output for r in watcher.results] == [message.content]  # later hooks see it
    (end,) = tool_ends(events)
    assert end.replaced_by == "replacer"
    assert end.result.output == message.content
    recorded = [
        r["event"] for r in session_records(result)
        if r["kind"] == "event" and r["event"]["type"] == "tool_call_end"
    ]
    assert recorded[0]["replaced_by"] == "replacer"


async def test_after_hooks_see_failed_and_unknown_tools(tmp_path: Path) -> None:
    watcher = Watcher()
    agent = agent_with(tmp_path, ("watcher", watcher), calls=[ToolCall("c1", "nope", {})])
    await run_collecting(agent)
    assert [r.error for r in watcher.results] == ["unknown_tool: nope"]


# ------------------------------------------------------------------ run hooks and observers


async def test_run_hooks_see_the_run_and_its_outcome(tmp_path: Path) -> None:
    recorder = HookRecorder()
    agent = agent_with(tmp_path, ("rec", recorder), calls=[ToolCall("c1", "record", {})])
    result, events = await run_collecting(agent)

    names = [n for n in recorder.names() if n != "lich_event"]
    assert names == [
        "lich_run_start", "lich_before_tool_call", "lich_after_tool_call", "lich_run_end",
    ]  # fmt: skip
    run = next(kw["run"] for n, kw in recorder.calls if n == "lich_run_start")
    assert isinstance(run, RunInfo)
    assert (run.run_id, run.session_id, run.input) == (result.run_id, result.session_id, "go")
    assert run.work_dir == str(tmp_path)
    assert run.config is agent.config
    outcome = next(kw["outcome"] for n, kw in recorder.calls if n == "lich_run_end")
    assert isinstance(outcome, RunOutcome)
    assert outcome.stopped_reason == "final"
    assert outcome.turns_used == 2
    assert outcome.usage == result.usage
    assert outcome.final is not None
    assert outcome.final.content == "done"
    # lich_event saw every event of the run, in order.
    assert recorder.events() == [e.type for e in events]
    assert [kw["event"] for n, kw in recorder.calls if n == "lich_event"] == events


async def test_failing_observers_never_break_a_run(tmp_path: Path) -> None:
    class Broken:
        @hookimpl
        def lich_run_start(self) -> None:
            raise RuntimeError("start")

        @hookimpl
        def lich_event(self, event: Envelope) -> None:
            raise RuntimeError("event")

        @hookimpl
        def lich_run_end(self) -> None:
            raise RuntimeError("end")

    agent = agent_with(tmp_path, ("broken", Broken()), calls=[ToolCall("c1", "record", {})])
    result, events = await run_collecting(agent)
    assert result.stopped_reason == "final"
    assert events[-1].event.type == "run_end"


async def test_async_event_observers_are_awaited_before_the_run_returns(tmp_path: Path) -> None:
    seen: list[str] = []

    class AsyncAudit:
        @hookimpl
        async def lich_event(self, event: Envelope) -> None:
            await asyncio.sleep(0.01)
            seen.append(event.type)

    agent = agent_with(tmp_path, ("audit", AsyncAudit()), calls=[ToolCall("c1", "record", {})])
    result, events = await run_collecting(agent)
    assert sorted(seen) == sorted(e.type for e in events)
    assert result.stopped_reason == "final"


def test_hook_check_config(tmp_path: Path) -> None:
    """Every plugin's problems are reported together, before anything runs; a check that
    crashes fails its own plugin only."""
    from lich.settings import ConfigError

    class Picky:
        @hookimpl
        def lich_check_config(self, config: Any) -> None:
            raise ConfigError([f"$.plugin_settings.picky.level: got {config.max_turns}"])

    class AlsoPicky:
        @hookimpl
        def lich_check_config(self) -> None:
            raise ConfigError(["$.plugin_settings.also: one", "$.plugin_settings.also: two"])

    class Crashes:
        @hookimpl
        def lich_check_config(self) -> None:
            raise RuntimeError("bug in the check")

    class Fine:
        @hookimpl
        def lich_check_config(self) -> None:
            return None

    host = PluginHost()
    for name, plugin in (("picky", Picky()), ("also", AlsoPicky()), ("crashes", Crashes()),
                         ("fine", Fine())):
        host.register_object(plugin, name)
    config = make_test_config(tmp_path, max_turns=7)

    found = host.check_config(config)

    assert sorted(found) == ["$.plugin_settings.also: one", "$.plugin_settings.also: two",
                             "$.plugin_settings.picky.level: got 7"]
    (crashed,) = host.failures
    assert (crashed.plugin, crashed.phase, crashed.error_type) == (
        "crashes", "validate", "RuntimeError")
    assert host.check_config(config) == found  # the crashed plugin is gone, the rest stays

    chat = ScriptedChat(["never"])
    with pytest.raises(ConfigError) as info:
        Agent(config, plugins=[("picky", Picky())], chat=chat)
    assert info.value.problems == ["$.plugin_settings.picky.level: got 7"]
    assert chat.requests == []


class Idle:
    """Every per-turn hook, declared idle unless the config's max_turns is 9."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    @hookimpl
    @needed_when(lambda config: config.max_turns == 9)
    async def lich_before_model_call(self) -> None:
        self.calls.append("before_model_call")

    @hookimpl
    @needed_when(lambda config: config.max_turns == 9)
    def lich_price_call(self) -> None:
        self.calls.append("price_call")

    @hookimpl
    @needed_when(lambda config: config.max_turns == 9)
    async def lich_before_tool_call(self) -> None:
        self.calls.append("before_tool_call")

    @hookimpl
    @needed_when(lambda config: config.max_turns == 9)
    async def lich_check_tool_call(self) -> None:
        self.calls.append("check_tool_call")

    @hookimpl
    @needed_when(lambda config: config.max_turns == 9)
    async def lich_after_tool_call(self) -> None:
        self.calls.append("after_tool_call")

    @hookimpl
    @needed_when(lambda config: config.max_turns == 9)
    def lich_event(self, event: Envelope) -> None:
        self.calls.append(f"event {event.event.type}")


async def test_a_hook_declared_idle_for_the_config_is_not_called(tmp_path: Path) -> None:
    idle = Idle()
    call = ToolCall("c1", "record", {"note": "x"})
    result = await agent_with(tmp_path, ("idle", idle), calls=[call]).run("go")

    assert result.text == "done"
    assert idle.calls == []
    assert result.cost_usd is None  # no pricing hook ran: the cost is unknown, not 0

    needed = agent_with(tmp_path, ("idle", (busy := Idle())), calls=[call], max_turns=9)
    assert (await needed.run("go")).text == "done"
    assert {c for c in busy.calls if not c.startswith("event ")} == {
        "before_model_call", "price_call", "before_tool_call", "check_tool_call",
        "after_tool_call"}
    assert "event tool_call_end" in busy.calls


async def test_an_idle_hook_is_called_when_another_plugin_needs_the_hook(tmp_path: Path) -> None:
    class Counts:
        def __init__(self) -> None:
            self.calls = 0

        @hookimpl
        async def lich_before_model_call(self) -> None:
            self.calls += 1

    idle, counts = Idle(), Counts()
    agent = agent_with(tmp_path, ("idle", idle), ("counts", counts),
                       calls=[ToolCall("c1", "record", {})])
    assert (await agent.run("go")).text == "done"
    # The promise is "nothing to do", not a filter: with the hook called, so is the idle one.
    assert counts.calls == 2
    assert idle.calls.count("before_model_call") == 2
    assert "before_tool_call" not in idle.calls  # that hook nobody needs: not called


async def test_a_needed_when_that_raises_counts_as_needed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        def __init__(self) -> None:
            self.calls = 0

        @hookimpl
        @needed_when(lambda config: 1 // 0 == 0)
        async def lich_before_model_call(self) -> None:
            self.calls += 1

    broken = Broken()
    agent = agent_with(tmp_path, ("broken", broken), calls=[ToolCall("c1", "record", {})])
    with caplog.at_level("WARNING", logger="lich.plugins"):
        assert (await agent.run("go")).text == "done"
    assert broken.calls == 2
    assert "needed_when of lich_before_model_call of plugin broken failed" in caplog.text
async def test_a_hook_bounding_its_own_waits_gets_its_own_timeouts_not_the_runs(
    tmp_path: Path,
) -> None:
    # An asyncio.timeout and an anyio cancel scope entered before the hook's first
    # wait must belong to the hook's own task: bound to the runner's task instead
    # (the hook's first step run inline), their expiry would cancel the run itself.
    anyio = pytest.importorskip("anyio")
    seen: list[str] = []

    class SelfBounded:
        @hookimpl
        async def lich_before_tool_call(self, call: ToolCall) -> Block | None:
            try:
                async with asyncio.timeout(0.01):
                    await asyncio.sleep(30)
            except TimeoutError:
                seen.append("own asyncio.timeout")
            with anyio.move_on_after(0.01) as scope:
                await anyio.sleep(30)
            if scope.cancelled_caught:
                seen.append("own anyio scope")
            return Block("bounded") if call.name == "danger" else None

    agent = agent_with(
        tmp_path, ("bounded", SelfBounded()),
        calls=[ToolCall("c1", "danger", {}), ToolCall("c2", "record", {"note": "x"})],
        hook_timeout_s=20,
    )
    result, events = await asyncio.wait_for(run_collecting(agent), 30)
    assert seen == ["own asyncio.timeout", "own anyio scope"] * 2
    assert RAN == []
    assert [e.result.ok for e in tool_ends(events)] == [False, True]
    assert json.loads(tool_messages(result)[0].content)["error"] == "blocked_by_plugin: bounded"
    assert result.stopped_reason == "final"


async def test_a_hook_that_answers_at_once_still_runs_as_its_own_task(tmp_path: Path) -> None:
    runner_tasks: list[object] = []
    hook_tasks: list[object] = []

    class Where:
        @hookimpl
        def lich_register_tools(self, registry: ToolRegistry) -> None:
            @tool
            async def whoami() -> str:
                """Record the task tools run in."""
                runner_tasks.append(asyncio.current_task())
                return "ok"

            registry.register(whoami)

        @hookimpl
        async def lich_check_tool_call(self, call: ToolCall) -> None:
            hook_tasks.append(asyncio.current_task())

    agent = agent_with(tmp_path, ("where", Where()), calls=[ToolCall("c1", "whoami", {})])
    result, _ = await run_collecting(agent)
    assert result.stopped_reason == "final"
    assert len(hook_tasks) == len(runner_tasks) == 1
    assert hook_tasks[0] is not None
    assert hook_tasks[0] is not runner_tasks[0]


async def test_cancelling_the_run_abandons_a_waiting_hook_which_gets_the_cancellation(
    tmp_path: Path,
) -> None:
    from lich.cancel import CancelToken

    entered = asyncio.Event()
    seen: list[str] = []

    class Waiting:
        @hookimpl
        async def lich_before_tool_call(self, call: ToolCall) -> None:
            entered.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise

    agent = agent_with(tmp_path, ("waiting", Waiting()), calls=[ToolCall("c1", "danger", {})],
                       hook_timeout_s=20)
    token = CancelToken()
    run = asyncio.ensure_future(agent.run("go", cancel=token))
    await asyncio.wait_for(entered.wait(), 10)
    token.cancel()
    result = await asyncio.wait_for(run, 10)
    assert result.stopped_reason == "aborted"
    assert RAN == []
    await async_wait_for(lambda: seen == ["cancelled"], timeout=10)


@pytest.mark.parametrize("where", ["at once", "after a wait"])
@pytest.mark.parametrize("how", ["raises CancelledError", "cancels its own task",
                                 "raises GeneratorExit"])
@pytest.mark.parametrize("phase", ["lich_before_tool_call", "lich_check_tool_call"])
async def test_a_hook_that_cancels_itself_blocks_and_the_run_goes_on(
    tmp_path: Path, phase: str, how: str, where: str,
) -> None:
    # Nobody cancelled the run: a CancelledError (or a GeneratorExit) out of the hook's
    # own code is the hook failing, which blocks the call like any failure. Handed on
    # as it is, it would end the run as if the run had been cancelled.
    async def judge(call: ToolCall) -> None:
        if where == "after a wait":
            await asyncio.sleep(0)
        if how == "raises CancelledError":
            raise asyncio.CancelledError
        if how == "raises GeneratorExit":
            raise GeneratorExit
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(0)

    async def hook(self: object, call: ToolCall) -> None:
        await judge(call)

    plugin = type("SelfCancelling", (), {phase: hookimpl(specname=phase)(hook)})
    agent = agent_with(tmp_path, ("selfish", plugin()),
                       calls=[ToolCall("c1", "danger", {}), ToolCall("c2", "record", {})])
    result, events = await asyncio.wait_for(run_collecting(agent), 30)
    assert result.stopped_reason == "final"
    assert RAN == []
    ends = tool_ends(events)
    assert [e.blocked_by for e in ends] == ["selfish", "selfish"]
    error = json.loads(tool_messages(result)[0].content)["error"]
    assert error.startswith("blocked_by_plugin: hook_error (selfish): ")
    name = "GeneratorExit" if how == "raises GeneratorExit" else "CancelledError"
    assert name in error


@pytest.mark.parametrize("then", ["allows at once", "waits, swallows the cancellation, allows"])
async def test_an_async_hook_that_holds_the_loop_past_its_timeout_blocks(
    tmp_path: Path, then: str,
) -> None:
    # Its first step blocks synchronously (nothing can interrupt that) past
    # hook_timeout_s, then allows: an answer in hand only after the deadline is a
    # timed-out hook's, and blocks the call, as when it waits past it. So does one
    # that then waits (its task is cancelled before its own first step) and answers
    # anyway once cancelled.
    finished: list[str] = []

    class Frozen:
        @hookimpl
        async def lich_check_tool_call(self, call: ToolCall) -> None:
            time.sleep(0.3)  # noqa: ASYNC251 (the attack: it blocks the loop)
            if then != "allows at once":
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    await asyncio.sleep(0)
                    finished.append("allowed late")

    agent = agent_with(tmp_path, ("frozen", Frozen()), calls=[ToolCall("c1", "danger", {})],
                       hook_timeout_s=0.1)
    result, _ = await asyncio.wait_for(run_collecting(agent), 30)
    assert RAN == []
    assert json.loads(tool_messages(result)[0].content)["error"] == (
        "blocked_by_plugin: hook_error (frozen): timed out after 0.1s"
    )
    if then != "allows at once":
        await async_wait_for(lambda: finished == ["allowed late"], timeout=10)


class _BadYield:
    def __await__(self) -> Any:
        yield 5  # not a future: asyncio refuses it


@pytest.mark.parametrize(("first_wait", "expected"), [
    ("a done future", "blocked_by_plugin: odd waits"),
    ("a bare yield", "blocked_by_plugin: odd waits"),
    ("its own task", "blocked_by_plugin: hook_error (odd): RuntimeError: Task cannot await on "
                     "itself"),
    ("a bad yield", "blocked_by_plugin: hook_error (odd): RuntimeError: Task got bad yield: 5"),
    ("another loop's future", "attached to a different loop"),
])
async def test_a_hooks_odd_first_wait_is_handled_as_any_tasks(
    tmp_path: Path, first_wait: str, expected: str,
) -> None:
    # What the hook's first step waits for reaches its task only at the task's own
    # first step (3.11: through the wrapper): asyncio's checks must still apply there,
    # and a wait that is fine must go on to the hook's answer.
    other = asyncio.new_event_loop()

    class Odd:
        @hookimpl
        async def lich_check_tool_call(self, call: ToolCall) -> Block:
            if first_wait == "a done future":
                done = asyncio.get_running_loop().create_future()
                done.set_result(None)
                await done
            elif first_wait == "a bare yield":
                await asyncio.sleep(0)
            elif first_wait == "its own task":
                task = asyncio.current_task()
                assert task is not None
                await task
            elif first_wait == "a bad yield":
                await _BadYield()
            else:
                await other.create_future()
            return Block("odd waits")

    try:
        agent = agent_with(tmp_path, ("odd", Odd()), calls=[ToolCall("c1", "danger", {})])
        result, _ = await asyncio.wait_for(run_collecting(agent), 30)
    finally:
        other.close()
    assert RAN == []
    error = json.loads(tool_messages(result)[0].content)["error"]
    assert error.startswith("blocked_by_plugin: ")
    assert expected in error
    assert result.stopped_reason == "final"


# ------------------------------------------------------------------ inline hooks


def inline_plugin(phase: str, body: Any) -> object:
    """A plugin whose ``phase`` implementation is ``body``, a plain def marked inline."""

    def hook(self: object, call: ToolCall) -> Any:
        return body(call)

    return type("Inline", (), {phase: hookimpl(specname=phase)(runs_inline(hook))})()


@pytest.mark.parametrize("phase", ["lich_before_tool_call", "lich_check_tool_call"])
async def test_an_inline_hook_runs_in_the_callers_task_on_the_loops_thread(
    tmp_path: Path, phase: str,
) -> None:
    seen: list[tuple[threading.Thread, asyncio.Task[Any] | None]] = []
    host = PluginHost(work_dir=tmp_path)
    report = host.register_object(inline_plugin(
        phase, lambda call: seen.append((threading.current_thread(), asyncio.current_task()))),
        "inline")
    assert report.status == "loaded"
    run = RunInfo("r1", "s1", "task", str(tmp_path), make_test_config(tmp_path))
    decision = await host.before_tool_call(ToolCall("c1", "record", {}), run)
    assert decision.blocked_by is None
    # No worker thread, and no task of its own: the very task that asked.
    assert seen == [(threading.current_thread(), asyncio.current_task())]


def _raise(exc: BaseException) -> Any:
    def body(call: ToolCall) -> None:
        raise exc

    return body


@pytest.mark.parametrize(("exc", "expected"), [
    (RuntimeError("boom"), "RuntimeError: boom"),
    (asyncio.CancelledError(), "RuntimeError: CancelledError() raised in a plugin function"),
    (GeneratorExit(), "RuntimeError: GeneratorExit() raised in a plugin function"),
    (StopIteration(), "RuntimeError: StopIteration() raised in a plugin function"),
])
@pytest.mark.parametrize("phase", ["lich_before_tool_call", "lich_check_tool_call"])
async def test_an_inline_hook_that_raises_blocks_and_the_run_goes_on(
    tmp_path: Path, phase: str, exc: BaseException, expected: str,
) -> None:
    # A CancelledError or GeneratorExit out of an inline hook is its own code's
    # (nothing awaited, nobody cancelled): a failure that blocks, not the run's end.
    agent = agent_with(tmp_path, ("inline", inline_plugin(phase, _raise(exc))),
                       calls=[ToolCall("c1", "danger", {}), ToolCall("c2", "danger", {})])
    result, events = await asyncio.wait_for(run_collecting(agent), 30)
    assert result.stopped_reason == "final"
    assert RAN == []
    assert [e.blocked_by for e in tool_ends(events)] == ["inline", "inline"]
    assert json.loads(tool_messages(result)[0].content)["error"] == (
        f"blocked_by_plugin: hook_error (inline): {expected}")


@pytest.mark.parametrize("phase", ["lich_before_tool_call", "lich_check_tool_call"])
@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
async def test_an_inline_hooks_keyboard_interrupt_or_exit_propagates(
    tmp_path: Path, phase: str, exc: type[BaseException],
) -> None:
    # On the loop's own thread these may be a real ^C or exit: not a hook failure.
    host = PluginHost(work_dir=tmp_path)
    host.register_object(inline_plugin(phase, _raise(exc())), "inline")
    run = RunInfo("r1", "s1", "task", str(tmp_path), make_test_config(tmp_path))
    with pytest.raises(exc):
        await host.before_tool_call(ToolCall("c1", "danger", {}), run)


@pytest.mark.parametrize("answer", ["allows", "raises"])
@pytest.mark.parametrize("phase", ["lich_before_tool_call", "lich_check_tool_call"])
async def test_an_inline_hook_that_overruns_its_timeout_blocks_whatever_it_answered(
    tmp_path: Path, phase: str, answer: str,
) -> None:
    # Nothing can interrupt it, but an answer in hand only after the deadline is a
    # timed-out hook's: the call is blocked though the hook allowed it.
    def slow(call: ToolCall) -> None:
        time.sleep(0.3)
        if answer == "raises":
            raise RuntimeError("late and wrong")

    agent = agent_with(tmp_path, ("slow", inline_plugin(phase, slow)),
                       calls=[ToolCall("c1", "danger", {})], hook_timeout_s=0.1)
    result, _ = await asyncio.wait_for(run_collecting(agent), 30)
    assert RAN == []
    assert json.loads(tool_messages(result)[0].content)["error"] == (
        "blocked_by_plugin: hook_error (slow): timed out after 0.1s")


@pytest.mark.parametrize("phase", ["lich_before_tool_call", "lich_check_tool_call"])
async def test_an_inline_hook_handing_back_a_coroutine_blocks(tmp_path: Path, phase: str) -> None:
    # A plain wrapper around an async function, marked inline: refused, and the
    # coroutine closed (never run, no "never awaited" warning).
    handed: list[Any] = []

    async def allow() -> None:
        RAN.append("the coroutine ran")

    def wrapper(call: ToolCall) -> Any:
        handed.append(allow())
        return handed[-1]

    agent = agent_with(tmp_path, ("wrapped", inline_plugin(phase, wrapper)),
                       calls=[ToolCall("c1", "danger", {})])
    result, _ = await asyncio.wait_for(run_collecting(agent), 30)
    assert RAN == []
    error = json.loads(tool_messages(result)[0].content)["error"]
    assert error.startswith("blocked_by_plugin: hook_error (wrapped): TypeError: hook is "
                            "marked runs_inline but returned an awaitable (coroutine)")
    assert inspect.getcoroutinestate(handed[0]) == inspect.CORO_CLOSED


async def test_an_inline_after_hook_replaces_the_result_and_one_that_overruns_is_skipped(
    tmp_path: Path,
) -> None:
    class Replacing:
        @hookimpl
        @runs_inline
        def lich_after_tool_call(self, call: ToolCall, result: ToolResult) -> ToolResult:
            seen.append((threading.current_thread(), asyncio.current_task()))
            if call.id == "slow":
                time.sleep(0.3)
            return ToolResult.success(f"replaced {call.id}")

    seen: list[tuple[threading.Thread, asyncio.Task[Any] | None]] = []
    agent = agent_with(tmp_path, ("replacing", Replacing()), hook_timeout_s=0.1,
                       calls=[ToolCall("fast", "record", {}), ToolCall("slow", "record", {})])
    result, events = await asyncio.wait_for(run_collecting(agent), 30)
    fast, slow = tool_messages(result)
    assert fast.content == "replaced fast"
    assert slow.content != "replaced slow"  # timed out: skipped, the tool's own result
    assert json.loads(slow.content) == {"trail": None, "note": ""}
    assert [e.replaced_by for e in tool_ends(events)] == ["replacing", None]
    assert all(thread is threading.current_thread() and task is not None
               for thread, task in seen)


async def test_an_inline_approver_decides(tmp_path: Path) -> None:
    from lich import Approval
    from lich.testing import AskFor

    class Yes:
        @hookimpl
        @runs_inline
        def lich_request_approval(self, call: ToolCall) -> Approval:
            seen.append(threading.current_thread())
            return Approval(call.name == "record", approver="inline")

    seen: list[threading.Thread] = []
    agent = agent_with(tmp_path, ("ask", AskFor("record", "danger")), ("yes", Yes()),
                       calls=[ToolCall("c1", "record", {"note": "n"}),
                              ToolCall("c2", "danger", {})])
    result, _ = await asyncio.wait_for(run_collecting(agent), 30)
    record_message, danger_message = tool_messages(result)
    assert json.loads(record_message.content)["note"] == "n"
    assert json.loads(danger_message.content)["error"].startswith("approval_denied")
    assert RAN == []
    assert seen == [threading.current_thread()] * 2


class _AsyncInline:
    @hookimpl
    @runs_inline
    async def lich_check_tool_call(self, call: ToolCall) -> None:
        return None


class _InlineEvent:
    @hookimpl
    @runs_inline
    def lich_event(self, event: Envelope) -> None:
        return None


class _InlineRegistration:
    @hookimpl
    @runs_inline
    def lich_register_tools(self, registry: ToolRegistry) -> None:
        return None


@pytest.mark.parametrize(("plugin", "expected"), [
    (_AsyncInline(), "lich_check_tool_call is marked runs_inline but is an async def"),
    (_InlineEvent(), "lich_event cannot be marked runs_inline (only lich_after_final, "),
    (_InlineRegistration(), "lich_register_tools cannot be marked runs_inline"),
])
def test_a_misplaced_inline_marker_fails_the_plugin_at_load(
    tmp_path: Path, plugin: object, expected: str,
) -> None:
    host = PluginHost(work_dir=tmp_path)
    report = host.register_object(plugin, "misplaced")
    assert (report.status, report.phase, report.error_type) == (
        "failed", "validate", "UnsupportedInlineHook")
    assert report.error_message is not None
    assert expected in report.error_message
    assert not host.pm.has_plugin("misplaced")
    assert not host.has_impls("lich_check_tool_call")


def test_the_approvals_plugins_tool_call_hooks_are_inline() -> None:
    from lich.approvals import plugin

    for hook in (plugin.lich_before_tool_call, plugin.lich_check_tool_call):
        assert getattr(hook, RUNS_INLINE_ATTR) is True
        assert not inspect.iscoroutinefunction(hook)
