"""Tools: the ``@tool`` decorator, the registry, the executor and the guard helpers."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any, Literal

import pytest

import lich
from lich.cancel import CancelToken
from lich.config import ConfigError
from lich.guards import (
    DEFAULT_MAX_OUTPUT_CHARS,
    ToolError,
    optional_bool_arg,
    optional_int_arg,
    optional_number_arg,
    optional_string_arg,
    require_string_arg,
    resolve_in_root,
    truncate_text,
)
from lich.tools import DuplicateToolError, Tool, ToolContext, ToolExecutor, ToolRegistry, tool
from lich.types import ToolCall, ToolResult

HANG_S = 60

# ------------------------------------------------------------------ @tool


def test_idempotent_defaults_to_read_only_and_may_be_set() -> None:
    def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult.success("")

    schema: dict[str, Any] = {"type": "object"}
    assert Tool("r", "reads", schema, run, read_only=True).idempotent
    assert not Tool("w", "writes", schema, run).idempotent
    assert Tool("p", "puts", schema, run, idempotent=True).idempotent
    assert not Tool("r2", "reads", schema, run, read_only=True, idempotent=False).idempotent

    @tool(read_only=True)
    def peek() -> str:
        """Look."""
        return ""

    @tool(idempotent=True)
    def put(key: str) -> str:
        """Set a key."""
        return key

    @tool
    def bump() -> str:
        """Add one."""
        return ""

    assert (peek.idempotent, put.idempotent, bump.idempotent) == (True, True, False)


def test_tool_decorator_builds_name_description_and_schema() -> None:
    @tool
    def search(query: str, limit: int = 5, exact: bool = False, tags: list[str] | None = None,
               mode: Literal["fast", "deep"] = "fast", ratio: float = 0.5) -> str:
        """Search the notes.

        More detail that is not part of the description.

        :param query: what to look for.
        :param limit: how many hits.
        """
        return query

    assert isinstance(search, Tool)
    assert search.name == "search"
    assert search.description == "Search the notes."
    assert search.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "what to look for."},
            "limit": {"type": "integer", "description": "how many hits.", "default": 5},
            "exact": {"type": "boolean", "default": False},
            "tags": {"type": "array", "items": {"type": "string"}},
            "mode": {"enum": ["fast", "deep"], "type": "string", "default": "fast"},
            "ratio": {"type": "number", "default": 0.5},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    assert search.definition().name == "search"


def test_tool_decorator_google_style_args_and_options() -> None:
    @tool(name="renamed", timeout_s=2.5, max_output_chars=10)
    async def original(path: str) -> str:
        """Read something.

        Args:
            path (str): the file to read.
        """
        return path

    assert original.name == "renamed"
    assert original.is_async
    assert original.timeout_s == 2.5
    assert original.max_output_chars == 10
    assert original.parameters["properties"]["path"]["description"] == "the file to read."


def test_context_parameter_is_left_out_of_the_schema_however_it_is_annotated() -> None:
    @tool
    def by_type(x: int, c: ToolContext) -> str:
        """By type."""
        return str(c.work_dir)

    @tool
    def by_name(x: int, ctx: Any) -> str:
        """By name."""
        return str(ctx.work_dir)

    @tool
    def by_string(x: int, c: lich.ToolContext) -> str:  # a dotted name under future annotations
        """By dotted string annotation."""
        return str(c.work_dir)

    for item in (by_type, by_name, by_string):
        assert list(item.parameters["properties"]) == ["x"], item.name
        assert item.parameters["required"] == ["x"]


async def test_decorated_tools_receive_args_and_context(tmp_path: Path) -> None:
    @tool
    def where(x: int, c: lich.ToolContext) -> str:
        """Where am I."""
        return f"{x} in {c.work_dir.name} ({c.call_id})"

    registry = ToolRegistry()
    registry.register(where)
    executor = ToolExecutor(registry, work_dir=tmp_path)
    result = await executor.execute(ToolCall("id7", "where", {"x": 3}))
    assert result == ToolResult(ok=True, output=f"3 in {tmp_path.name} (id7)")


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({}, "missing_arg: text"),
        ({"text": None}, "missing_arg: text"),
        ({"text": 3}, "invalid_arg: text: expected string, got integer"),
        ({"text": "a", "count": "2"}, "invalid_arg: count: expected integer, got string"),
        ({"text": "a", "count": True}, "invalid_arg: count: expected integer, got boolean"),
        ({"text": "a", "mode": "loud"}, "invalid_arg: mode: must be one of 'a', 'b'"),
        ({"text": "a", "tags": ["x", 1]}, "invalid_arg: tags[1]: expected string, got integer"),
        ({"text": "a", "extra": 1}, "unexpected_arg: extra"),
    ],
)
async def test_arguments_are_validated_before_the_call(
    tmp_path: Path, args: dict[str, Any], error: str
) -> None:
    called = []

    @tool
    def strict(text: str, count: int = 1, mode: Literal["a", "b"] = "a",
               tags: list[str] | None = None) -> str:
        """Strict."""
        called.append(text)
        return text

    registry = ToolRegistry()
    registry.register(strict)
    result = await ToolExecutor(registry, work_dir=tmp_path).execute(ToolCall("1", "strict", args))
    assert result == ToolResult(ok=False, output="", error=error)
    assert called == []


async def test_an_integral_float_reaches_an_int_parameter_as_int(tmp_path: Path) -> None:
    @tool
    def repeat(text: str, times: int) -> str:
        """Repeat the text."""
        assert isinstance(times, int)
        return text * times

    registry = ToolRegistry()
    registry.register(repeat)
    ex = ToolExecutor(registry, work_dir=tmp_path)
    ok = await ex.execute(ToolCall("1", "repeat", {"text": "ab", "times": 3.0}))
    assert ok == ToolResult(ok=True, output="ababab")
    bad = await ex.execute(ToolCall("1", "repeat", {"text": "ab", "times": 2.5}))
    assert bad.error == "invalid_arg: times: expected integer, got number"


async def test_return_values_become_results(tmp_path: Path) -> None:
    @tool
    def as_dict() -> dict[str, int]:
        """A dict."""
        return {"a": 1}

    @tool
    def as_none() -> None:
        """Nothing."""

    @tool
    def as_result() -> ToolResult:
        """A ready result."""
        return ToolResult.failure("not_found: x")

    @tool
    def raises_tool_error() -> str:
        """A coded failure."""
        raise ToolError("missing_arg: path")

    @tool
    def raises_other() -> str:
        """A bug."""
        raise ValueError("kaboom")

    registry = ToolRegistry()
    for item in (as_dict, as_none, as_result, raises_tool_error, raises_other):
        registry.register(item)
    ex = ToolExecutor(registry, work_dir=tmp_path)
    assert (await ex.execute(ToolCall("1", "as_dict", {}))).output == '{"a": 1}'
    assert await ex.execute(ToolCall("1", "as_none", {})) == ToolResult(ok=True, output="")
    assert (await ex.execute(ToolCall("1", "as_result", {}))).error == "not_found: x"
    assert (await ex.execute(ToolCall("1", "raises_tool_error", {}))).error == "missing_arg: path"
    assert (await ex.execute(ToolCall("1", "raises_other", {}))).error == "ValueError: kaboom"


# ------------------------------------------------------------------ registry


def _plain(name: str, output: str = "ok", **kw: Any) -> Tool:
    def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult.success(output)

    return Tool(name, f"{name} tool", {"type": "object"}, run, **kw)


def test_registry_duplicates_order_and_filtering() -> None:
    registry = ToolRegistry()
    for n in ("a", "b", "c"):
        registry.register(_plain(n))
    with pytest.raises(DuplicateToolError, match=r"^duplicate_tool: b$"):
        registry.register(_plain("b"))
    with pytest.raises(TypeError):
        registry.register("not a tool")  # type: ignore[arg-type]
    assert registry.names() == ["a", "b", "c"]
    assert [d.name for d in registry.definitions()] == ["a", "b", "c"]
    assert registry.has("a")
    assert registry.get("zzz") is None
    assert len(registry) == 3

    registry.filter(["a", "c", "unknown"], disabled=["c"])
    assert registry.names() == ["a"]
    assert [d.name for d in registry.definitions()] == ["a"]  # the cache followed


def test_registry_attributes_tools_to_the_registering_plugin() -> None:
    registry = ToolRegistry()
    registry.current_plugin = "p1"
    registry.register(_plain("a"))
    registry.current_plugin = "p2"
    registry.register(_plain("b"))
    seen: list[tuple[str, str]] = []
    registry.on_duplicate = lambda plugin, msg: seen.append((plugin, msg))
    registry.register(_plain("a", output="second"))  # reported, skipped: the first one wins
    assert seen == [("p2", "duplicate_tool: a (already registered by p1); skipped")]
    assert registry.get("a") is not None
    assert registry.get("a").plugin == "p1"
    assert registry.remove_plugin("p1") == ["a"]
    # The registration the duplicate lost takes the name back.
    assert registry.names() == ["b", "a"]
    assert registry.get("a").plugin == "p2"  # type: ignore[union-attr]
    assert registry.remove_plugin("p2") == ["b", "a"]
    assert registry.names() == []


# ------------------------------------------------------------------ executor


async def test_unknown_tool_and_unparseable_arguments(tmp_path: Path) -> None:
    ex = ToolExecutor(ToolRegistry(), work_dir=tmp_path)
    assert await ex.execute(ToolCall("1", "nope", {})) == ToolResult(
        ok=False, output="", error="unknown_tool: nope"
    )
    bad = ToolCall("1", "nope", {}, args_error="Expecting value at char 0")
    assert (await ex.execute(bad)).error == "invalid_tool_arguments: Expecting value at char 0"


async def test_timeout_message_names_the_tool_and_its_own_limit(tmp_path: Path) -> None:
    @tool(timeout_s=0.2)
    async def sleepy() -> str:
        """Sleeps."""
        await asyncio.sleep(HANG_S)
        return "woke"

    registry = ToolRegistry()
    registry.register(sleepy)
    result = await asyncio.wait_for(
        ToolExecutor(registry, work_dir=tmp_path).execute(ToolCall("1", "sleepy", {})), 20
    )
    assert result == ToolResult(ok=False, output="", error="timeout: tool:sleepy exceeded 0.2s")


async def test_timeout_is_per_tool_and_config_overrides_it(tmp_path: Path) -> None:
    # The tool's own limit (60 s) is generous, even on a loaded machine: a 0.3 s sleep
    # passes. The config's [tools.slow] timeout_s is tight: the same call then times out.
    @tool(timeout_s=60)
    async def slow() -> str:
        """Sleeps a little."""
        await asyncio.sleep(0.3)
        return "done"

    @tool(timeout_s=0.1)
    async def quick() -> str:
        """Returns at once."""
        return "quick"

    registry = ToolRegistry()
    registry.register(slow)
    registry.register(quick)
    ex = ToolExecutor(registry, work_dir=tmp_path)
    assert (await ex.execute(ToolCall("1", "slow", {}))).output == "done"
    assert (await ex.execute(ToolCall("1", "quick", {}))).output == "quick"

    tight = ToolExecutor(registry, work_dir=tmp_path, tool_settings={"slow": {"timeout_s": 0.05}})
    assert tight.limits(registry.get("slow")) == (0.05, DEFAULT_MAX_OUTPUT_CHARS)  # type: ignore[arg-type]
    assert (await tight.execute(ToolCall("1", "slow", {}))).error == (
        "timeout: tool:slow exceeded 0.05s"
    )


async def test_bad_tool_limits_fail_the_call_naming_every_key(tmp_path: Path) -> None:
    # A loaded config never gets here (load_config checks every [tools.<name>] table);
    # an executor given bad tables directly says what is wrong instead of guessing.
    registry = ToolRegistry()
    registry.register(_plain("a", timeout_s=7, max_output_chars=99))
    ex = ToolExecutor(
        registry, work_dir=tmp_path,
        tool_settings={"a": {"timeout_s": "soon", "max_output_chars": -1, "own_key": 1}},
    )
    with pytest.raises(ConfigError) as info:
        ex.limits(registry.get("a"))  # type: ignore[arg-type]
    assert sorted(info.value.problems) == [
        "$.tools.a.max_output_chars: must be greater than 0, got -1",
        "$.tools.a.timeout_s: expected a number, got string",
    ]
    result = await ex.execute(ToolCall("1", "a", {}))
    assert result.error == (
        "invalid_setting: $.tools.a.timeout_s: expected a number, got string; "
        "$.tools.a.max_output_chars: must be greater than 0, got -1"
    )


async def test_a_tools_own_timeout_error_is_not_reported_as_a_deadline(tmp_path: Path) -> None:
    @tool
    async def flaky() -> str:
        """Raises TimeoutError from inside (a socket, say)."""
        raise TimeoutError("upstream took too long")

    registry = ToolRegistry()
    registry.register(flaky)
    result = await ToolExecutor(registry, work_dir=tmp_path).execute(ToolCall("1", "flaky", {}))
    assert result.error == "TimeoutError: upstream took too long"


async def test_output_is_clamped_to_the_tools_own_cap_not_a_global_one(tmp_path: Path) -> None:
    big = "x" * 50_000
    registry = ToolRegistry()
    registry.register(_plain("roomy", big, max_output_chars=100_000))
    registry.register(_plain("tight", big, max_output_chars=1_000))
    registry.register(_plain("default", big))
    ex = ToolExecutor(registry, work_dir=tmp_path)

    assert (await ex.execute(ToolCall("1", "roomy", {}))).output == big
    tight = (await ex.execute(ToolCall("1", "tight", {}))).output
    assert tight == "x" * 1_000 + "\n[... truncated, 49000 chars omitted ...]"
    default = (await ex.execute(ToolCall("1", "default", {}))).output
    assert default.startswith("x" * DEFAULT_MAX_OUTPUT_CHARS + "\n[... truncated, ")

    configured = ToolExecutor(
        registry, work_dir=tmp_path, tool_settings={"default": {"max_output_chars": 60_000}}
    )
    assert (await configured.execute(ToolCall("1", "default", {}))).output == big


async def test_pre_cancelled_token_means_the_tool_never_runs(tmp_path: Path) -> None:
    ran = []
    registry = ToolRegistry()
    registry.register(Tool("t", "t", {}, lambda a, c: ran.append(1) or ToolResult.success("")))
    token = CancelToken()
    token.cancel()
    result = await ToolExecutor(registry, work_dir=tmp_path).execute(
        ToolCall("1", "t", {}), cancel=token
    )
    assert result.error == "cancelled"
    assert ran == []


async def test_cancellation_reaches_a_running_async_tool(tmp_path: Path) -> None:
    started = asyncio.Event()
    cleaned_up = asyncio.Event()

    async def run(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        started.set()
        try:
            await asyncio.sleep(HANG_S)
        finally:
            cleaned_up.set()  # e.g. killing a subprocess
        return ToolResult.success("finished")

    registry = ToolRegistry()
    registry.register(Tool("long", "long", {}, run))
    token = CancelToken()
    task = asyncio.create_task(
        ToolExecutor(registry, work_dir=tmp_path).execute(ToolCall("1", "long", {}), cancel=token)
    )
    await asyncio.wait_for(started.wait(), 10)
    token.cancel()
    result = await asyncio.wait_for(task, 10)
    assert result == ToolResult(ok=False, output="", error="cancelled")
    assert cleaned_up.is_set()


async def test_cancellation_and_timeout_reach_a_tool_in_a_worker_thread(tmp_path: Path) -> None:
    # A plain function runs in a thread; it learns to stop by polling ctx.cancel.
    stopped = threading.Event()
    started = threading.Event()

    def blocking(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        started.set()
        for _ in range(HANG_S * 100):
            if ctx.cancel.cancelled:
                stopped.set()
                return ToolResult.failure("stopped")
            threading.Event().wait(0.01)
        return ToolResult.success("never noticed")

    registry = ToolRegistry()
    registry.register(Tool("blocking", "b", {}, blocking, timeout_s=0.2))
    ex = ToolExecutor(registry, work_dir=tmp_path)

    result = await asyncio.wait_for(ex.execute(ToolCall("1", "blocking", {})), 20)
    assert result.error == "timeout: tool:blocking exceeded 0.2s"
    assert await asyncio.to_thread(stopped.wait, 10), "the thread was not told about the timeout"

    stopped.clear()
    started.clear()
    registry2 = ToolRegistry()
    registry2.register(Tool("blocking", "b", {}, blocking, timeout_s=30))
    token = CancelToken()
    task = asyncio.create_task(
        ToolExecutor(registry2, work_dir=tmp_path).execute(
            ToolCall("1", "blocking", {}), cancel=token
        )
    )
    assert await asyncio.to_thread(started.wait, 10)
    token.cancel()
    assert (await asyncio.wait_for(task, 20)).error == "cancelled"
    assert await asyncio.to_thread(stopped.wait, 10), "the thread was not told about the cancel"


async def test_sync_tools_do_not_block_the_event_loop(tmp_path: Path) -> None:
    release = threading.Event()

    def waits(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        release.wait(10)
        return ToolResult.success("released")

    registry = ToolRegistry()
    registry.register(Tool("waits", "w", {}, waits))
    task = asyncio.create_task(
        ToolExecutor(registry, work_dir=tmp_path).execute(ToolCall("1", "waits", {}))
    )
    await asyncio.sleep(0.05)  # the loop keeps turning while the tool blocks its thread
    assert not task.done()
    release.set()
    assert (await asyncio.wait_for(task, 10)).output == "released"


async def test_an_inline_tool_runs_on_the_loops_thread_and_a_plain_one_does_not(
    tmp_path: Path,
) -> None:
    @tool(runs_inline=True)
    def where_inline() -> str:
        """Says which thread it ran in."""
        return str(threading.get_ident())

    @tool
    def where_plain() -> str:
        """Says which thread it ran in."""
        return str(threading.get_ident())

    registry = ToolRegistry()
    registry.register(where_inline)
    registry.register(where_plain)
    ex = ToolExecutor(registry, work_dir=tmp_path)
    assert where_inline.runs_inline
    assert not where_plain.runs_inline
    here = str(threading.get_ident())
    assert (await ex.execute(ToolCall("1", "where_inline", {}))).output == here
    assert (await ex.execute(ToolCall("2", "where_plain", {}))).output != here


async def test_an_inline_tool_keeps_the_executors_guarantees(tmp_path: Path) -> None:
    """Errors, coded failures, the output cap, a pre-cancelled run, an awaitable result
    and context variables behave as for a tool in a worker thread."""
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="caller's")

    class Later:
        """A callable object whose plain ``__call__`` returns an awaitable."""

        def __call__(self, args: dict[str, Any], ctx: ToolContext) -> Any:
            async def answer() -> ToolResult:
                return ToolResult.success("awaited")

            return answer()

    def sets_var(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        var.set("the tool's")
        return ToolResult.success("x" * 50)

    def fails(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        raise ToolError("no_such_thing: gone")

    def crashes(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        raise ValueError("bad value")

    ran: list[str] = []
    registry = ToolRegistry()
    registry.register(Tool("later", "l", {}, Later(), runs_inline=True))  # type: ignore[arg-type]
    registry.register(Tool("sets_var", "s", {}, sets_var, max_output_chars=10, runs_inline=True))
    registry.register(Tool("fails", "f", {}, fails, runs_inline=True))
    registry.register(Tool("crashes", "c", {}, crashes, runs_inline=True))
    registry.register(Tool("counts", "c", {},
                           lambda a, c: ran.append("ran") or ToolResult.success(""),
                           runs_inline=True))
    ex = ToolExecutor(registry, work_dir=tmp_path)
    assert (await ex.execute(ToolCall("1", "later", {}))).output == "awaited"
    capped = await ex.execute(ToolCall("2", "sets_var", {}))
    assert capped.ok
    assert len(capped.output) < 50
    assert "truncated" in capped.output
    assert var.get() == "caller's"
    assert (await ex.execute(ToolCall("3", "fails", {}))).error == "no_such_thing: gone"
    assert (await ex.execute(ToolCall("4", "crashes", {}))).error == "ValueError: bad value"
    token = CancelToken()
    token.cancel()
    assert (await ex.execute(ToolCall("5", "counts", {}), cancel=token)).error == "cancelled"
    assert ran == []


async def test_an_inline_tool_past_its_deadline_is_a_timeout_and_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """Nothing can stop an inline call early; one that returns after its deadline is
    reported as the timeout it was, and its holding up the loop is logged, once."""
    import time

    @tool(runs_inline=True, timeout_s=0.05)
    def stalls() -> str:
        """Blocks the loop although it said it would not."""
        time.sleep(0.12)
        return "late"

    @tool(runs_inline=True)
    def slow_but_in_time() -> str:
        """Slow, within its (default) timeout."""
        time.sleep(0.06)
        return "slow"

    registry = ToolRegistry()
    registry.register(stalls)
    registry.register(slow_but_in_time)
    ex = ToolExecutor(registry, work_dir=tmp_path)
    with caplog.at_level("WARNING", logger="lich.tools"):
        first = await ex.execute(ToolCall("1", "stalls", {}))
        again = await ex.execute(ToolCall("2", "stalls", {}))
        in_time = await ex.execute(ToolCall("3", "slow_but_in_time", {}))
    assert first.error == again.error == "timeout: tool:stalls exceeded 0.05s"
    assert in_time.output == "slow"
    warnings = [r.getMessage() for r in caplog.records if "runs inline" in r.getMessage()]
    assert len(warnings) == 2  # once per tool, not per call
    assert warnings[0].startswith("tool stalls runs inline but took ")


async def test_the_config_overrides_runs_inline_either_way(tmp_path: Path) -> None:
    """``[tools.<name>] runs_inline``: an operator sends a tool that says it is inline to
    a worker thread (or the other way round); the tool's word is only the default."""
    here = str(threading.get_ident())

    def where(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult.success(str(threading.get_ident()))

    registry = ToolRegistry()
    registry.register(Tool("says_inline", "s", {}, where, runs_inline=True))
    registry.register(Tool("says_thread", "s", {}, where))
    ex = ToolExecutor(registry, work_dir=tmp_path, tool_settings={
        "says_inline": {"runs_inline": False}, "says_thread": {"runs_inline": True}})
    assert (await ex.execute(ToolCall("1", "says_inline", {}))).output != here
    assert (await ex.execute(ToolCall("2", "says_thread", {}))).output == here
    assert ex.runs_inline(registry.get("says_thread"))  # type: ignore[arg-type]
    bad = ToolExecutor(registry, work_dir=tmp_path,
                       tool_settings={"says_thread": {"runs_inline": "yes"}})
    assert (await bad.execute(ToolCall("3", "says_thread", {}))).error == (
        "invalid_setting: $.tools.says_thread.runs_inline: expected true or false, got string")


def test_runs_inline_is_refused_for_a_coroutine_function() -> None:
    async def already_on_the_loop() -> str:
        """Async."""
        return ""

    with pytest.raises(TypeError, match="'already_on_the_loop': runs_inline is for plain"):
        tool(runs_inline=True)(already_on_the_loop)


async def test_a_tool_returning_the_wrong_type_is_reported(tmp_path: Path) -> None:
    registry = ToolRegistry()
    registry.register(Tool("weird", "w", {}, lambda a, c: "a bare string"))  # type: ignore[arg-type,return-value]
    result = await ToolExecutor(registry, work_dir=tmp_path).execute(ToolCall("1", "weird", {}))
    assert result.error == "bad_tool_result: weird returned str, not ToolResult"


async def test_context_carries_env_settings_and_run(tmp_path: Path) -> None:
    seen: list[ToolContext] = []
    registry = ToolRegistry()
    registry.register(Tool("t", "t", {}, lambda a, c: seen.append(c) or ToolResult.success("")))
    ex = ToolExecutor(registry, work_dir=tmp_path, env={"K": "v"}, tool_settings={"t": {"x": 1}})
    await ex.execute(ToolCall("call-1", "t", {}))
    (ctx,) = seen
    assert ctx.work_dir == tmp_path
    assert ctx.env == {"K": "v"}
    assert ctx.settings == {"x": 1}
    assert ctx.call_id == "call-1"


# ------------------------------------------------------------------ guards


def test_truncate_text_marker() -> None:
    assert truncate_text("abc", 3) == "abc"
    assert truncate_text("abcdef", 2) == "ab\n[... truncated, 4 chars omitted ...]"


@pytest.mark.parametrize(
    ("text", "limit", "style", "expected"),
    [
        ("abcdef", 6, "inline", "abcdef"),
        ("abcdef", 2, "inline", "ab… [4 chars omitted]"),
        ("abcdef", 6, "ellipsis", "abcdef"),
        ("abcdef", 4, "ellipsis", "abc…"),  # the mark counts: four characters in all
        ("abcdef", 1, "ellipsis", "…"),
        ("abcdef", 0, "ellipsis", "…"),
        ("abcdef", -3, "block", "\n[... truncated, 6 chars omitted ...]"),
        ("", 0, "inline", ""),
    ],
)
def test_truncate_text_styles(text: str, limit: int, style: Any, expected: str) -> None:
    assert truncate_text(text, limit, style=style) == expected


def test_argument_helpers() -> None:
    args = {"s": "x", "empty": "", "n": 2.7, "b": True, "ns": "3", "inf": float("inf")}
    assert require_string_arg(args, "s") == "x"
    for key in ("empty", "absent", "n"):
        with pytest.raises(ToolError, match=rf"^missing_arg: {key}$"):
            require_string_arg(args, key)
    assert optional_string_arg(args, "empty", "fb") == "fb"
    assert optional_number_arg(args, "n", 0) == 2.7
    assert optional_number_arg(args, "ns", 1) == 1  # numeric strings are not coerced
    assert optional_number_arg(args, "b", 1) == 1  # a bool is not a number
    assert optional_number_arg(args, "inf", 1) == 1
    assert optional_int_arg(args, "n", 0) == 2
    assert optional_int_arg(args, "n", 0, lo=5) == 5
    assert optional_int_arg(args, "absent", 9, hi=4) == 4
    assert optional_bool_arg(args, "b", False) is True
    assert optional_bool_arg(args, "s", False) is False


def test_resolve_in_root_confines_paths(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "f.txt").write_text("x")
    real_root = os.path.realpath(root)
    assert resolve_in_root(root, "sub/f.txt") == Path(real_root, "sub", "f.txt")
    assert resolve_in_root(root, "new/dir/file.txt") == Path(real_root, "new", "dir", "file.txt")
    assert resolve_in_root(root, ".") == Path(real_root)
    assert resolve_in_root(root, str(root / "sub")) == Path(real_root, "sub")
    for bad in ("../outside", "/etc/passwd", "sub/../../x", "missing/../../x"):
        with pytest.raises(ToolError, match=r"^path_escape: "):
            resolve_in_root(root, bad)
    with pytest.raises(ToolError, match=r"^invalid_path: "):
        resolve_in_root(root, "a\x00b")


def test_resolve_in_root_follows_symlinks_for_existing_and_new_paths(tmp_path: Path) -> None:
    root = tmp_path / "root"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("s")
    (root / "link").symlink_to(outside)
    (root / "file_link").symlink_to(outside / "secret.txt")
    (root / "dangling").symlink_to(outside / "not-yet.txt")
    (root / "inner").symlink_to(root / "real")
    (root / "real").mkdir()
    for escaping in ("link/secret.txt", "link/new-file.txt", "file_link", "dangling"):
        with pytest.raises(ToolError, match=r"^path_escape: "):
            resolve_in_root(root, escaping)
    assert resolve_in_root(root, "inner/new.txt") == Path(os.path.realpath(root), "real", "new.txt")
