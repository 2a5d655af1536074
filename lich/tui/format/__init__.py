"""Pure formatting for the TUI, one module per thing formatted. No Textual import:
all of it is unit-tested on its own, and the widgets only arrange what it returns.

- :mod:`~lich.tui.format.text`: one-line previews, compact JSON, grouped numbers
- :mod:`~lich.tui.format.tools`: the lines of a tool block; stored results read back
- :mod:`~lich.tui.format.blocks`: transcript blocks, and those of a resumed history
- :mod:`~lich.tui.format.notices`: the notices of a run's events (approvals included)
- :mod:`~lich.tui.format.commands`: what ``/usage``, ``/model`` and ``/sessions`` print
- :mod:`~lich.tui.format.status`: the status line and how it fits the width

The names of every module are importable from here too. The slash commands
themselves are in :mod:`lich.slash` (shared with ``lich chat``), and the
input history in :mod:`lich.tui.input_history`.
"""

from __future__ import annotations

from lich.tui.format.blocks import (
    HISTORY_BLOCK_CAP,
    AssistantBlock,
    Block,
    NoticeBlock,
    NoticeLevel,
    ToolBlock,
    UserBlock,
    history_blocks,
)
from lich.tui.format.commands import model_line, session_list_lines, usage_line
from lich.tui.format.notices import (
    ERROR_PREVIEW_CHARS,
    approval_requested_notice,
    approval_resolved_notice,
    budget_notice,
    compress_notice,
    error_notice,
    failover_notice,
    hook_notice,
    retry_notice,
    run_end_notice,
)
from lich.tui.format.status import (
    RUN_LABEL,
    SEPARATOR,
    SPINNER_FRAMES,
    TUI_LABEL,
    StatusPart,
    fit_status,
    status_parts,
)
from lich.tui.format.text import format_args, format_usage, preview
from lich.tui.format.tools import (
    ARGS_PREVIEW_CHARS,
    OUTPUT_PREVIEW_CHARS,
    parse_tool_message_content,
    tool_call_line,
    tool_result_line,
)

__all__ = [
    "ARGS_PREVIEW_CHARS",
    "ERROR_PREVIEW_CHARS",
    "HISTORY_BLOCK_CAP",
    "OUTPUT_PREVIEW_CHARS",
    "RUN_LABEL",
    "SEPARATOR",
    "SPINNER_FRAMES",
    "TUI_LABEL",
    "AssistantBlock",
    "Block",
    "NoticeBlock",
    "NoticeLevel",
    "StatusPart",
    "ToolBlock",
    "UserBlock",
    "approval_requested_notice",
    "approval_resolved_notice",
    "budget_notice",
    "compress_notice",
    "error_notice",
    "failover_notice",
    "fit_status",
    "format_args",
    "format_usage",
    "history_blocks",
    "hook_notice",
    "model_line",
    "parse_tool_message_content",
    "preview",
    "retry_notice",
    "run_end_notice",
    "session_list_lines",
    "status_parts",
    "tool_call_line",
    "tool_result_line",
    "usage_line",
]
