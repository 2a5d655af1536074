"""The one hook caller and its policy table (lich.plugins.policy): every hook has
exactly one row, and a hook added as a spec plus a row is called as the row says."""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from pathlib import Path
from typing import Any

import pluggy
import pytest

from lich import hookimpl, hookspecs
from lich.hooks import hookspec, runs_inline
from lich.plugins import PluginHost
from lich.plugins.policy import HOOK_POLICIES, HookPolicy, RefusedAnswer, policy_table
from lich.settings import ConfigError


def _spec_names() -> list[str]:
    return [name for name, value in vars(hookspecs).items()
            if name.startswith("lich_") and inspect.isfunction(value)]


def test_every_hookspec_has_exactly_one_row_and_every_row_a_spec() -> None:
    rows = [row.name for row in HOOK_POLICIES]
    assert len(rows) == len(set(rows)), "a hook with two rows"
    assert sorted(rows) == sorted(_spec_names())


def test_a_table_refuses_two_rows_for_one_hook() -> None:
    with pytest.raises(ValueError, match="two hook policies for lich_x"):
        policy_table((HookPolicy("lich_x"), HookPolicy("lich_x")))
    host = PluginHost()
    with pytest.raises(ValueError, match="two hook policies for lich_run_start"):
        host.add_hook_policies(HookPolicy("lich_run_start"))


async def test_a_hook_without_a_row_cannot_be_called() -> None:
    host = PluginHost()
    with pytest.raises(KeyError, match="no HookPolicy for lich_nope"):
        await host.call_hook("lich_nope")
    with pytest.raises(TypeError, match="call_hook_sync"):
        await host.call_hook("lich_price_call")


# -- a hook of a plugin's own: its spec and its row, nothing else ---------------


class _Specs:
    @hookspec
    def lich_vote(self, topic: str) -> Any:
        """Vote on a topic."""

    @hookspec
    def lich_refine(self, text: str) -> Any:
        """Refine a text."""

    @hookspec
    def lich_gate(self, topic: str) -> Any:
        """Let a topic through, or not."""


def _host(*rows: HookPolicy, timeout_s: float = 0.2) -> PluginHost:
    host = PluginHost(hook_timeout_s=timeout_s)
    host.pm.add_hookspecs(_Specs)
    host.add_hook_policies(*rows)
    return host


VOTE = HookPolicy("lich_vote", answers={int: "collect"},
                  bad_answer="{hook} of plugin {plugin} returned {type} (ignored)")
REFINE = HookPolicy("lich_refine", answers={str: "chain"},
                    chain=lambda kwargs, answer: {"text": answer})
GATE = HookPolicy("lich_gate", answers={bool: "stop"}, on_error="block",
                  on_bad_answer="block", failed="gate_error ({plugin}): {error}",
                  bad_answer="gate_error ({plugin}): {hook} returned {type}")


def _plugin(**hooks: Any) -> object:
    return type("P", (), {name: staticmethod(hookimpl(fn)) for name, fn in hooks.items()})()


async def test_collect_calls_every_implementation_and_reports_failures(
        caplog: pytest.LogCaptureFixture) -> None:
    host = _host(VOTE)

    def broken(topic: str) -> int:
        raise RuntimeError(f"no vote on {topic}")

    async def late(topic: str) -> int:
        await asyncio.sleep(30)
        return 0

    host.register_object(_plugin(lich_vote=lambda topic: 1), "one")
    host.register_object(_plugin(lich_vote=broken), "broken")
    host.register_object(_plugin(lich_vote=lambda topic: "two"), "wrong")
    host.register_object(_plugin(lich_vote=late), "late")
    host.register_object(_plugin(lich_vote=lambda topic: 3), "three")
    with caplog.at_level(logging.WARNING, logger="lich.plugins"):
        outcome = await host.call_hook("lich_vote", topic="tea")
    # pluggy order: the last registered first.
    assert [(a.plugin, a.value) for a in outcome.collected] == [("three", 3), ("one", 1)]
    assert outcome.failure is None
    assert outcome.stopped is None
    assert "lich_vote of plugin late failed (skipped): timed out after 0.2s" in caplog.text
    assert "lich_vote of plugin wrong returned str (ignored)" in caplog.text
    assert "lich_vote of plugin broken failed (skipped): RuntimeError: no vote on tea" \
        in caplog.text


async def test_chain_hands_each_answer_to_the_next_implementation() -> None:
    host = _host(REFINE)
    seen: list[str] = []

    def shout(text: str) -> str:
        seen.append(text)
        return text.upper()

    def exclaim(text: str) -> str:
        seen.append(text)
        return text + "!"

    host.register_object(_plugin(lich_refine=exclaim), "exclaim")
    host.register_object(_plugin(lich_refine=lambda text: None), "pass")
    host.register_object(_plugin(lich_refine=shout), "shout")
    outcome = await host.call_hook("lich_refine", text="hi")
    assert outcome.kwargs["text"] == "HI!"
    assert seen == ["hi", "HI"]
    assert outcome.chained_by == ("shout", "exclaim")


async def test_a_chain_that_refuses_an_answer_fails_its_plugin() -> None:
    def refuse(kwargs: Any, answer: str) -> Any:
        raise RefusedAnswer(f"cannot take {answer!r}")

    host = _host(HookPolicy("lich_refine", answers={str: "chain"}, chain=refuse,
                            on_error="block", failed="refine_error ({plugin}): {error}"))
    host.register_object(_plugin(lich_refine=lambda text: "x"), "bad")
    outcome = await host.call_hook("lich_refine", text="hi")
    assert outcome.failure is not None
    assert outcome.failure.reason == "refine_error (bad): cannot take 'x'"


async def test_fail_closed_rows_end_the_chain_with_the_rows_wording() -> None:
    host = _host(GATE)
    called: list[str] = []

    release = threading.Event()

    def hang(topic: str) -> bool:
        called.append("hang")
        release.wait(5)  # a plain def: a worker thread, abandoned at the deadline
        return True

    def last(topic: str) -> bool:
        called.append("last")
        return True

    host.register_object(_plugin(lich_gate=last), "last")
    host.register_object(_plugin(lich_gate=hang), "hang")
    try:
        outcome = await host.call_hook("lich_gate", topic="t")
    finally:
        release.set()
    assert called == ["hang"]  # the chain stopped at the failure
    assert outcome.failure is not None
    assert outcome.failure.reason == "gate_error (hang): timed out after 0.2s"
    assert outcome.failure.timed_out

    host = _host(GATE)
    host.register_object(_plugin(lich_gate=lambda topic: "yes"), "wrong")
    outcome = await host.call_hook("lich_gate", topic="t")
    assert outcome.failure is not None
    assert outcome.failure.reason == "gate_error (wrong): lich_gate returned str"

    host = _host(GATE)
    host.register_object(_plugin(lich_gate=lambda topic: None), "abstains")
    host.register_object(_plugin(lich_gate=lambda topic: False), "refuses")
    outcome = await host.call_hook("lich_gate", topic="t")
    assert outcome.stopped is not None
    assert outcome.value is False
    assert outcome.stopped.plugin == "refuses"


async def test_a_given_deadline_is_shared_by_all_implementations() -> None:
    host = _host(HookPolicy("lich_gate", answers={bool: "stop"}, timeout="given",
                            on_error="block", timed_out="no answer within {timeout:g}s"),
                 timeout_s=30)

    def sleeper(seconds: float) -> Any:
        async def lich_gate(topic: str) -> None:
            await asyncio.sleep(seconds)
        return lich_gate

    host.register_object(_plugin(lich_gate=sleeper(0.8)), "second")
    host.register_object(_plugin(lich_gate=sleeper(0.4)), "first")
    # Each alone is within the 1s; together they are not.
    outcome = await host.call_hook("lich_gate", limit_s=1.0, topic="t")
    assert outcome.failure is not None
    assert outcome.failure.timed_out
    assert (outcome.failure.plugin, outcome.failure.error) == ("second", "no answer within 1s")


async def test_a_new_run_time_hook_may_be_marked_inline(tmp_path: Path) -> None:
    """Inline markers are allowed on exactly the rows called under a deadline: a
    plugin's own hook with an async row included."""
    host = _host(VOTE)
    report = host.register_object(_plugin(lich_vote=runs_inline(lambda topic: 7)), "quick")
    assert report.ok, report.describe_error()
    assert [a.value for a in (await host.call_hook("lich_vote", topic="t")).collected] == [7]
    report = host.register_object(_plugin(lich_event=runs_inline(lambda event: None)), "odd")
    assert not report.ok
    assert "lich_event cannot be marked runs_inline" in report.describe_error()


def test_sync_rows_run_registration_coroutines_and_refuse_async_prices(
        caplog: pytest.LogCaptureFixture) -> None:
    from lich.tools import ToolRegistry
    from lich.types import Usage

    host = PluginHost()
    registered: list[str] = []

    async def lich_register_tools(registry: ToolRegistry) -> None:
        registered.append(registry.current_plugin or "")

    async def priced(model: str) -> float:
        return 1.0

    host.register_object(_plugin(lich_register_tools=lich_register_tools), "tools")
    host.register_object(_plugin(lich_price_call=lambda model: 0.5), "fallback")
    host.register_object(_plugin(lich_price_call=priced), "async_price")
    host.register_tools(ToolRegistry(), config=None)  # type: ignore[arg-type]
    assert registered == ["tools"]  # awaited, as its own plugin
    with caplog.at_level(logging.WARNING, logger="lich.plugins"):
        assert host.price_call(None, "m", Usage(), None) == 0.5  # type: ignore[arg-type]
    assert "lich_price_call of plugin async_price failed (skipped): it is async; it must be " \
        "a plain def" in caplog.text
    assert "never awaited" not in caplog.text


def test_raise_rows_end_assembly_with_a_configuration_error() -> None:
    host = PluginHost()

    def lich_make_router(providers: Any) -> Any:
        raise OSError("no route")

    host.register_object(_plugin(lich_make_router=lich_make_router), "router")
    with pytest.raises(ConfigError, match=r"\$\.plugins: lich_make_router of plugin 'router' "
                                          "failed: OSError: no route"):
        host.make_router([], None)  # type: ignore[arg-type]


def test_hook_wrappers_are_refused_at_load_as_the_docs_say() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "plugins.md").read_text()
    assert "UnsupportedHookWrapper" in docs
    marker = pluggy.HookimplMarker("lich")

    class Wrapping:
        @marker(wrapper=True)
        def lich_run_start(self, run: Any) -> Any:
            return (yield)

    report = PluginHost().register_object(Wrapping(), "wrapping")
    assert report.error_type == "UnsupportedHookWrapper"
