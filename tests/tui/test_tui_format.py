"""The TUI's pure formatting helpers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.cells import cell_len

from lich.events import (
    CompressEnd,
    CompressSkipped,
    Failover,
    InstructionsCut,
    PromptBlocked,
    Retry,
    RunContinued,
    RunEnd,
)
from lich.sessions import SessionInfo
from lich.tui.format.blocks import AssistantBlock, ToolBlock, UserBlock, history_blocks
from lich.tui.format.commands import model_line, session_list_lines, usage_line
from lich.tui.format.notices import (
    budget_notice,
    compress_notice,
    error_notice,
    failover_notice,
    hook_notice,
    retry_notice,
    run_end_notice,
)
from lich.tui.format.status import SEPARATOR, SPINNER_FRAMES, StatusPart, fit_status, status_parts
from lich.tui.format.text import format_usage, preview
from lich.tui.format.tools import parse_tool_message_content, tool_call_line, tool_result_line
from lich.types import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolResult,
    Usage,
    UserMessage,
)


@pytest.mark.parametrize(
    ("tokens", "text"), [(0, "0"), (1234, "1,234"), (1234567, "1,234,567")]
)
def test_format_usage(tokens: int, text: str) -> None:
    assert format_usage(tokens) == text


def test_preview_flattens_and_cuts() -> None:
    assert preview("a\n  b\tc ", 80) == "a b c"
    cut = preview("x" * 100, 80)
    assert cut == "x" * 80 + "… [20 chars omitted]"


def test_tool_call_line_previews_the_args() -> None:
    call = ToolCall("c1", "shell", {"cmd": "ls"})
    assert tool_call_line(call) == '● shell({"cmd":"ls"})'
    long = ToolCall("c2", "write_file", {"path": "a.txt", "content": "y" * 200})
    line = tool_call_line(long)
    assert line.startswith('● write_file({"path":"a.txt","content":"yyy')
    assert "chars omitted]" in line
    assert tool_call_line(ToolCall("c3", "x", args_error="bad json")) == (
        "● x(<unparseable arguments>)"
    )


def test_tool_result_lines() -> None:
    assert tool_result_line(None) == "└ running…"
    assert tool_result_line(ToolResult.success("file.txt")) == "└ ok (file.txt)"
    assert tool_result_line(ToolResult.success("")) == "└ ok (no output)"
    # unlike the reference, a failure shows its error, not empty parentheses
    assert tool_result_line(ToolResult.failure("not_found: a.txt")) == (
        "└ error: not_found: a.txt"
    )
    assert tool_result_line(ToolResult.failure("timeout", "partial")) == (
        "└ error: timeout (partial)"
    )
    long = tool_result_line(ToolResult.success("z" * 500))
    assert "[380 chars omitted]" in long


def test_parse_tool_message_content() -> None:
    failed = ToolResult.failure("boom", "out").to_content()
    assert parse_tool_message_content(failed, True) == ToolResult(False, "out", "boom")
    assert parse_tool_message_content("plain text") == ToolResult(True, "plain text")
    # JSON output of a successful tool is output, not a result envelope
    data = json.dumps({"a": 1})
    assert parse_tool_message_content(data) == ToolResult(True, data)
    assert parse_tool_message_content("{not json") == ToolResult(True, "{not json")
    assert parse_tool_message_content("raw", True) == ToolResult(False, "raw", "tool failed")


def test_history_blocks_pair_calls_with_results_and_drop_system() -> None:
    call = ToolCall("c1", "shout", {"text": "hi"})
    messages = [
        SystemMessage("be nice"),
        UserMessage("shout hi"),
        AssistantMessage("on it", (call,)),
        ToolMessage("c1", "shout", "HI!"),
        AssistantMessage("done"),
        ToolMessage("orphan", "lost", "x"),
    ]
    blocks = history_blocks(messages)
    assert blocks == [
        UserBlock("shout hi"),
        AssistantBlock("on it"),
        ToolBlock(call, ToolResult(True, "HI!")),
        AssistantBlock("done"),
        ToolBlock(ToolCall("orphan", "lost"), ToolResult(True, "x")),
    ]


def test_history_blocks_cap_keeps_the_newest() -> None:
    messages = [UserMessage(f"msg {i}") for i in range(60)]
    blocks = history_blocks(messages, cap=50)
    assert len(blocks) == 50
    assert blocks[0] == UserBlock("msg 10")
    assert blocks[-1] == UserBlock("msg 59")
    assert history_blocks(messages, cap=0) == []


def test_history_blocks_unanswered_call_has_no_result() -> None:
    call = ToolCall("c1", "slow")
    assert history_blocks([AssistantMessage("", (call,))]) == [ToolBlock(call)]


def test_notices() -> None:
    assert compress_notice(CompressEnd(1234, 5000)).text == (
        "· context compressed (summary 1,234 chars, ~5,000 tokens now)"
    )
    assert compress_notice(CompressEnd(0, 9000, ok=False)).level == "warn"
    retry = retry_notice(Retry("main", 2, "rate_limit", 1.25, "slow down"))
    assert retry.text == "· retrying main in 1.2s (attempt 2, rate_limit: slow down)"
    failover = failover_notice(Failover("main", "backup", "auth", "401"))
    assert failover.text == "· main failed (auth: 401); failing over to backup"
    assert budget_notice().text == "· budget exhausted (turn cap reached)"
    error = error_notice("e" * 400)
    assert error.level == "error"
    assert "[100 chars omitted]" in error.text


def test_the_plugins_say_in_a_run_is_never_silent() -> None:
    cut = hook_notice(InstructionsCut("skills", 0, 900, 500))
    assert (cut.text, cut.level) == (
        "· instructions cut: skills (~900 tokens, over the 500-token budget)", "warn")
    refused = hook_notice(PromptBlocked("no keys", "guard"))
    assert (refused.text, refused.level) == ("· message refused by guard: no keys", "error")
    assert hook_notice(CompressSkipped(900, "busy", "pin")).text == (
        "· compression skipped by pin: busy")
    assert hook_notice(RunContinued(1, "run the tests", "insist")).text == (
        "· insist asks for more: run the tests")


def test_run_end_notice() -> None:
    assert run_end_notice(RunEnd("final", 1, Usage())) is None
    aborted = run_end_notice(RunEnd("aborted", 1, Usage()))
    assert aborted is not None
    assert "cancelled" in aborted.text
    budget = run_end_notice(RunEnd("budget", 3, Usage()))
    assert budget == budget_notice()
    error = run_end_notice(RunEnd("error", 0, Usage(), "ProviderError: x"))
    assert error is not None
    assert error.text == "· error: ProviderError: x"


def test_usage_and_model_lines() -> None:
    assert usage_line(Usage(1000, 234, 1234)) == (
        "· tokens used this session: 1,234 (prompt 1,000 · completion 234)"
    )
    assert model_line("gpt-x", "openai_compat") == "· model: gpt-x · provider: openai_compat"
    assert model_line("", "") == "· model: ? · provider: ?"


def test_session_list_lines(tmp_path: Path) -> None:
    assert session_list_lines([]) == ["· no sessions yet"]
    infos = [
        SessionInfo(f"s{i}", tmp_path / f"s{i}.jsonl", f"title {i}", 100.0 - i, 10)
        for i in range(12)
    ]
    lines = session_list_lines(infos, current="s1")
    assert lines[0].startswith("· sessions (12, newest first")
    assert lines[1] == "  s0  title 0"
    assert lines[2] == " *s1  title 1"
    assert len(lines) == 1 + 10 + 1
    assert lines[-1] == "  … 2 older"


def test_status_parts() -> None:
    parts = status_parts(
        model="m", provider="ollama", turns=2, tokens=1234, phase="tool", frame=1,
        active_tool="shout", compress_count=1, budget_exhausted=True, session_id="abc",
    )
    texts = [p.text for p in parts]
    assert texts == [
        "m (ollama)", "run turns 2", "tui tokens 1,234", f"{SPINNER_FRAMES[1]} tool shout",
        "tui compressed 1", "budget exhausted", "session abc",
    ]
    idle = status_parts(model="m", provider="", turns=0, tokens=0, phase="idle")
    assert [p.text for p in idle] == ["m", "run turns 0", "tui tokens 0", "idle"]
    thinking = status_parts(model="m", provider="", turns=0, tokens=0, phase="thinking")
    assert thinking[-1].text == f"{SPINNER_FRAMES[0]} thinking"
    cancelling = status_parts(
        model="m", provider="", turns=0, tokens=0, phase="thinking", cancelling=True
    )
    assert "cancelling" in cancelling[-1].text


def _line(parts: list[StatusPart]) -> str:
    return SEPARATOR.join(p.text for p in parts)


def test_fit_status_keeps_a_line_that_fits() -> None:
    parts = status_parts(model="m", provider="p", turns=1, tokens=5, phase="idle")
    assert fit_status(parts, 80) == parts


def test_fit_status_shortens_to_80_columns() -> None:
    parts = status_parts(
        model="claude-sonnet-4-very-long-model-name-20250514", provider="anthropic +1",
        turns=12, tokens=1234567, phase="tool", active_tool="write_file", compress_count=3,
        budget_exhausted=True, session_id="20250101-120000-deadbeef",
    )
    assert len(_line(parts)) > 78
    fitted = fit_status(parts, 78)
    line = _line(fitted)
    assert len(line) <= 78
    assert "deadbeef" in line  # the random part of the id survives
    assert "budget" in line
    assert "tool" in line
    # Shortened counters still say whose they are.
    assert "run t12" in line
    assert "tui tok " in line
    assert "tui cmp 3" in line


def test_fit_status_cuts_when_nothing_else_helps() -> None:
    parts = status_parts(model="m" * 60, provider="", turns=1, tokens=1, phase="idle")
    fitted = fit_status(parts, 10)
    assert len(_line(fitted)) <= 10
    assert fitted[0].text.endswith("…")


def test_the_format_package_offers_every_name_of_its_modules() -> None:
    import lich.tui.format as package
    from lich.tui.format import blocks, commands, notices, status, text, tools

    modules = (blocks, commands, notices, status, text, tools)
    names = {name for module in modules for name in module.__all__}
    assert set(package.__all__) == names
    for module in modules:
        for name in module.__all__:
            assert getattr(package, name) is getattr(module, name)


@pytest.mark.parametrize("width", [10, 24, 40, 78])
def test_fit_status_measures_wide_characters_in_cells(width: int) -> None:
    # Each CJK character and each of these emoji takes two terminal cells.
    parts = status_parts(
        model="通义千问-大模型-超长的名字-🚀🚀", provider="本地", turns=3, tokens=42,
        phase="tool", active_tool="写文件_📝", session_id="20250101-120000-会话标识",
    )
    assert cell_len(_line(parts)) > len(_line(parts))  # the case this is about
    fitted = fit_status(parts, width)
    assert cell_len(_line(fitted)) <= width


def test_fit_status_keeps_a_wide_line_that_fits_in_cells_whole() -> None:
    parts = status_parts(model="模型", provider="", turns=1, tokens=5, phase="idle")
    assert fit_status(parts, cell_len(_line(parts))) == parts
    assert fit_status(parts, cell_len(_line(parts)) - 1) != parts
