"""Tool calls and their results: the two lines of a tool block, and a stored result read back."""

from __future__ import annotations

import json

from lich.tui.format.text import format_args, preview
from lich.types import ToolCall, ToolResult

__all__ = [
    "ARGS_PREVIEW_CHARS",
    "OUTPUT_PREVIEW_CHARS",
    "parse_tool_message_content",
    "tool_call_line",
    "tool_result_line",
]

ARGS_PREVIEW_CHARS = 80
OUTPUT_PREVIEW_CHARS = 120


def tool_call_line(call: ToolCall, limit: int = ARGS_PREVIEW_CHARS) -> str:
    """``● name({"arg":…})`` with the arguments previewed."""
    if call.args_error is not None:
        return f"● {call.name}(<unparseable arguments>)"
    return f"● {call.name}({preview(format_args(call.args), limit)})"


def tool_result_line(result: ToolResult | None, limit: int = OUTPUT_PREVIEW_CHARS) -> str:
    """``└ ok (output…)``, ``└ error: code (output…)``, or ``└ running…`` without a result.

    A failed call shows its error (the reference showed only the usually
    empty output).
    """
    if result is None:
        return "└ running…"
    if result.ok:
        shown = preview(result.output, limit)
        return f"└ ok ({shown})" if shown else "└ ok (no output)"
    error = preview(result.error or "tool failed", limit)
    shown = preview(result.output, limit)
    return f"└ error: {error}" + (f" ({shown})" if shown else "")


def parse_tool_message_content(content: str, is_error: bool = False) -> ToolResult:
    """The :class:`ToolResult` behind a tool message's content.

    Failed results are stored as JSON ``{ok, output, error}``; anything else
    is the raw output.
    """
    if content.startswith("{"):
        try:
            data = json.loads(content)
        except ValueError:
            data = None
        if isinstance(data, dict) and "ok" in data and "output" in data:
            error = data.get("error")
            return ToolResult(
                ok=bool(data["ok"]) and not is_error,
                output=str(data.get("output") or ""),
                error=str(error) if error is not None else None,
            )
    if is_error:
        return ToolResult(ok=False, output=content, error="tool failed")
    return ToolResult(ok=True, output=content)
