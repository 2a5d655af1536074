"""The TUI's pure formatting helpers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.cells import cell_len

from lich.events import CompressEnd, Failover, Retry, RunEnd
from lich.sessions import SessionInfo
from lich.tui import format as fmt
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
    assert fmt.format_usage(tokens) == text


def test_preview_flattens_and_cuts() -> None:
    assert fmt.preview("a\n  b\tc ", 80) == "a b c"
    cut = fmt.preview("x" * 100, 80)
    assert cut == "x" * 80 + "… [20 chars omitted]"


def test_tool_call_line_previews_the_args() -> None:
    call = ToolCall("c1", "shell", {"cmd": "ls"})
    assert fmt.tool_call_line(call) == '● shell({"cmd":"ls"})'
    long = ToolCall("c2", "write_file", {"path": "a.txt", "content": "y" * 200})
    line = fmt.tool_call_line(long)
    assert line.startswith('● write_file({"path":"a.txt","content":"yyy')
    assert "chars omitted]" in line
    assert fmt.tool_call_line(ToolCall("c3", "x", args_error="bad json")) == (
        "● x(<unparseable arguments>)"
    )


def test_tool_result_lines() -> None:
    assert fmt.tool_result_line(None) == "└ running…"
    assert fmt.tool_result_line(ToolResult.success("file.txt")) == "└ ok (file.txt)"
    assert fmt.tool_result_line(ToolResult.success("")) == "└ ok (no output)"
    # unlike the reference, a failure shows its error, not empty parentheses
    assert fmt.tool_result_line(ToolResult.failure("not_found: a.txt")) == (
        "└ error: not_found: a.txt"
    )
    assert fmt.tool_result_line(ToolResult.failure("timeout", "partial")) == (
        "└ error: timeout (partial)"
    )
    long = fmt.tool_result_line(ToolResult.success("z" * 500))
    assert "[380 chars omitted]" in long


def test_parse_tool_message_content() -> None:
    failed = ToolResult.failure("boom", "out").to_content()
    assert fmt.parse_tool_message_content(failed, True) == ToolResult(False, "out", "boom")
    assert fmt.parse_tool_message_content("plain text") == ToolResult(True, "plain text")
    # JSON output of a successful tool is output, not a result envelope
    data = json.dumps({"a": 1})
    assert fmt.parse_tool_message_content(data) == ToolResult(True, data)
    assert fmt.parse_tool_message_content("{not json") == ToolResult(True, "{not json")
    assert fmt.parse_tool_message_content("raw", True) == ToolResult(False, "raw", "tool failed")


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
    blocks = fmt.history_blocks(messages)
    assert blocks == [
        fmt.UserBlock("shout hi"),
        fmt.AssistantBlock("on it"),
        fmt.ToolBlock(call, ToolResult(True, "HI!")),
        fmt.AssistantBlock("done"),
        fmt.ToolBlock(ToolCall("orphan", "lost"), ToolResult(True, "x")),
    ]


def test_history_blocks_cap_keeps_the_newest() -> None:
    messages = [UserMessage(f"msg {i}") for i in range(60)]
    blocks = fmt.history_blocks(messages, cap=50)
    assert len(blocks) == 50
    assert blocks[0] == fmt.UserBlock("msg 10")
    assert blocks[-1] == fmt.UserBlock("msg 59")
    assert fmt.history_blocks(messages, cap=0) == []


def test_history_blocks_unanswered_call_has_no_result() -> None:
    call = ToolCall("c1", "slow")
    assert fmt.history_blocks([AssistantMessage("", (call,))]) == [fmt.ToolBlock(call)]


def test_notices() -> None:
    assert fmt.compress_notice(CompressEnd(1234, 5000)).text == (
        "· context compressed (summary 1,234 chars, ~5,000 tokens now)"
    )
    assert fmt.compress_notice(CompressEnd(0, 9000, ok=False)).level == "warn"
    retry = fmt.retry_notice(Retry("main", 2, "rate_limit", 1.25, "slow down"))
    assert retry.text == "· retrying main in 1.2s (attempt 2, rate_limit: slow down)"
    failover = fmt.failover_notice(Failover("main", "backup", "auth", "401"))
    assert failover.text == "· main failed (auth: 401); failing over to backup"
    assert fmt.budget_notice().text == "· budget exhausted (turn cap reached)"
    error = fmt.error_notice("e" * 400)
    assert error.level == "error"
    assert "[100 chars omitted]" in error.text


def test_run_end_notice() -> None:
    assert fmt.run_end_notice(RunEnd("final", 1, Usage())) is None
    aborted = fmt.run_end_notice(RunEnd("aborted", 1, Usage()))
    assert aborted is not None
    assert "cancelled" in aborted.text
    budget = fmt.run_end_notice(RunEnd("budget", 3, Usage()))
    assert budget == fmt.budget_notice()
    error = fmt.run_end_notice(RunEnd("error", 0, Usage(), "ProviderError: x"))
    assert error is not None
    assert error.text == "· error: ProviderError: x"


def test_usage_and_model_lines() -> None:
    assert fmt.usage_line(Usage(1000, 234, 1234)) == (
        "· tokens used this session: 1,234 (prompt 1,000 · completion 234)"
    )
    assert fmt.model_line("gpt-x", "openai_compat") == "· model: gpt-x · provider: openai_compat"
    assert fmt.model_line("", "") == "· model: ? · provider: ?"


def test_session_list_lines(tmp_path: Path) -> None:
    assert fmt.session_list_lines([]) == ["· no sessions yet"]
    infos = [
        SessionInfo(f"s{i}", tmp_path / f"s{i}.jsonl", f"title {i}", 100.0 - i, 10)
        for i in range(12)
    ]
    lines = fmt.session_list_lines(infos, current="s1")
    assert lines[0].startswith("· sessions (12, newest first")
    assert lines[1] == "  s0  title 0"
    assert lines[2] == " *s1  title 1"
    assert len(lines) == 1 + 10 + 1
    assert lines[-1] == "  … 2 older"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hello", None),
        ("  what is a/b? ", None),
        ("use /help please", None),
        ("/help", fmt.Command("help")),
        ("  /resume   latest  ", fmt.Command("resume", "latest")),
        ("/RESUME abc", fmt.Command("resume", "abc")),
        ("/quit", fmt.Command("exit")),
        ("/q", fmt.Command("exit")),
        ("/exit", fmt.Command("exit")),
        ("/", fmt.Command("")),
        ("/nope x", fmt.Command("nope", "x")),
    ],
)
def test_parse_command(text: str, expected: fmt.Command | None) -> None:
    assert fmt.parse_command(text) == expected


def test_command_known() -> None:
    assert fmt.Command("help").known
    assert not fmt.Command("nope").known
    assert set(fmt.SLASH_COMMANDS) == {
        "help", "model", "usage", "clear", "sessions", "resume", "new", "exit"
    }
    assert len(fmt.HELP_LINES) > 1
    assert all(f"/{name}" in fmt.HELP_LINES[0] for name in fmt.SLASH_COMMANDS)


def test_input_history_up_is_older_down_is_newer() -> None:
    history = fmt.InputHistory(["one", "two", "three"])
    assert history.newer() is None  # not recalling
    assert history.older("draft") == "three"
    assert history.older() == "two"
    assert history.older() == "one"
    assert history.older() is None  # nothing older
    assert history.newer() == "two"
    assert history.newer() == "three"
    assert history.newer() == "draft"  # past the newest: the text being typed
    assert not history.recalling
    assert history.newer() is None


def test_input_history_dedupes_caps_and_skips_blank() -> None:
    history = fmt.InputHistory(cap=3)
    for text in ["a", "b", "a", " ", "c", "d"]:
        history.push(text)
    assert history.entries == ("a", "c", "d")
    history.push("c")
    assert history.entries == ("a", "d", "c")
    assert fmt.InputHistory().older("x") is None


def test_input_history_push_ends_recall() -> None:
    history = fmt.InputHistory(["a", "b"])
    assert history.older() == "b"
    history.push("c")
    assert not history.recalling
    assert history.older() == "c"


def test_status_parts() -> None:
    parts = fmt.status_parts(
        model="m", provider="ollama", turns=2, tokens=1234, phase="tool", frame=1,
        active_tool="shout", compress_count=1, budget_exhausted=True, session_id="abc",
    )
    texts = [p.text for p in parts]
    assert texts == [
        "m (ollama)", "turns 2", "tokens 1,234", f"{fmt.SPINNER_FRAMES[1]} tool shout",
        "compressed 1", "budget exhausted", "session abc",
    ]
    idle = fmt.status_parts(model="m", provider="", turns=0, tokens=0, phase="idle")
    assert [p.text for p in idle] == ["m", "turns 0", "tokens 0", "idle"]
    thinking = fmt.status_parts(model="m", provider="", turns=0, tokens=0, phase="thinking")
    assert thinking[-1].text == f"{fmt.SPINNER_FRAMES[0]} thinking"
    cancelling = fmt.status_parts(
        model="m", provider="", turns=0, tokens=0, phase="thinking", cancelling=True
    )
    assert "cancelling" in cancelling[-1].text


def _line(parts: list[fmt.StatusPart]) -> str:
    return fmt.SEPARATOR.join(p.text for p in parts)


def test_fit_status_keeps_a_line_that_fits() -> None:
    parts = fmt.status_parts(model="m", provider="p", turns=1, tokens=5, phase="idle")
    assert fmt.fit_status(parts, 80) == parts


def test_fit_status_shortens_to_80_columns() -> None:
    parts = fmt.status_parts(
        model="claude-sonnet-4-very-long-model-name-20250514", provider="anthropic +1",
        turns=12, tokens=1234567, phase="tool", active_tool="write_file", compress_count=3,
        budget_exhausted=True, session_id="20250101-120000-deadbeef",
    )
    assert len(_line(parts)) > 78
    fitted = fmt.fit_status(parts, 78)
    line = _line(fitted)
    assert len(line) <= 78
    assert "deadbeef" in line  # the random part of the id survives
    assert "budget" in line
    assert "tool" in line


def test_fit_status_cuts_when_nothing_else_helps() -> None:
    parts = fmt.status_parts(model="m" * 60, provider="", turns=1, tokens=1, phase="idle")
    fitted = fmt.fit_status(parts, 10)
    assert len(_line(fitted)) <= 10
    assert fitted[0].text.endswith("…")


@pytest.mark.parametrize("width", [10, 24, 40, 78])
def test_fit_status_measures_wide_characters_in_cells(width: int) -> None:
    # Each CJK character and each of these emoji takes two terminal cells.
    parts = fmt.status_parts(
        model="通义千问-大模型-超长的名字-🚀🚀", provider="本地", turns=3, tokens=42,
        phase="tool", active_tool="写文件_📝", session_id="20250101-120000-会话标识",
    )
    assert cell_len(_line(parts)) > len(_line(parts))  # the case this is about
    fitted = fmt.fit_status(parts, width)
    assert cell_len(_line(fitted)) <= width


def test_fit_status_keeps_a_wide_line_that_fits_in_cells_whole() -> None:
    parts = fmt.status_parts(model="模型", provider="", turns=1, tokens=5, phase="idle")
    assert fmt.fit_status(parts, cell_len(_line(parts))) == parts
    assert fmt.fit_status(parts, cell_len(_line(parts)) - 1) != parts


def test_input_history_add_older_goes_behind_current_entries() -> None:
    history = fmt.InputHistory(["/resume latest"], cap=4)
    history.add_older(["first", "second", "first", "/resume latest", " "])
    assert history.entries == ("second", "first", "/resume latest")
    assert history.older() == "/resume latest"
    assert history.older() == "first"
    history.add_older(["a", "b"])
    assert history.entries == ("b", "second", "first", "/resume latest")  # capped: oldest go
