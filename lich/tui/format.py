"""Pure formatting for the TUI: blocks, previews, notices, the status line,
slash commands and the input history. No Textual import: all of it is
unit-tested on its own, and the app only arranges what these return.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, TypeAlias

from attrs import frozen
from rich.cells import cell_len
from rich.text import Text

from lich.events import CompressEnd, Failover, Retry, RunEnd
from lich.sessions import SessionInfo
from lich.types import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolResult,
    Usage,
    UserMessage,
)

__all__ = [
    "ARGS_PREVIEW_CHARS",
    "ERROR_PREVIEW_CHARS",
    "HELP_LINES",
    "HISTORY_BLOCK_CAP",
    "INPUT_HISTORY_CAP",
    "OUTPUT_PREVIEW_CHARS",
    "QUIT_ALIASES",
    "SLASH_COMMANDS",
    "SPINNER_FRAMES",
    "AssistantBlock",
    "Block",
    "Command",
    "InputHistory",
    "NoticeBlock",
    "NoticeLevel",
    "StatusPart",
    "ToolBlock",
    "UserBlock",
    "budget_notice",
    "compress_notice",
    "error_notice",
    "failover_notice",
    "fit_status",
    "format_args",
    "format_usage",
    "history_blocks",
    "model_line",
    "parse_command",
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

ARGS_PREVIEW_CHARS = 80
OUTPUT_PREVIEW_CHARS = 120
ERROR_PREVIEW_CHARS = 300
HISTORY_BLOCK_CAP = 50
INPUT_HISTORY_CAP = 100
SPINNER_FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"

SLASH_COMMANDS: dict[str, str] = {
    "help": "show commands and keys",
    "model": "show the model and provider",
    "usage": "show the tokens used in this TUI session",
    "clear": "clear the screen (the conversation is kept)",
    "sessions": "list recent sessions",
    "resume": "resume a session: /resume ID|latest",
    "new": "start a new conversation",
    "exit": "quit (also /quit, /q)",
}
QUIT_ALIASES = frozenset({"exit", "quit", "q"})

HELP_LINES: tuple[str, ...] = (
    "commands: " + " ".join(f"/{name}" for name in SLASH_COMMANDS),
    *(f"  /{name:<9} {text}" for name, text in SLASH_COMMANDS.items()),
    "keys: Enter send · Up/Down older/newer input · Esc cancel the run · Ctrl+Q quit",
)

_WS = re.compile(r"\s+")


# ---------------------------------------------------------------------------
# Text previews
# ---------------------------------------------------------------------------


def preview(text: str, limit: int) -> str:
    """``text`` on one line (whitespace runs become one space), cut at ``limit``
    characters with a note of how many were left out."""
    flat = _WS.sub(" ", text).strip()
    if len(flat) <= limit:
        return flat
    omitted = len(flat) - limit
    return f"{flat[:limit]}… [{omitted} chars omitted]"


def format_args(args: dict[str, Any]) -> str:
    """Tool arguments as compact JSON (non-ASCII kept readable)."""
    try:
        return json.dumps(args, ensure_ascii=False, separators=(",", ":"), default=str)
    except (TypeError, ValueError):
        return str(args)


def format_usage(tokens: int) -> str:
    """``1234567`` → ``1,234,567``."""
    return f"{tokens:,}"


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


# ---------------------------------------------------------------------------
# Transcript blocks (for rendering a resumed history)
# ---------------------------------------------------------------------------


@frozen
class UserBlock:
    """Something the user said."""

    text: str


@frozen
class AssistantBlock:
    """The assistant's text, rendered as markdown."""

    text: str


@frozen
class ToolBlock:
    """One tool call and, once it finished, its result."""

    call: ToolCall
    result: ToolResult | None = None


NoticeLevel: TypeAlias = Literal["info", "warn", "error"]


@frozen
class NoticeBlock:
    """A one-line notice (compression, retry, failover, budget, errors, commands)."""

    text: str
    level: NoticeLevel = "info"


Block: TypeAlias = UserBlock | AssistantBlock | ToolBlock | NoticeBlock


def history_blocks(messages: Iterable[Message], cap: int = HISTORY_BLOCK_CAP) -> list[Block]:
    """The blocks that show ``messages``: the newest ``cap`` of them, system messages left out.

    Each tool call is paired with its result message; a result whose call is
    not in the history (cut by compression) still gets a block.
    """
    blocks: list[Block] = []
    open_calls: dict[str, int] = {}
    for message in messages:
        if isinstance(message, SystemMessage):
            continue
        if isinstance(message, UserMessage):
            blocks.append(UserBlock(message.content))
        elif isinstance(message, AssistantMessage):
            if message.content.strip():
                blocks.append(AssistantBlock(message.content))
            for call in message.tool_calls:
                open_calls[call.id] = len(blocks)
                blocks.append(ToolBlock(call))
        elif isinstance(message, ToolMessage):
            result = parse_tool_message_content(message.content, message.is_error)
            index = open_calls.pop(message.tool_call_id, None)
            if index is None:
                blocks.append(ToolBlock(ToolCall(message.tool_call_id, message.name), result))
            else:
                pending = blocks[index]
                assert isinstance(pending, ToolBlock)
                blocks[index] = ToolBlock(pending.call, result)
    if cap <= 0:
        return []
    return blocks[-cap:]


# ---------------------------------------------------------------------------
# Notices
# ---------------------------------------------------------------------------


def compress_notice(event: CompressEnd) -> NoticeBlock:
    """What a finished compression looks like."""
    if event.ok and event.summary_chars:
        return NoticeBlock(
            f"· context compressed (summary {format_usage(event.summary_chars)} chars, "
            f"~{format_usage(event.estimated_tokens)} tokens now)"
        )
    return NoticeBlock("· context compression did not help; continuing", "warn")


def retry_notice(event: Retry) -> NoticeBlock:
    """A provider is retried in place."""
    why = f": {preview(event.message, ERROR_PREVIEW_CHARS)}" if event.message else ""
    return NoticeBlock(
        f"· retrying {event.provider} in {event.delay_s:.1f}s "
        f"(attempt {event.attempt}, {event.kind}{why})",
        "warn",
    )


def failover_notice(event: Failover) -> NoticeBlock:
    """The router moved to the next provider."""
    why = f": {preview(event.message, ERROR_PREVIEW_CHARS)}" if event.message else ""
    return NoticeBlock(
        f"· {event.from_provider} failed ({event.kind}{why}); failing over to {event.to_provider}",
        "warn",
    )


def budget_notice() -> NoticeBlock:
    """The run used all its turns."""
    return NoticeBlock("· budget exhausted (turn cap reached)", "warn")


def error_notice(message: str) -> NoticeBlock:
    """An error, cut to a readable length."""
    return NoticeBlock(f"· error: {preview(message, ERROR_PREVIEW_CHARS)}", "error")


def run_end_notice(event: RunEnd) -> NoticeBlock | None:
    """The notice closing a run that did not simply answer (``None`` for ``final``)."""
    if event.stopped_reason == "aborted":
        return NoticeBlock(
            "· cancelled — the run was stopped; the conversation is kept up to this point", "warn"
        )
    if event.stopped_reason == "budget":
        return budget_notice()
    if event.stopped_reason == "error":
        return error_notice(event.error or "run failed")
    return None


def usage_line(usage: Usage) -> str:
    """``/usage``: the session's tokens."""
    return (
        f"· tokens used this session: {format_usage(usage.total_tokens)} "
        f"(prompt {format_usage(usage.prompt_tokens)} · "
        f"completion {format_usage(usage.completion_tokens)})"
    )


def model_line(model: str, provider: str) -> str:
    """``/model``: what answers."""
    return f"· model: {model or '?'} · provider: {provider or '?'}"


def session_list_lines(
    sessions: Sequence[SessionInfo], current: str | None = None, cap: int = 10
) -> list[str]:
    """``/sessions``: the newest ``cap`` sessions, newest first, the current one marked."""
    if not sessions:
        return ["· no sessions yet"]
    shown = sessions[:cap]
    lines = [f"· sessions ({len(sessions)}, newest first; /resume ID to continue one):"]
    for info in shown:
        mark = "*" if info.session_id == current else " "
        title = preview(info.title, 40) if info.title else "(no messages)"
        lines.append(f" {mark}{info.session_id}  {title}")
    if len(sessions) > cap:
        lines.append(f"  … {len(sessions) - cap} older")
    return lines


# ---------------------------------------------------------------------------
# Slash commands
# ---------------------------------------------------------------------------


@frozen
class Command:
    """A slash command: its canonical ``name`` (``exit`` for ``/quit``) and the rest."""

    name: str
    args: str = ""

    @property
    def known(self) -> bool:
        """Whether the TUI has this command."""
        return self.name in SLASH_COMMANDS


def parse_command(text: str) -> Command | None:
    """The command in ``text``, or ``None`` when it is a message for the model.

    Only input that starts with ``/`` (after trimming) is a command; a slash in
    the middle of a message is just text. ``/`` alone is the unknown command ``""``.
    """
    stripped = text.strip()
    if not stripped.startswith("/"):
        return None
    name, _, args = stripped[1:].partition(" ")
    name = name.lower()
    if name in QUIT_ALIASES:
        name = "exit"
    return Command(name, args.strip())


# ---------------------------------------------------------------------------
# Input history: Up goes to older entries, Down to newer ones
# ---------------------------------------------------------------------------


class InputHistory:
    """The sent inputs, for recall with Up (older) and Down (newer).

    Like a shell: the first Up shows the newest entry, each further Up an
    older one, and Down walks back; going past the newest entry restores the
    text that was being typed before the recall began. Entries are
    de-duplicated (a re-sent input moves to the newest place) and capped.
    """

    def __init__(self, entries: Iterable[str] = (), cap: int = INPUT_HISTORY_CAP) -> None:
        self.cap = cap
        self._entries: list[str] = []  # oldest first
        self._index: int | None = None  # position while recalling
        self._draft = ""
        for entry in entries:
            self.push(entry)

    @property
    def entries(self) -> tuple[str, ...]:
        """The entries, oldest first."""
        return tuple(self._entries)

    @property
    def recalling(self) -> bool:
        """Whether Up was pressed since the last push/reset."""
        return self._index is not None

    def push(self, text: str) -> None:
        """Remember a sent input and end any recall."""
        self.reset()
        text = text.strip()
        if not text:
            return
        if text in self._entries:
            self._entries.remove(text)
        self._entries.append(text)
        del self._entries[: max(0, len(self._entries) - self.cap)]

    def add_older(self, texts: Iterable[str]) -> None:
        """Add ``texts`` (oldest first) as older than every entry so far — the
        inputs of a resumed conversation. Entries already present stay where they are."""
        self.reset()
        older: list[str] = []
        for text in texts:
            text = text.strip()
            if text and text not in self._entries:
                if text in older:
                    older.remove(text)
                older.append(text)
        self._entries[:0] = older
        del self._entries[: max(0, len(self._entries) - self.cap)]

    def reset(self) -> None:
        """Forget the recall position (the user typed something new)."""
        self._index = None
        self._draft = ""

    def older(self, current: str = "") -> str | None:
        """Up: the next older entry, or ``None`` when there is none.

        ``current`` is the text in the input; it is kept as the draft the
        first time so Down can bring it back.
        """
        if not self._entries:
            return None
        if self._index is None:
            self._draft = current
            self._index = len(self._entries) - 1
            return self._entries[self._index]
        if self._index == 0:
            return None
        self._index -= 1
        return self._entries[self._index]

    def newer(self) -> str | None:
        """Down: the next newer entry; past the newest, the saved draft;
        ``None`` when not recalling."""
        if self._index is None:
            return None
        if self._index >= len(self._entries) - 1:
            draft = self._draft
            self.reset()
            return draft
        self._index += 1
        return self._entries[self._index]


# ---------------------------------------------------------------------------
# Status line
# ---------------------------------------------------------------------------


@frozen
class StatusPart:
    """One segment of the status line and its Rich style."""

    key: str
    text: str
    style: str = ""


def status_parts(
    *,
    model: str,
    provider: str,
    turns: int,
    tokens: int,
    phase: str,
    frame: int = 0,
    active_tool: str | None = None,
    cancelling: bool = False,
    compress_count: int = 0,
    budget_exhausted: bool = False,
    session_id: str | None = None,
) -> list[StatusPart]:
    """The status line's segments, in order: model, turns, tokens, phase, compressions,
    budget, session. ``frame`` picks the spinner frame for a busy phase."""
    spinner = SPINNER_FRAMES[frame % len(SPINNER_FRAMES)]
    label = model or "?"
    if provider:
        label += f" ({provider})"
    parts = [
        StatusPart("model", label, "bold"),
        StatusPart("turns", f"turns {turns}"),
        StatusPart("tokens", f"tokens {format_usage(tokens)}"),
    ]
    if cancelling:
        parts.append(StatusPart("phase", f"{spinner} cancelling", "bold yellow"))
    elif phase == "tool":
        tool = f" {active_tool}" if active_tool else ""
        parts.append(StatusPart("phase", f"{spinner} tool{tool}", "bold cyan"))
    elif phase == "thinking":
        parts.append(StatusPart("phase", f"{spinner} thinking", "bold green"))
    else:
        parts.append(StatusPart("phase", "idle", "dim"))
    if compress_count:
        parts.append(StatusPart("compressed", f"compressed {compress_count}"))
    if budget_exhausted:
        parts.append(StatusPart("budget", "budget exhausted", "bold red"))
    if session_id:
        parts.append(StatusPart("session", f"session {session_id}", "dim"))
    return parts


SEPARATOR = " · "


# Widths are terminal cells, not characters: a CJK character or an emoji takes two.
def _width(parts: Sequence[StatusPart]) -> int:
    return sum(cell_len(p.text) for p in parts) + cell_len(SEPARATOR) * max(0, len(parts) - 1)


def _clip(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` cells (at least the "…"), "…" marking a cut."""
    clipped = Text(text)
    clipped.truncate(limit, overflow="ellipsis")
    return clipped.plain


def fit_status(parts: Sequence[StatusPart], width: int) -> list[StatusPart]:
    """``parts`` shortened until they fit ``width`` columns.

    Shortening order: the session id keeps its last 8 characters (the random
    part), labels get terse, the model name is clipped, the running tool's
    name goes, and finally the line is cut.
    """
    out = list(parts)

    def replace(key: str, text: str) -> None:
        for i, p in enumerate(out):
            if p.key == key:
                out[i] = StatusPart(p.key, text, p.style)

    def text_of(key: str) -> str | None:
        return next((p.text for p in out if p.key == key), None)

    steps: list[tuple[str, Callable[[str], str]]] = [
        ("session", lambda t: "session …" + t.removeprefix("session ")[-8:]),
        ("session", lambda t: "…" + t.removeprefix("session …")),
        ("turns", lambda t: "t" + t.removeprefix("turns ")),
        ("tokens", lambda t: "tok " + t.removeprefix("tokens ")),
        ("compressed", lambda t: "cmp " + t.removeprefix("compressed ")),
        ("model", lambda t: _clip(t, 24)),
        ("phase", lambda t: " ".join(t.split(" ")[:2])),  # drop the tool name
        ("model", lambda t: _clip(t, 12)),
        ("budget", lambda t: "budget!"),
        ("model", lambda t: _clip(t, 8)),
    ]
    for key, shorten in steps:
        if _width(out) <= width:
            return out
        current = text_of(key)
        if current is not None:
            replace(key, shorten(current))
    if _width(out) <= width:
        return out
    # Still too wide: keep whole parts from the left, clip the one that crosses the edge.
    kept: list[StatusPart] = []
    used = 0
    for p in out:
        sep = cell_len(SEPARATOR) if kept else 0
        room = width - used - sep
        if room <= 0:
            break
        if cell_len(p.text) > room:
            kept.append(StatusPart(p.key, _clip(p.text, room), p.style))
            break
        kept.append(p)
        used += sep + cell_len(p.text)
    return kept
