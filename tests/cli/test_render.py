"""The human renderer: stdout text, stderr progress, stream resets, previews."""

from __future__ import annotations

import io
import json
import os
from typing import Any

import pytest
from rich.console import Console

from lich import events as ev
from lich.cli._render import HumanRenderer, JsonRenderer, args_preview, error_preview
from lich.types import AssistantMessage, ChatResult, ToolCall, ToolResult, Usage


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def envelope(event: ev.Event, seq: int = 1) -> ev.Envelope:
    return ev.Envelope("r", "s", seq, 0.0, event)


def feed(renderer: Any, *events: ev.Event) -> None:
    for i, event in enumerate(events, start=1):
        renderer(envelope(event, i))


def llm_end(text: str, calls: tuple[ToolCall, ...] = ()) -> ev.LlmEnd:
    message = AssistantMessage(text, calls)
    return ev.LlmEnd(1, ChatResult(message, Usage(), "stop", "m", "p"))


def plain() -> tuple[HumanRenderer, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    renderer = HumanRenderer(Console(file=err, force_terminal=False, width=200), out)
    return renderer, out, err


def test_a_call_that_waited_for_approval_shows_its_run_time_and_the_wait_apart() -> None:
    renderer, _, err = plain()
    call = ToolCall("c1", "write_file", {"path": "a.txt", "content": "x"})

    feed(renderer, ev.ToolCallStart(1, call),
         ev.ToolCallEnd(1, call, ToolResult.success("wrote a.txt"), 10.2,
                        approval_wait_ms=11_035.0),
         ev.ToolCallStart(1, call),
         ev.ToolCallEnd(1, call, ToolResult.success("wrote a.txt"), 9.0,
                        approval_wait_ms=125_000.0))

    lines = err.getvalue().splitlines()
    assert lines[0].endswith(": ok (10 ms, after 11.0 s waiting for approval)"), lines
    assert lines[1].endswith(": ok (9 ms, after 2 min 5 s waiting for approval)"), lines


def test_streamed_text_goes_to_stdout_and_progress_to_stderr() -> None:
    renderer, out, err = plain()
    call = ToolCall("c1", "read_file", {"path": "a.txt"})

    feed(renderer, ev.TurnStart(1), ev.LlmStart(1), ev.TextDelta("Let me "),
         ev.TextDelta("look."), llm_end("Let me look.", (call,)), ev.ToolCallStart(1, call),
         ev.ToolCallEnd(1, call, ToolResult.failure("not_found: a.txt"), 3.0),
         ev.TurnStart(2), ev.LlmStart(2), llm_end("It is missing."))

    assert out.getvalue() == "Let me look.\nIt is missing.\n"
    lines = err.getvalue().splitlines()
    assert lines == [
        "[lich] turn 1",
        '[lich] tool read_file(path="a.txt"): error: not_found: a.txt (3 ms)',
        "[lich] turn 2",
    ]


def test_a_stream_reset_restarts_the_answer_on_a_new_line() -> None:
    renderer, out, err = plain()

    feed(renderer, ev.LlmStart(1), ev.TextDelta("Half an ans"),
         ev.StreamReset("primary", "network: connection reset"),
         ev.Failover("primary", "backup", "network", "connection reset"),
         ev.TextDelta("A whole answer."), llm_end("A whole answer."))

    assert out.getvalue() == "Half an ans\nA whole answer.\n"
    assert "stream from primary reset (network: connection reset); the answer restarts" \
        in err.getvalue()
    assert "failover primary → backup (network: connection reset)" in err.getvalue()


def test_a_stream_reset_on_a_terminal_erases_the_partial_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("shutil.get_terminal_size", lambda *a, **k: os.terminal_size((20, 24)))
    out, err = FakeTerminal(), io.StringIO()
    renderer = HumanRenderer(Console(file=err, force_terminal=False), out)

    # 25 characters on a 20-column terminal: two rows to take back.
    feed(renderer, ev.LlmStart(1), ev.TextDelta("x" * 25), ev.StreamReset("p", "reset"),
         ev.TextDelta("fresh"), llm_end("fresh"))

    assert out.getvalue() == "x" * 25 + "\x1b[1F\x1b[J" + "fresh\n"
    assert "partial answer was discarded" in err.getvalue()


def test_whole_replies_are_printed_when_nothing_streamed() -> None:
    renderer, out, _ = plain()

    feed(renderer, ev.LlmStart(1), llm_end("not streamed"), ev.LlmStart(2), llm_end(""))

    assert out.getvalue() == "not streamed\n"


def test_a_budget_plugin_stop_says_which_budget() -> None:
    renderer, _, err = plain()
    feed(renderer, ev.BudgetExhausted(1, "max_turns", "max_turns: all 1 turn used"),
         ev.BudgetExhausted(2, "max_total_tokens", "max_total_tokens: 1,204 tokens used of 1,000",
                            "budgets"))
    lines = err.getvalue().splitlines()
    assert lines == ["[lich] budget exhausted after 1 turn",
                     "[lich] budget exhausted after 2 turns: max_total_tokens: 1,204 tokens "
                     "used of 1,000"]


def test_run_end_notices() -> None:
    renderer, out, err = plain()

    feed(renderer, ev.BudgetExhausted(3), ev.RunEnd("budget", 3, Usage()),
         ev.RunEnd("aborted", 1, Usage()), ev.Retry("p", 2, "rate_limit", 1.25, "slow"),
         ev.CompressStart(900), ev.CompressEnd(120, 300, True), ev.CompressStart(900),
         ev.CompressEnd(0, 900, False))

    text = err.getvalue()
    assert "budget exhausted after 3 turns\n" in text
    assert "run aborted" in text
    assert "retrying p in 1.2s (attempt 2, rate_limit: slow)" in text
    assert "context compressed: summary of 120 chars, ~300 tokens now" in text
    assert "compression did not help" in text
    assert out.getvalue() == ""


def test_blocked_and_rewritten_calls_say_by_whom() -> None:
    renderer, _, err = plain()
    call = ToolCall("c1", "terminal", {"command": "rm -rf /"})

    feed(renderer, ev.ToolCallEnd(1, call, ToolResult.failure("blocked_by_plugin: no"), 0.0,
                                  ("normaliser",), "guard"))

    assert ("blocked by guard: blocked_by_plugin: no [args rewritten by normaliser]"
            in err.getvalue())


def test_terminal_progress_uses_a_spinner_without_breaking_output() -> None:
    out, err = io.StringIO(), io.StringIO()
    console = Console(file=err, force_terminal=True, width=80)
    renderer = HumanRenderer(console, out)
    call = ToolCall("c1", "list_dir", {"path": "."})

    feed(renderer, ev.TurnStart(1), ev.LlmStart(1), ev.TextDelta("Looking"),
         llm_end("Looking", (call,)), ev.ToolCallStart(1, call),
         ev.ToolCallEnd(1, call, ToolResult.success("- a"), 1.0), ev.LlmStart(2),
         llm_end("Done."), ev.RunEnd("final", 2, Usage()))
    renderer.close()

    assert out.getvalue() == "Looking\nDone.\n"
    assert "✓" in err.getvalue()
    assert 'list_dir(path=".")' in err.getvalue()
    assert renderer._status is None  # the spinner is stopped


def test_args_and_error_previews() -> None:
    args = {"path": "a.txt", "content": "line one\nline two " + "x" * 100, "n": 3}

    preview = args_preview(args)

    assert preview.startswith('path="a.txt", content="line one\\nline two ')
    assert len(preview) <= 100
    assert "\n" not in preview
    assert args_preview({"n": 3, "flag": True, "items": [1, 2]}) == \
        "n=3, flag=true, items=[1, 2]"
    assert error_preview(ToolResult.failure("timeout: took too long\nstack...")) == \
        "timeout: took too long…"


def test_json_renderer_writes_one_ascii_line_per_event() -> None:
    out = io.StringIO()
    JsonRenderer(out)(envelope(ev.TextDelta("naïve ✓")))

    line = out.getvalue()
    assert line.endswith("\n")
    assert line.count("\n") == 1
    assert line.isascii()
    assert json.loads(line)["text"] == "naïve ✓"


def test_the_stderr_console_is_rich_s_own_once_anything_more_is_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lich.cli._render import make_err_console

    err = io.StringIO()  # no terminal
    monkeypatch.setattr("sys.stderr", err)
    console: Any = make_err_console()
    assert (console.is_terminal, console.quiet, console.file) == (False, False, err)
    renderer = HumanRenderer(console, io.StringIO())
    renderer.note("tool echo(text=\"x\")")
    assert err.getvalue() == '[lich] tool echo(text="x")\n'
    assert console.__dict__["_console"] is None  # rich was not needed for that
    console.quiet = True  # a setting goes to a real console, which then answers
    assert console.__dict__["_console"] is not None
    assert console.quiet is True
    assert console.width == Console(stderr=True).width
    renderer.note("not shown")
    assert err.getvalue() == '[lich] tool echo(text="x")\n'


@pytest.mark.parametrize(("env", "terminal"), [({"FORCE_COLOR": "1"}, True),
                                               ({"TTY_COMPATIBLE": "1"}, True),
                                               ({"TTY_COMPATIBLE": "0"}, False)])
def test_the_stderr_console_asks_rich_when_the_environment_decides(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], terminal: bool,
) -> None:
    from lich.cli._render import make_err_console

    monkeypatch.setattr("sys.stderr", io.StringIO())
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    console: Any = make_err_console()
    assert console.is_terminal is terminal
    assert console.is_terminal is Console(stderr=True).is_terminal


def test_the_stderr_console_answers_quiet_and_file_as_rich_does_without_rich(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Asked for every progress line: answered without making rich's console, on a
    terminal too, and the same as rich's answer."""
    from lich.cli._render import make_err_console

    for stderr in (FakeTerminal(), io.StringIO()):
        monkeypatch.setattr("sys.stderr", stderr)
        lazy: Any = make_err_console()
        real = Console(stderr=True, highlight=False)
        assert (lazy.quiet, lazy.file) == (real.quiet, real.file) == (False, stderr)
        assert lazy.__dict__["_console"] is None

    class Proxy(io.StringIO):  # what rich puts on sys.stderr while a live display runs
        rich_proxied_file = io.StringIO()

    monkeypatch.setattr("sys.stderr", Proxy())
    lazy = make_err_console()
    assert lazy.file is Console(stderr=True).file is Proxy.rich_proxied_file
    monkeypatch.setattr("sys.stderr", None)  # no stderr at all: rich's null file
    lazy = make_err_console()
    assert type(lazy.file) is type(Console(stderr=True).file)
    assert lazy.__dict__["_console"] is not None


def test_a_stream_reset_erases_the_pieces_shown_so_far() -> None:
    """The answer's pieces are kept as they came; a reset takes back all of them."""
    out = FakeTerminal()
    renderer = HumanRenderer(Console(file=io.StringIO(), force_terminal=False), out)
    feed(renderer, ev.LlmStart(1), ev.TextDelta("par"), ev.TextDelta(""), ev.TextDelta("tial"),
         ev.StreamReset("p", "network: reset"), ev.TextDelta("whole"), llm_end("whole"))
    assert out.getvalue() == "partial\r\x1b[Jwhole\n"


def test_a_reply_whose_stream_brought_no_text_is_shown_whole() -> None:
    renderer, out, _ = plain()
    feed(renderer, ev.LlmStart(1), ev.TextDelta(""), llm_end("whole"))
    assert out.getvalue() == "whole\n"
