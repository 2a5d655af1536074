"""The Textual application behind ``lich tui``.

One :class:`LichApp` drives one :class:`~lich.agent.Agent`. Each message runs
``agent.run`` in a Textual worker on the app's own event loop; the run's
events come back as Textual messages, in order, and are turned into
transcript widgets (streamed markdown, tool blocks, notices) and state
transitions (:mod:`lich.tui.state`). Esc cancels the run through its
:class:`~lich.cancel.CancelToken`, so the run ends ``aborted`` with a valid
transcript. Formatting lives in :mod:`lich.tui.format`.

Importing this module imports Textual; :func:`lich.tui.run_tui` does so lazily.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import ClassVar

import attrs
from rich.text import Text
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message as TextualMessage
from textual.widget import Widget
from textual.widgets import Input, Markdown, Static
from textual.widgets.markdown import MarkdownStream

from lich import __version__
from lich._slash import SLASH_COMMANDS, SlashInput
from lich.agent import Agent, RunResult
from lich.cancel import CancelToken
from lich.config import ConfigError, config_with
from lich.events import (
    CompressEnd,
    Envelope,
    ErrorEvent,
    Failover,
    LlmEnd,
    LlmStart,
    Retry,
    RunEnd,
    StreamReset,
    TextDelta,
    ToolCallEnd,
    ToolCallStart,
)
from lich.plugins import PluginLoadError
from lich.sessions import SessionNotFound, repair_dangling_tool_calls
from lich.tui import format as fmt
from lich.tui import state as st
from lich.tui.input_history import InputHistory
from lich.types import Message, ToolCall, ToolResult, UserMessage

__all__ = ["AgentEventMessage", "LichApp", "LogNotice", "RunFinished", "ToolView"]

log = logging.getLogger("lich.tui")

TRANSCRIPT_CAP = 300
"""Widgets kept in the transcript; older ones are dropped (the session file keeps all)."""

SPINNER_INTERVAL_S = 0.08

KEYS_HELP = (
    "keys: Enter send · Up/Down older/newer input · Esc cancel the run · "
    "Ctrl+O expand the newest tool output · Ctrl+Q quit"
)
"""The last line of ``/help``: the keys (the commands come from the shared table)."""


class AgentEventMessage(TextualMessage):
    """An agent event, delivered to the app in emission order."""

    def __init__(self, serial: int, envelope: Envelope) -> None:
        super().__init__()
        self.serial = serial
        self.envelope = envelope


class RunFinished(TextualMessage):
    """``agent.run`` returned (``result``) or raised (``error``); posted after its events."""

    def __init__(
        self, serial: int, result: RunResult | None, error: BaseException | None
    ) -> None:
        super().__init__()
        self.serial = serial
        self.result = result
        self.error = error


class LogNotice(TextualMessage):
    """A warning logged by lich while the TUI owns the terminal."""

    def __init__(self, text: str, level: fmt.NoticeLevel) -> None:
        super().__init__()
        self.text = text
        self.level = level


class _NoticeHandler(logging.Handler):
    """Routes ``lich`` warnings into the transcript: a write to the terminal's stderr
    would tear the screen. ``post_message`` is thread-safe (tools log from threads)."""

    def __init__(self, app: LichApp) -> None:
        super().__init__(logging.WARNING)
        self.app = app

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = fmt.preview(record.getMessage(), fmt.ERROR_PREVIEW_CHARS)
            level: fmt.NoticeLevel = "error" if record.levelno >= logging.ERROR else "warn"
            self.app.post_message(LogNotice(f"· {record.levelname.lower()}: {text}", level))
        except Exception:
            self.handleError(record)


@attrs.define
class _Run:
    """The run in flight."""

    serial: int
    text: str
    session_id: str
    cancel: CancelToken = attrs.field(factory=CancelToken)
    error_shown: bool = False


def _plain(text: str, style: str = "") -> Text:
    return Text(text, style=style, no_wrap=False)


class ToolResultLine(Static, can_focus=True):
    """A tool's outcome line; Enter, Space or a click shows or hides the full output."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter,space", "toggle_output", "Show/hide output", show=False),
    ]

    def action_toggle_output(self) -> None:
        """Toggle the owning :class:`ToolView`."""
        view = self.parent
        if isinstance(view, ToolView):
            view.toggle()

    def on_click(self) -> None:
        """A click toggles too."""
        self.action_toggle_output()


class ToolView(Widget):
    """One tool call: ``● name(args)``, then ``└ ok|error (preview)``, and the full
    output (hidden until expanded)."""

    DEFAULT_CSS = """
    ToolView { height: auto; padding: 0 0 0 2; }
    ToolView > .call { color: $accent; }
    ToolView > ToolResultLine { padding: 0 0 0 2; color: $text-muted; }
    ToolView > ToolResultLine.ok { color: $success; }
    ToolView > ToolResultLine.error { color: $error; }
    ToolView > ToolResultLine:focus { text-style: reverse; }
    ToolView > .output { display: none; padding: 0 0 0 4; color: $text-muted; }
    ToolView.expanded > .output { display: block; }
    """

    def __init__(self, call: ToolCall, result: ToolResult | None = None) -> None:
        super().__init__()
        self.call = call
        self.result = result
        self._call_line = Static(_plain(fmt.tool_call_line(call)), classes="call", markup=False)
        self._result_line = ToolResultLine("", markup=False)
        self._output = Static("", classes="output", markup=False)

    def compose(self) -> ComposeResult:
        yield self._call_line
        yield self._result_line
        yield self._output

    def on_mount(self) -> None:
        """Show the result given at construction (resumed history)."""
        self._show()

    @property
    def expanded(self) -> bool:
        """Whether the full output is shown."""
        return self.has_class("expanded")

    def toggle(self) -> None:
        """Show or hide the full output."""
        self.set_class(not self.expanded, "expanded")
        self._show()

    def finish(self, call: ToolCall, result: ToolResult) -> None:
        """The call ended: show its outcome (``call`` carries the final arguments)."""
        self.call = call
        self.result = result
        self._call_line.update(_plain(fmt.tool_call_line(call)))
        self._show()

    @property
    def summary(self) -> str:
        """The two visible lines, as text."""
        return f"{fmt.tool_call_line(self.call)}\n{fmt.tool_result_line(self.result)}"

    def _show(self) -> None:
        result = self.result
        line = fmt.tool_result_line(result)
        if result is not None:
            if self._has_more(result):
                line += " [-]" if self.expanded else " [+]"
            self._result_line.set_class(result.ok, "ok")
            self._result_line.set_class(not result.ok, "error")
            full = result.output or "(no output)"
            if result.error:
                full = f"error: {result.error}\n{full}"
            self._output.update(_plain(full))
        self._result_line.update(_plain(line))

    @staticmethod
    def _has_more(result: ToolResult) -> bool:
        text = result.output.strip()
        return "\n" in text or len(text) > fmt.OUTPUT_PREVIEW_CHARS


class PromptInput(Input):
    """The message input: Up recalls older entries, Down newer ones."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "history_older", "Older input", show=False),
        Binding("down", "history_newer", "Newer input", show=False),
    ]

    def __init__(self, history: InputHistory, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.history = history

    def _recall(self, text: str | None) -> None:
        if text is None:
            return
        self.value = text
        self.cursor_position = len(text)

    def action_history_older(self) -> None:
        """Up: an older input."""
        self._recall(self.history.older(self.value))

    def action_history_newer(self) -> None:
        """Down: a newer input (past the newest, the text typed before recalling)."""
        self._recall(self.history.newer())


class LichApp(App[int]):
    """The lich TUI.

    :param agent: the agent to drive (tests inject one built on a scripted chat).
    :param resume: a session id or ``latest`` to continue at start.
    :param owns_agent: close the agent's providers when the app ends.
    :param model: override the model shown (default: from the agent and config).
    :param provider: override the provider shown.
    :param capture_logs: while running, show ``lich`` log warnings as notices
        instead of letting them reach the terminal (``run_tui`` sets this).
    """

    TITLE = "lich"
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    Screen { layout: vertical; }
    #header { height: 1; padding: 0 1; background: $panel; color: $text-muted; }
    #transcript { height: 1fr; padding: 0 1; scrollbar-size-vertical: 1; }
    #transcript > .user { margin: 1 0 0 0; text-style: bold; }
    #transcript > Markdown.assistant { margin: 0; padding: 0 0 0 2; }
    #transcript > Markdown.assistant > MarkdownParagraph:last-child { margin: 0; }
    #transcript > .notice { color: $text-muted; padding: 0 0 0 2; }
    #transcript > .notice.warn { color: $warning; }
    #transcript > .notice.error { color: $error; }
    #status { height: 1; padding: 0 1; background: $panel; }
    #prompt { height: 3; border: round $accent; }
    #prompt.busy { border: round $warning; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel_run", "Cancel run", priority=True),
        Binding("ctrl+o", "toggle_last_tool", "Expand last tool output"),
    ]

    def __init__(
        self,
        agent: Agent,
        *,
        resume: str | None = None,
        owns_agent: bool = False,
        model: str | None = None,
        provider: str | None = None,
        capture_logs: bool = False,
    ) -> None:
        super().__init__()
        self.capture_logs = capture_logs
        self._log_handler: _NoticeHandler | None = None
        self._log_propagate = True
        self._log_saved: list[logging.Handler] = []
        self.agent = agent
        self.owns_agent = owns_agent
        self._resume_ref = resume
        default_model, default_provider = _model_and_provider(agent)
        self.model_name = model if model is not None else default_model
        self.provider_name = provider if provider is not None else default_provider
        self.ui = st.UiState(session_id=agent.sessions.new_id())
        self.history: list[Message] = []
        self.input_history = InputHistory()
        self.runs_started = 0
        self._run: _Run | None = None
        self._frame = 0
        self._markdown: Markdown | None = None
        self._stream: MarkdownStream | None = None
        self._streamed = ""
        self._tool_views: dict[str, ToolView] = {}

    # ----------------------------------------------------------------- layout

    def compose(self) -> ComposeResult:
        yield Static(
            _plain(f"lich {__version__} — Enter send · Esc cancel · /help · Ctrl+Q quit"),
            id="header",
            markup=False,
        )
        yield VerticalScroll(id="transcript")
        yield Static("", id="status", markup=False)
        yield PromptInput(
            self.input_history,
            placeholder="Message lich (/help for commands)",
            id="prompt",
        )

    async def on_mount(self) -> None:
        """Focus the input, start the spinner and resume a session if asked."""
        self.transcript.anchor()
        self.prompt.border_title = "› ready"
        self.prompt.focus()
        self.set_interval(SPINNER_INTERVAL_S, self._tick)
        self._refresh_status()
        if self.capture_logs:
            self._start_log_capture()
        for report in self.agent.host.failures:
            verb = "was skipped" if report.status == "skipped" else "failed to load"
            await self.notice(
                f"· plugin {report.entry!r} {verb} ({report.describe_error()}); "
                "continuing without it",
                "warn",
            )
        if self._resume_ref is not None:
            await self.resume_session(self._resume_ref)

    async def on_unmount(self) -> None:
        """Cancel a run still in flight; close the agent when the app owns it."""
        if self._run is not None:
            self._run.cancel.cancel()
        self._stop_log_capture()
        if self.owns_agent:
            await self.agent.aclose()

    def _start_log_capture(self) -> None:
        # The handlers already there (the CLI's stderr handler) are set aside until exit.
        logger = logging.getLogger("lich")
        self._log_handler = _NoticeHandler(self)
        self._log_propagate = logger.propagate
        self._log_saved = list(logger.handlers)
        for handler in self._log_saved:
            logger.removeHandler(handler)
        logger.addHandler(self._log_handler)
        logger.propagate = False

    def _stop_log_capture(self) -> None:
        if self._log_handler is None:
            return
        logger = logging.getLogger("lich")
        logger.removeHandler(self._log_handler)
        for handler in self._log_saved:
            logger.addHandler(handler)
        logger.propagate = self._log_propagate
        self._log_handler = None
        self._log_saved = []

    @on(LogNotice)
    async def _on_log_notice(self, message: LogNotice) -> None:
        await self.notice(message.text, message.level)

    @property
    def transcript(self) -> VerticalScroll:
        """The scrolling transcript."""
        return self.query_one("#transcript", VerticalScroll)

    @property
    def prompt(self) -> PromptInput:
        """The message input."""
        return self.query_one("#prompt", PromptInput)

    @property
    def busy(self) -> bool:
        """Whether a run is in flight."""
        return self._run is not None

    @property
    def session_id(self) -> str:
        """The conversation new messages go to."""
        return self.ui.session_id or ""

    def transcript_text(self) -> str:
        """The transcript as plain text (tests, debugging)."""
        lines: list[str] = []
        for child in self.transcript.children:
            if isinstance(child, Markdown):
                lines.append(child.source)
            elif isinstance(child, ToolView):
                lines.append(child.summary)
            elif isinstance(child, Static):
                lines.append(str(child.render()))
        return "\n".join(lines)

    # ---------------------------------------------------------------- blocks

    async def _mount(self, widget: Widget) -> None:
        transcript = self.transcript
        await transcript.mount(widget)
        extra = len(transcript.children) - TRANSCRIPT_CAP
        if extra > 0:
            await transcript.remove_children(list(transcript.children[:extra]))

    async def add_block(self, block: fmt.Block) -> None:
        """Append one block to the transcript."""
        if isinstance(block, fmt.UserBlock):
            text = Text("you › ", style="bold")
            text.append(block.text)
            await self._mount(Static(text, classes="user", markup=False))
        elif isinstance(block, fmt.AssistantBlock):
            await self._mount(Markdown(block.text, classes="assistant"))
        elif isinstance(block, fmt.ToolBlock):
            await self._mount(ToolView(block.call, block.result))
        else:
            await self._mount(
                Static(_plain(block.text), classes=f"notice {block.level}", markup=False)
            )

    async def notice(self, text: str, level: fmt.NoticeLevel = "info") -> None:
        """Append a notice line."""
        await self.add_block(fmt.NoticeBlock(text, level))

    async def clear_transcript(self) -> None:
        """Remove every block (the conversation itself is kept)."""
        await self._end_stream(None)
        self._tool_views.clear()
        await self.transcript.remove_children()

    # ------------------------------------------------------------ status bar

    def _set_state(self, new: st.UiState) -> None:
        self.ui = new
        self._refresh_status()

    def _refresh_status(self) -> None:
        ui = self.ui
        parts = fmt.status_parts(
            model=self.model_name,
            provider=self.provider_name,
            turns=ui.turns_used,
            tokens=ui.total_usage.total_tokens,
            phase=ui.phase,
            frame=self._frame,
            active_tool=ui.active_tool.name if ui.active_tool else None,
            cancelling=ui.cancelling,
            compress_count=ui.compress_count,
            budget_exhausted=ui.budget_exhausted,
            session_id=ui.session_id,
        )
        try:
            status = self.query_one("#status", Static)
        except Exception:  # not composed yet / shutting down
            return
        width = max(10, (status.size.width or self.size.width) - 2)
        text = Text(no_wrap=True, overflow="ellipsis")
        for i, part in enumerate(fmt.fit_status(parts, width)):
            if i:
                text.append(fmt.SEPARATOR, style="dim")
            text.append(part.text, style=part.style)
        status.update(text)

    def _tick(self) -> None:
        if self.ui.busy:
            self._frame += 1
            self._refresh_status()

    def _set_busy(self, busy: bool) -> None:
        prompt = self.prompt
        prompt.set_class(busy, "busy")
        prompt.border_title = "… busy — Esc cancels" if busy else "› ready"

    def on_resize(self) -> None:
        """Refit the status line."""
        self._refresh_status()

    # ----------------------------------------------------------------- input

    @on(Input.Submitted, "#prompt")
    async def _submitted(self, event: Input.Submitted) -> None:
        await self.submit(event.value)

    async def submit(self, raw: str) -> None:
        """Handle one line of input: a slash command or a message for the agent.

        A message while a run is in flight is refused (and left in the input).
        """
        text = raw.strip()
        if not text:
            return
        command = SLASH_COMMANDS.parse(text, "tui")
        if command is not None:
            self.input_history.push(text)
            self.prompt.value = ""
            await self.run_command(command)
            return
        if self.busy:
            await self.notice("· busy: a run is in progress (Esc cancels it)", "warn")
            return
        self.input_history.push(text)
        self.prompt.value = ""
        await self.start_run(text)

    async def start_run(self, text: str) -> None:
        """Start ``agent.run`` for ``text`` in a worker."""
        if self._run is not None:
            raise RuntimeError("a run is already in flight")
        self.runs_started += 1
        run = _Run(self.runs_started, text, self.session_id)
        self._run = run
        self._set_state(st.start_run(self.ui))
        self._set_busy(True)
        await self.add_block(fmt.UserBlock(text))
        self.run_worker(self._drive(run), name="lich-run", group="lich-run", exit_on_error=False)

    async def _drive(self, run: _Run) -> None:
        def on_event(envelope: Envelope) -> None:
            self.post_message(AgentEventMessage(run.serial, envelope))

        try:
            result = await self.agent.run(
                run.text,
                history=list(self.history),
                session_id=run.session_id,
                cancel=run.cancel,
                on_event=on_event,
            )
        except Exception as exc:
            self.post_message(RunFinished(run.serial, None, exc))
        else:
            self.post_message(RunFinished(run.serial, result, None))

    def action_cancel_run(self) -> None:
        """Esc: cancel the run in flight."""
        run = self._run
        if run is None or run.cancel.cancelled:
            return
        run.cancel.cancel()
        self._set_state(st.request_cancel(self.ui))

    def action_toggle_last_tool(self) -> None:
        """Ctrl+O: show or hide the newest tool block's full output."""
        views = list(self.transcript.query(ToolView))
        if views:
            views[-1].toggle()

    async def action_quit(self) -> None:
        """Quit, cancelling a run in flight first."""
        if self._run is not None:
            self._run.cancel.cancel()
        self.exit(0)

    # ---------------------------------------------------------------- events

    @on(AgentEventMessage)
    async def _on_agent_event(self, message: AgentEventMessage) -> None:
        run = self._run
        if run is None or message.serial != run.serial:
            return  # a run that is already settled
        event = message.envelope.event
        self._set_state(st.apply_event(self.ui, event))
        if isinstance(event, LlmStart):
            await self._end_stream(None)
        elif isinstance(event, TextDelta):
            await self._stream_text(event.text)
        elif isinstance(event, StreamReset):
            await self._discard_stream()
        elif isinstance(event, LlmEnd):
            await self._end_stream(event.result.message.content)
        elif isinstance(event, ToolCallStart):
            view = ToolView(event.call)
            self._tool_views[event.call.id] = view
            await self._mount(view)
        elif isinstance(event, ToolCallEnd):
            existing = self._tool_views.pop(event.call.id, None)
            if existing is None or not existing.is_attached:
                await self._mount(ToolView(event.call, event.result))
            else:
                existing.finish(event.call, event.result)
        elif isinstance(event, CompressEnd):
            await self.add_block(fmt.compress_notice(event))
        elif isinstance(event, Retry):
            await self.add_block(fmt.retry_notice(event))
        elif isinstance(event, Failover):
            await self.add_block(fmt.failover_notice(event))
        elif isinstance(event, ErrorEvent):
            run.error_shown = True
            await self.add_block(fmt.error_notice(event.message))
        elif isinstance(event, RunEnd):
            await self._end_stream(None)
            if not (event.stopped_reason == "error" and run.error_shown):
                end = fmt.run_end_notice(event)
                if end is not None:
                    run.error_shown = run.error_shown or end.level == "error"
                    await self.add_block(end)

    @on(RunFinished)
    async def _on_run_finished(self, message: RunFinished) -> None:
        run = self._run
        if run is None or message.serial != run.serial:
            return
        await self._end_stream(None)
        self._tool_views.clear()
        if message.result is not None:
            self.history = list(message.result.messages)
        elif message.error is not None:
            error = f"{type(message.error).__name__}: {message.error}"
            if not run.error_shown:
                await self.add_block(fmt.error_notice(error))
            self._set_state(st.apply_run_error(self.ui, error))
        if self.ui.busy:  # no run_end arrived (should not happen): settle anyway
            self._set_state(st.apply_run_error(self.ui, "run ended without run_end"))
        self._run = None
        self._set_busy(False)

    # ------------------------------------------------------- streamed answer

    async def _stream_text(self, text: str) -> None:
        if not text:
            return
        if self._markdown is None:
            self._markdown = Markdown(classes="assistant")
            await self._mount(self._markdown)
            self._stream = Markdown.get_stream(self._markdown)
        self._streamed += text
        assert self._stream is not None
        await self._stream.write(text)

    async def _discard_stream(self) -> None:
        markdown = self._markdown
        await self._end_stream(None)
        if markdown is not None:
            await markdown.remove()

    async def _end_stream(self, final_text: str | None) -> None:
        """Close the streamed answer; ``final_text`` is the answer as the model returned it
        (shown whole when nothing was streamed, e.g. a non-streaming provider)."""
        stream, markdown, streamed = self._stream, self._markdown, self._streamed
        self._stream, self._markdown, self._streamed = None, None, ""
        if stream is not None:
            await stream.stop()
        if final_text is None or not final_text.strip():
            return
        if markdown is None:
            await self._mount(Markdown(final_text, classes="assistant"))
        elif streamed != final_text:
            await markdown.update(final_text)

    # -------------------------------------------------------------- commands

    def slash_handlers(self) -> dict[str, Callable[[str], Awaitable[None]]]:
        """The handler of each slash command, by its name in the shared table
        (:data:`lich._slash.SLASH_COMMANDS`); a handler gets the argument, or ``""``."""
        return {
            "help": self._slash_help,
            "model": self._slash_model,
            "usage": self._slash_usage,
            "clear": self._slash_clear,
            "sessions": self._slash_sessions,
            "resume": self._slash_resume,
            "new": self._slash_new,
            "exit": self._slash_exit,
        }

    async def run_command(self, command: SlashInput) -> None:
        """Run a slash command (client side; never sent to the model).

        An unknown command is an error notice, a missing argument a warning.
        """
        if command.command is None or command.error is not None:
            level: fmt.NoticeLevel = "error" if command.command is None else "warn"
            await self.notice(f"· {command.error or f'unknown command /{command.typed}'}", level)
            return
        await self.slash_handlers()[command.command.name](command.args)

    async def _refused_while_busy(self, what: str) -> bool:
        """True (after saying so) when a run is in flight: ``what`` changes the conversation."""
        if self.busy:
            await self.notice(f"· busy: {what} waits until the run ends (Esc cancels it)", "warn")
        return self.busy

    async def _slash_exit(self, _args: str) -> None:
        await self.action_quit()

    async def _slash_help(self, _args: str) -> None:
        for line in (*SLASH_COMMANDS.help_lines("tui"), KEYS_HELP):
            await self.notice(line)

    async def _slash_model(self, args: str) -> None:
        if not args:
            await self.notice(fmt.model_line(self.model_name, self.provider_name))
        elif not await self._refused_while_busy("/model NAME"):
            await self.switch_model(args)

    async def _slash_usage(self, _args: str) -> None:
        await self.notice(fmt.usage_line(self.ui.total_usage))

    async def _slash_clear(self, _args: str) -> None:
        await self.clear_transcript()

    async def _slash_sessions(self, _args: str) -> None:
        for line in fmt.session_list_lines(self.agent.sessions.list(), self.session_id):
            await self.notice(line)

    async def _slash_resume(self, args: str) -> None:
        # The table requires the argument: the parser has refused a bare /resume already.
        if not await self._refused_while_busy("/resume"):
            await self.resume_session(args)

    async def _slash_new(self, _args: str) -> None:
        if not await self._refused_while_busy("/new"):
            await self.new_session()

    async def switch_model(self, model: str) -> bool:
        """Switch the first provider to ``model`` for the rest of this TUI (``/model NAME``).

        The agent is rebuilt on the same plugin host; the conversation goes on.
        An agent given a chat function has no provider to switch.
        """
        agent = self.agent
        if not agent.providers:
            await self.notice(
                "· cannot switch models: this agent was given a chat function, not providers",
                "error",
            )
            return False
        first = attrs.evolve(agent.config.providers[0], model=model)
        config = config_with(agent.config, providers=(first, *agent.config.providers[1:]))
        try:
            switched = Agent(config, host=agent.host)
        except (ConfigError, PluginLoadError) as exc:
            await self.add_block(fmt.error_notice(f"cannot switch to {model!r}: {exc}"))
            return False
        if self.owns_agent:
            await agent.aclose()
        # The app built the new agent, so it is the app's to close.
        self.agent, self.owns_agent = switched, True
        self.model_name, self.provider_name = _model_and_provider(switched)
        self._refresh_status()
        await self.notice(f"· model: {model} (provider {first.name})")
        return True

    async def new_session(self) -> None:
        """Start a new conversation (``/new``)."""
        self.history = []
        self._set_state(st.new_session(self.ui, self.agent.sessions.new_id()))
        await self.clear_transcript()
        await self.notice(f"· new session {self.session_id}")

    async def resume_session(self, ref: str) -> bool:
        """Continue session ``ref`` (an id or ``latest``): load it and show its history."""
        store = self.agent.sessions
        try:
            session_id = store.resolve(ref)
            contents = store.read(session_id)
        except (SessionNotFound, ValueError, OSError) as exc:
            await self.add_block(fmt.error_notice(f"cannot resume {ref!r}: {exc}"))
            return False
        messages = repair_dangling_tool_calls(contents.messages)
        self.history = messages
        self._set_state(st.new_session(self.ui, session_id))
        await self.clear_transcript()
        for block in fmt.history_blocks(messages):
            await self.add_block(block)
        self.input_history.add_older(m.content for m in messages if isinstance(m, UserMessage))
        count = sum(1 for m in messages if not _is_system(m))
        await self.notice(f"· resumed session {session_id} ({count} messages)")
        for problem in contents.problems:
            await self.notice(f"· {problem}", "warn")
        return True


def _is_system(message: Message) -> bool:
    return message.role == "system"


def _model_and_provider(agent: Agent) -> tuple[str, str]:
    """What answers: the first provider's model and kind (or the injected chat's name)."""
    providers: Sequence[object] = agent.config.providers
    model = agent.model
    provider = ""
    if agent.config.providers:
        first = agent.config.providers[0]
        model = model or first.model
        provider = first.kind
        if len(providers) > 1:
            provider += f" +{len(providers) - 1}"
    if not model:
        # An injected chat function (tests, embedding): its name is all there is to show.
        model = str(getattr(agent.chat, "name", "") or "")
    return model, provider
