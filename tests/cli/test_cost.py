"""Cost and budgets on the command line: the closing line, `--json`, the transcript,
`lich sessions list/show`, and `--max-cost` / `--max-tokens` stopping a run (exit 1)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from lich.testing import Reply, ScriptRequest
from lich.types import ToolCall, Usage

from .conftest import json_lines, write_config

# Every answer: 10,000 prompt tokens (4,000 of them cached) and 2,000 out. At gpt-4o's
# prices ($2.50 / $1.25 cached / $10 per million) that is 0.015 + 0.005 + 0.02 = $0.04.
USAGE = Usage(10_000, 2_000, 12_000, cache_read_tokens=4_000)


def priced_config(work: Path, base_url: str, *, extra: str = "") -> None:
    """The defaults plus `prices`; the scripted server counts as OpenAI (its URL is a
    loopback one the price data cannot know), and the model is gpt-4o."""
    text = "\n".join([
        'plugins = ["+prices"]',
        extra,
        "[prices.providers]",
        'scripted = "openai"',
        "[[providers]]",
        'kind = "openai_compat"',
        'name = "scripted"',
        'model = "gpt-4o"',
        f'base_url = "{base_url}"',
    ]) + "\n"
    path = work / ".lich" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def tool_then_answer(request: ScriptRequest) -> Reply:
    if not request.tool_results_since_user():
        return Reply(tool_calls=(ToolCall("c1", "list_dir", {"path": "."}),), usage=USAGE)
    return Reply("done", usage=USAGE)


def always_tools(request: ScriptRequest) -> Reply:
    n = len(request.tool_results_since_user())
    return Reply(tool_calls=(ToolCall(f"c{n}", "list_dir", {"path": "."}),), usage=USAGE)


def test_cost_in_the_closing_line_json_transcript_and_sessions(
    work: Path, scripted: Any, lich: Any
) -> None:
    server = scripted(responder=tool_then_answer)
    priced_config(work, server.base_url)

    result = lich("look around")
    assert result.exit_code == 0, result.stderr
    assert "[lich] final after 2 turns, 24,000 tokens, $0.0800; session" in result.stderr

    result = lich("--json", "again")
    assert result.exit_code == 0, result.stderr
    lines = json_lines(result.stdout)
    llm_ends = [line for line in lines if line["type"] == "llm_end"]
    assert [line["cost_usd"] for line in llm_ends] == [pytest.approx(0.04)] * 2
    assert llm_ends[0]["result"]["usage"] == {
        "prompt_tokens": 10_000, "completion_tokens": 2_000, "total_tokens": 12_000,
        "cache_read_tokens": 4_000, "cache_write_tokens": 0, "reasoning_tokens": 0}
    (end,) = [line for line in lines if line["type"] == "run_end"]
    assert end["v"] == 2
    assert end["cost_usd"] == pytest.approx(0.08)

    # Each transcript records its run's cost.
    for path in (work / ".lich" / "sessions").glob("*.jsonl"):
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        (meta,) = [r for r in records if r.get("event") == "run_end"]
        assert (meta["v"], meta["cost_usd"]) == (2, pytest.approx(0.08))

    listed = lich("sessions", "list")
    assert listed.exit_code == 0
    assert listed.stdout.count("$0.0800") == 2
    as_json = json.loads(lich("sessions", "list", "--json").stdout)
    assert [s["cost_usd"] for s in as_json] == [pytest.approx(0.08)] * 2

    shown = lich("sessions", "show", "latest")
    assert "tokens, $0.0800" in shown.stdout
    assert "session cost: $0.0800" in shown.stdout
    assert json.loads(lich("sessions", "show", "latest", "--json").stdout)["cost_usd"] == (
        pytest.approx(0.08))


def test_an_unknown_model_says_cost_unknown(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted([Reply("hi", usage=USAGE)])
    priced_config(work, server.base_url)
    text = (work / ".lich" / "config.toml").read_text(encoding="utf-8")
    (work / ".lich" / "config.toml").write_text(
        text.replace('model = "gpt-4o"', 'model = "in-house-model-7"'), encoding="utf-8")

    result = lich("--json", "hi")
    assert result.exit_code == 0, result.stderr
    (end,) = [line for line in json_lines(result.stdout) if line["type"] == "run_end"]
    assert end["cost_usd"] is None
    server = scripted([Reply("hi", usage=USAGE)])
    result = lich("--base-url", server.base_url, "hi")
    assert "12,000 tokens, cost unknown;" in result.stderr


def test_a_user_price_table(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted([Reply("hi", usage=Usage(1_000_000, 500_000, 1_500_000))])
    priced_config(work, server.base_url, extra='[prices.models."gpt-4o"]\n'
                                               "input_mtok = 1.0\noutput_mtok = 4.0")
    result = lich("hi")
    assert "1,500,000 tokens, $3.00;" in result.stderr


def test_without_prices_the_closing_line_has_no_cost(
    work: Path, scripted: Any, lich: Any
) -> None:
    from .conftest import write_config

    server = scripted([Reply("hi", usage=USAGE)])
    write_config(work, server.base_url)
    result = lich("hi")
    assert "final after 1 turn, 12,000 tokens; session" in result.stderr


def test_max_tokens_stops_at_a_turn_boundary(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted(responder=always_tools)
    priced_config(work, server.base_url)

    result = lich("--max-tokens", "30000", "loop")

    # 12,000 a turn: after three turns (36,000 >= 30,000) the fourth call is not made.
    assert result.exit_code == 1
    assert len(server.requests) == 3
    assert ("budget exhausted after 3 turns: max_total_tokens: 36,000 tokens used of 30,000"
            in result.stderr)
    assert "budget after 3 turns, 36,000 tokens, $0.1200" in result.stderr


def test_max_cost_stops_with_reason_and_exit_1(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted(responder=always_tools)
    priced_config(work, server.base_url)

    result = lich("--json", "--max-cost", "0.1", "loop")

    assert result.exit_code == 1
    assert len(server.requests) == 3  # $0.04, $0.08, $0.12 >= $0.10: no fourth call
    lines = json_lines(result.stdout)
    (stop,) = [line for line in lines if line["type"] == "budget_exhausted"]
    assert (stop["budget"], stop["stopped_by"], stop["turns_used"]) == (
        "max_cost_usd", "budgets", 3)
    assert stop["reason"] == "max_cost_usd: $0.1200 spent of $0.1000"
    (end,) = [line for line in lines if line["type"] == "run_end"]
    assert (end["stopped_reason"], end["turns_used"]) == ("budget", 3)
    # The last turn is whole: every tool call of it has its result.
    types = [line["type"] for line in lines]
    assert types[-4:] == ["tool_call_end", "budget_exhausted", "turn_end", "run_end"]


def test_max_cost_from_the_config_file(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted(responder=always_tools)
    priced_config(work, server.base_url)
    path = work / ".lich" / "config.toml"
    path.write_text("max_cost_usd = 0.05\n" + path.read_text(encoding="utf-8"),
                    encoding="utf-8")
    result = lich("loop")
    assert result.exit_code == 1
    assert len(server.requests) == 2
    assert "max_cost_usd: $0.0800 spent of $0.0500" in result.stderr


def test_max_cost_without_prices_is_a_usage_error_before_any_call(
    work: Path, scripted: Any, lich: Any
) -> None:
    server = scripted(["never asked"])
    write_config(work, server.base_url)  # the default plugins: no prices

    result = lich("--max-cost", "0.5", "hello")

    assert result.exit_code == 2
    assert "lich: error: $.max_cost_usd (--max-cost): no loaded plugin prices model " \
           "calls" in result.stderr
    assert 'plugins = ["+prices"]' in result.stderr
    assert "budget exhausted" not in result.stderr
    assert server.requests == []
    assert not (work / ".lich" / "sessions").exists()  # no transcript either


def test_an_answer_without_usage_is_counted_estimated(
    work: Path, scripted: Any, lich: Any
) -> None:
    # The server reports no usage: the run counts chars / 4 and says it is an estimate.
    server = scripted([Reply("z" * 4000, usage=Usage())])
    write_config(work, server.base_url)

    result = lich("--max-tokens", "100000", "hello")

    assert result.exit_code == 0, result.stderr
    line = next(x for x in result.stderr.splitlines() if "final after 1 turn," in x)
    found = re.search(r"final after 1 turn, ([\d,]+) tokens \(estimated\)", line)
    assert found, line
    # At least the answer's 4,000 characters / 4, and the request's tokens besides.
    assert int(found.group(1).replace(",", "")) > 1000


def test_bad_budget_flags_are_usage_errors(lich: Any) -> None:
    for args in (["--max-cost", "0", "x"], ["--max-cost", "cheap", "x"],
                 ["--max-tokens", "0", "x"]):
        result = lich(*args)
        assert result.exit_code == 2, args


def test_chat_shows_each_run_cost_and_the_total(work: Path, scripted: Any, lich: Any) -> None:
    server = scripted([Reply("a", usage=USAGE), Reply("b", usage=USAGE)])
    priced_config(work, server.base_url)

    result = lich("chat", input="one\ntwo\n/usage\n")

    assert result.exit_code == 0, result.stderr
    assert result.stderr.count("[1 turn · 12,000 tokens · $0.0400]") == 2
    assert "this chat: 2 runs, 20,000 prompt + 4,000 completion = 24,000 tokens, $0.0800" in (
        result.stderr)
    assert "last run: 10,000 prompt + 2,000 completion = 12,000 tokens, $0.0400" in result.stderr


def test_config_validate_reports_a_budget_nothing_enforces(
    work: Path, scripted: Any, lich: Any
) -> None:
    from .conftest import write_config

    server = scripted(["hi"])
    write_config(work, server.base_url, plugins=["builtin_tools", "openai_compat"],
                 extra="max_total_tokens = 1000")
    result = lich("config", "validate")
    assert result.exit_code == 2
    assert "$.max_total_tokens: no loaded plugin enforces it" in result.stderr + result.stdout
    # The same config refuses to run rather than run unlimited.
    assert lich("hi").exit_code == 2
    assert server.requests == []
