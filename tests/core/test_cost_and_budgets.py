"""Cost on events and runs (``lich_price_call``), budgets that stop a run
(``lich_before_model_call`` and the builtin ``budgets`` plugin)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

import lich
from lich.events import BudgetExhausted, Envelope, LlmEnd, RunEnd
from lich.providers import ProviderDefaults
from lich.serialization import event_to_dict
from lich.sessions import JsonlSessionStore, read_session_file
from lich.testing import Reply, ScriptedChat, ScriptRequest, make_test_config
from lich.types import ToolCall, Usage

from .conftest import event_types


class Echo:
    """``echo(text)``, so a scripted model can keep a run going."""

    def lich_register_tools(self, registry: Any) -> None:
        @lich.tool
        def echo(text: str) -> str:
            """Echo."""
            return text

        registry.register(echo)


def looping(request: ScriptRequest) -> Reply:
    """A tool call every turn, 100 prompt + 10 completion tokens each."""
    n = len(request.tool_results_since_user())
    return Reply(tool_calls=(ToolCall(f"c{n}", "echo", {"text": "x"}),),
                 usage=Usage(100, 10, 110))


class PerToken:
    """Prices every call at $0.001 per token (any provider, any model)."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, str, Usage]] = []

    def lich_price_call(self, provider: Any, model: str, usage: Usage) -> float | None:
        self.seen.append((provider, model, usage))
        return usage.total_tokens * 0.001


async def run(config: Any, plugins: list[tuple[str, object]], chat: Any,
              text: str = "go") -> tuple[lich.RunResult, list[Envelope]]:
    events: list[Envelope] = []
    agent = lich.Agent(config, plugins=plugins, chat=chat)
    result = await agent.run(text, on_event=events.append)
    return result, events


async def test_hook_lich_price_call(tmp_path: Path) -> None:
    pricer = PerToken()
    chat = ScriptedChat([Reply(tool_calls=(ToolCall("c1", "echo", {"text": "x"}),),
                               usage=Usage(100, 10, 110, cache_read_tokens=60)),
                         Reply("done", usage=Usage(200, 20, 220))])
    result, events = await run(make_test_config(tmp_path), [("echo", Echo()),
                                                            ("pricer", pricer)], chat)
    costs = [e.event.cost_usd for e in events if isinstance(e.event, LlmEnd)]
    assert costs == [pytest.approx(0.11), pytest.approx(0.22)]
    (end,) = [e.event for e in events if isinstance(e.event, RunEnd)]
    assert end.cost_usd == pytest.approx(0.33)
    assert result.cost_usd == pytest.approx(0.33)
    # The hook saw the answer's model and the usage with its breakdown; the chat
    # function was given directly, so there is no configured provider.
    assert pricer.seen[0] == (None, "scripted", Usage(100, 10, 110, cache_read_tokens=60))
    # The transcript's run_end carries it too.
    assert result.session_path is not None
    records = read_session_file(Path(result.session_path)).records
    (meta,) = [r for r in records if r.get("event") == "run_end"]
    assert meta["cost_usd"] == pytest.approx(0.33)


async def test_the_price_hook_gets_the_resolved_provider(tmp_path: Path) -> None:
    class Kind:
        def lich_register_providers(self, registry: Any) -> None:
            registry.register("fake", lambda cfg: None,
                              defaults=ProviderDefaults(base_url="https://api.example.test/v1"))

    pricer = PerToken()
    config = make_test_config(tmp_path, providers=(
        lich.ProviderConfig(kind="fake", name="scripted", model="configured-model"),))
    await run(config, [("kind", Kind()), ("pricer", pricer)], ScriptedChat(["hi"]))
    provider, model, _ = pricer.seen[0]
    assert (provider.kind, provider.name, provider.base_url, provider.model) == (
        "fake", "scripted", "https://api.example.test/v1", "configured-model")
    assert model == "scripted"  # what the answer names wins over the configured model


async def test_one_unknown_price_makes_the_run_cost_unknown(tmp_path: Path) -> None:
    class FirstOnly:
        calls = 0

        def lich_price_call(self) -> float | None:
            self.calls += 1
            return 0.5 if self.calls == 1 else None

    chat = ScriptedChat([Reply(tool_calls=(ToolCall("c1", "echo", {"text": "x"}),)), "done"])
    result, events = await run(make_test_config(tmp_path),
                               [("echo", Echo()), ("first", FirstOnly())], chat)
    assert [e.event.cost_usd for e in events if isinstance(e.event, LlmEnd)] == [0.5, None]
    assert result.cost_usd is None  # never a partial sum that reads as the whole cost


async def test_without_a_pricing_plugin_every_cost_is_unknown(tmp_path: Path) -> None:
    result, events = await run(make_test_config(tmp_path), [], ScriptedChat(["hi"]))
    assert [e.event.cost_usd for e in events if isinstance(e.event, LlmEnd | RunEnd)] == [
        None, None]
    assert result.cost_usd is None


@pytest.mark.parametrize("bad", ["raises", "async", -1.0, math.nan, "0.1", True])
async def test_a_broken_price_hook_is_skipped_for_the_next(
    tmp_path: Path, bad: Any, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        @lich.hookimpl(tryfirst=True)
        def lich_price_call(self) -> Any:
            if bad == "raises":
                raise RuntimeError("price list missing")
            if bad == "async":
                async def later() -> float:
                    return 1.0
                return later()
            return bad

    result, _ = await run(make_test_config(tmp_path),
                          [("pricer", PerToken()), ("broken", Broken())], ScriptedChat(["hi"]))
    assert result.cost_usd == pytest.approx(result.usage.total_tokens * 0.001)
    assert "lich_price_call of plugin broken" in caplog.text


async def test_hook_lich_before_model_call(tmp_path: Path) -> None:
    seen: list[tuple[int, Usage, float | None]] = []

    class StopAtThree:
        def lich_before_model_call(self, turn: int, usage: Usage,
                                   cost_usd: float | None) -> lich.Stop | None:
            seen.append((turn, usage, cost_usd))
            return lich.Stop("enough: three turns is plenty") if turn == 3 else None

    chat = ScriptedChat(responder=looping)
    result, events = await run(make_test_config(tmp_path),
                               [("echo", Echo()), ("pricer", PerToken()),
                                ("stopper", StopAtThree())], chat)
    assert result.stopped_reason == "budget"
    assert result.outcome.turns_used == 2
    assert len(chat.requests) == 2  # the third call was never made
    assert [(t, u.total_tokens) for t, u, _ in seen] == [(1, 0), (2, 110), (3, 220)]
    assert [c for _, _, c in seen] == [0.0, pytest.approx(0.11), pytest.approx(0.22)]
    (stop,) = [e.event for e in events if isinstance(e.event, BudgetExhausted)]
    assert (stop.turns_used, stop.budget, stop.reason, stop.stopped_by) == (
        2, "stopper", "enough: three turns is plenty", "stopper")
    # A whole turn boundary: the second turn's tool results are in, then the stop.
    assert event_types(events)[-4:] == ["tool_call_end", "budget_exhausted", "turn_end",
                                        "run_end"]


async def test_a_stop_before_the_first_call_makes_no_call(tmp_path: Path) -> None:
    class Never:
        async def lich_before_model_call(self) -> lich.Stop:
            return lich.Stop("closed today", budget="daily")

    chat = ScriptedChat(["hi"])
    result, events = await run(make_test_config(tmp_path), [("never", Never())], chat)
    assert (result.stopped_reason, result.outcome.turns_used, chat.requests) == (
        "budget", 0, [])
    assert event_types(events) == ["run_start", "budget_exhausted", "run_end"]
    (stop,) = [e.event for e in events if isinstance(e.event, BudgetExhausted)]
    assert stop.budget == "daily"


async def test_a_broken_before_model_call_hook_fails_open(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken:
        def lich_before_model_call(self) -> Any:
            raise RuntimeError("meter offline")

    class Odd:
        def lich_before_model_call(self) -> Any:
            return "stop please"

    result, _ = await run(make_test_config(tmp_path), [("broken", Broken()), ("odd", Odd())],
                          ScriptedChat(["hi"]))
    assert result.stopped_reason == "final"
    assert "lich_before_model_call of plugin broken failed" in caplog.text
    assert "lich_before_model_call of plugin odd returned str" in caplog.text


# ------------------------------------------------------------------ budgets


def budget_config(tmp_path: Path, **limits: Any) -> Any:
    return make_test_config(tmp_path, plugins=("budgets",), **limits)


async def test_budgets_stop_on_tokens_at_a_turn_boundary(tmp_path: Path) -> None:
    chat = ScriptedChat(responder=looping)
    result, events = await run(budget_config(tmp_path, max_total_tokens=300),
                               [("echo", Echo())], chat)
    # 110 tokens a turn: after three turns (330 >= 300) the fourth call is not made.
    assert (result.stopped_reason, result.outcome.turns_used, len(chat.requests)) == (
        "budget", 3, 3)
    assert result.usage.total_tokens == 330
    (stop,) = [e.event for e in events if isinstance(e.event, BudgetExhausted)]
    assert (stop.budget, stop.stopped_by) == ("max_total_tokens", "budgets")
    assert stop.reason == "max_total_tokens: 330 tokens used of 300"


async def test_budgets_stop_on_cost(tmp_path: Path) -> None:
    chat = ScriptedChat(responder=looping)
    result, events = await run(budget_config(tmp_path, max_cost_usd=0.2),
                               [("echo", Echo()), ("pricer", PerToken())], chat)
    assert (result.stopped_reason, result.outcome.turns_used) == ("budget", 2)
    (stop,) = [e.event for e in events if isinstance(e.event, BudgetExhausted)]
    assert stop.budget == "max_cost_usd"
    assert stop.reason == "max_cost_usd: $0.2200 spent of $0.2000"


def test_a_cost_budget_with_nothing_to_price_calls_is_a_config_error(tmp_path: Path) -> None:
    chat = ScriptedChat(responder=looping)
    # Nothing prices calls: every cost would be unknown, and the run would stop before
    # its first call. Said before any call, as a configuration error (exit 2 in the CLI).
    with pytest.raises(lich.ConfigError) as info:
        lich.Agent(budget_config(tmp_path, max_cost_usd=5.0), plugins=[("echo", Echo())],
                   chat=chat)
    (problem,) = info.value.problems
    assert problem.startswith("$.max_cost_usd (--max-cost): no loaded plugin prices model "
                              "calls")
    assert 'plugins = ["+prices"]' in problem
    assert chat.requests == []


class KnowsNoPrice:
    """A pricing plugin that cannot price this model (``None``: unknown)."""

    def lich_price_call(self, provider: Any, model: str, usage: Usage) -> float | None:
        return None


async def test_a_cost_budget_with_an_unknown_price_stops_saying_so(tmp_path: Path) -> None:
    chat = ScriptedChat(responder=looping)
    result, events = await run(budget_config(tmp_path, max_cost_usd=5.0),
                               [("echo", Echo()), ("pricer", KnowsNoPrice())], chat)
    # The first call's price is unknown: the budget cannot be checked, and the run does
    # not pretend (it stops before the second call).
    assert (result.stopped_reason, result.outcome.turns_used, len(chat.requests)) == (
        "budget", 1, 1)
    (stop,) = [e.event for e in events if isinstance(e.event, BudgetExhausted)]
    assert stop.reason.startswith("max_cost_usd: the run's cost is unknown, so the budget "
                                  "of $5.00 cannot be checked")
    assert "prices" in stop.reason


def no_usage(request: ScriptRequest) -> Reply:
    """A tool call every turn with a 400-character argument, and no usage at all (as
    some OpenAI-compatible servers answer)."""
    n = len(request.tool_results_since_user())
    return Reply(tool_calls=(ToolCall(f"c{n}", "echo", {"text": "y" * 400}),), usage=Usage())


async def test_an_answer_without_usage_counts_as_estimated_tokens(tmp_path: Path) -> None:
    chat = ScriptedChat(responder=no_usage)
    result, events = await run(budget_config(tmp_path, max_total_tokens=1000),
                               [("echo", Echo())], chat, text="x" * 800)
    ends = [e.event for e in events if isinstance(e.event, LlmEnd)]
    first = ends[0].result.usage
    # chars / 4: the request (system prompt, the 800-character task, the tool schema)
    # and the answer (its tool call, 400 characters of argument and the JSON around it).
    assert first.estimated
    assert first.prompt_tokens > 200
    assert first.completion_tokens > 100
    assert first.total_tokens == first.prompt_tokens + first.completion_tokens
    # So --max-tokens stops the run, which counting 0 per answer never would.
    assert result.stopped_reason == "budget"
    assert result.usage.estimated
    assert result.usage.total_tokens >= 1000
    (stop,) = [e.event for e in events if isinstance(e.event, BudgetExhausted)]
    assert stop.budget == "max_total_tokens"
    # The transcript says the figures are estimates; reported ones carry no mark.
    assert result.session_path is not None
    records = read_session_file(Path(result.session_path)).records
    (meta,) = [r for r in records if r.get("event") == "run_end"]
    assert meta["usage"]["estimated"] is True


async def test_an_estimated_usage_is_priced_so_a_cost_budget_stops(tmp_path: Path) -> None:
    pricer = PerToken()
    result, events = await run(budget_config(tmp_path, max_cost_usd=0.5),
                               [("echo", Echo()), ("pricer", pricer)],
                               ScriptedChat(responder=no_usage), text="x" * 800)
    assert all(usage.estimated and usage.total_tokens > 0 for _, _, usage in pricer.seen)
    assert result.stopped_reason == "budget"
    (stop,) = [e.event for e in events if isinstance(e.event, BudgetExhausted)]
    assert stop.budget == "max_cost_usd"


async def test_a_reported_usage_is_not_estimated(tmp_path: Path) -> None:
    result, events = await run(make_test_config(tmp_path), [("echo", Echo())],
                               ScriptedChat([Reply("done", usage=Usage(7, 3, 10))]))
    assert result.usage == Usage(7, 3, 10)
    assert not result.usage.estimated
    (end,) = [e.event for e in events if isinstance(e.event, RunEnd)]
    assert "estimated" not in event_to_dict(end)["usage"]


async def test_budgets_that_are_not_spent_change_nothing(tmp_path: Path) -> None:
    chat = ScriptedChat([Reply(tool_calls=(ToolCall("c1", "echo", {"text": "x"}),)), "done"])
    result, _ = await run(budget_config(tmp_path, max_total_tokens=10_000, max_cost_usd=100.0),
                          [("echo", Echo()), ("pricer", PerToken())], chat)
    assert result.stopped_reason == "final"
    result, _ = await run(budget_config(tmp_path), [], ScriptedChat(["hi"]))
    assert result.stopped_reason == "final"


def test_a_budget_nothing_enforces_is_a_config_error(tmp_path: Path) -> None:
    config = make_test_config(tmp_path, plugins=(), max_cost_usd=1.0, max_total_tokens=10)
    with pytest.raises(lich.ConfigError) as info:
        lich.Agent(config, chat=ScriptedChat(["hi"]))
    assert [p.split(":")[0] for p in info.value.problems] == ["$.max_cost_usd",
                                                              "$.max_total_tokens"]
    assert 'add "budgets" to plugins' in info.value.problems[0]


def test_the_budget_keys_are_checked(tmp_path: Path) -> None:
    with pytest.raises(lich.ConfigError) as info:
        lich.load_config(data={"max_cost_usd": 0, "max_total_tokens": "many",
                               "work_dir": str(tmp_path)})
    text = "\n".join(info.value.problems)
    assert "$.max_cost_usd" in text
    assert "$.max_total_tokens" in text


# -------------------------------------------------------------- transcripts


def test_an_old_transcript_still_reads(tmp_path: Path) -> None:
    """A version 1 file: usage without breakdowns, run_end without cost."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    lines = [
        {"v": 1, "ts": 1.0, "kind": "meta", "event": "run_start", "run_id": "r1",
         "input": "hi", "model": "m", "work_dir": str(tmp_path)},
        {"v": 1, "ts": 1.0, "kind": "message", "message": {"role": "user", "content": "hi"}},
        {"v": 1, "ts": 1.1, "kind": "event", "seq": 3, "event": {
            "type": "compress_end", "summary_chars": 0, "estimated_tokens": 0, "ok": True,
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}},
        {"v": 1, "ts": 1.2, "kind": "message",
         "message": {"role": "assistant", "content": "hello"}},
        {"v": 1, "ts": 1.3, "kind": "meta", "event": "run_end", "run_id": "r1",
         "stopped_reason": "final", "turns_used": 1,
         "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
         "error": None},
    ]
    path = sessions / "20250101-000000-old00001.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    contents = read_session_file(path)
    assert contents.problems == ()
    assert [m.content for m in contents.messages] == ["hi", "hello"]
    (info,) = JsonlSessionStore(sessions).list()
    assert (info.status, info.answered, info.cost_usd) == ("final", True, None)
    from lich.serialization import event_from_dict

    event = event_from_dict(contents.records[2]["event"])
    assert event.usage == Usage(1, 1, 2)  # type: ignore[union-attr]


async def test_sessions_list_sums_the_cost_of_the_runs(tmp_path: Path) -> None:
    agent = lich.Agent(make_test_config(tmp_path), plugins=[("pricer", PerToken())],
                       chat=ScriptedChat(responder=lambda r: Reply("ok", usage=Usage(5, 5, 10))))
    first = await agent.run("one")
    await agent.run("two", session_id=first.session_id)
    (info,) = agent.sessions.list()
    assert info.cost_usd == pytest.approx(0.02)
