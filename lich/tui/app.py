"""The Textual application behind ``lich tui``.

One :class:`LichApp` drives one :class:`~lich.agent.Agent`. Each message runs
``agent.run`` in a Textual worker on the app's own event loop; the run's
events come back as Textual messages (:mod:`lich.tui.messages`), in order,
and become transcript content (:mod:`lich.tui.widgets`) and state transitions
(:mod:`lich.tui.state`). Esc cancels the run through its
:class:`~lich.cancel.CancelToken`, so the run ends ``aborted`` with a valid
transcript. Formatting lives in :mod:`lich.tui.format`; the slash commands
come from the table shared with ``lich chat`` (:mod:`lich.slash`).

Importing this module imports Textual; :func:`lich.tui.run_tui` does so lazily.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import ClassVar

import attrs
from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Input, Static

from lich import __version__
from lich.agent import Agent
from lich.approvals.store import add_allow_rules, approval_config_targets
from lich.cancel import CancelToken
from lich.config import ConfigError, ConfigLocation
from lich.events import (
    ApprovalRequested,
    ApprovalResolved,
    CompressEnd,
    CompressSkipped,
    Envelope,
    ErrorEvent,
    Failover,
    InstructionsCut,
    LlmEnd,
    LlmStart,
    PromptBlocked,
    Retry,
    RunContinued,
    RunEnd,
    StreamReset,
    TextDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolOutput,
)
from lich.plugins import PluginLoadError
from lich.sessions import SessionNotFound, repair_dangling_tool_calls
from lich.slash import SlashInput
from lich.tui import state as st
from lich.tui.approval import PLUGIN_NAME, TuiApprover
from lich.tui.commands import TuiCommands
from lich.tui.format.blocks import Block, NoticeBlock, NoticeLevel, UserBlock, history_blocks
from lich.tui.format.notices import (
    approval_requested_notice,
    approval_resolved_notice,
    compress_notice,
    error_notice,
    failover_notice,
    hook_notice,
    retry_notice,
    run_end_notice,
)
from lich.tui.format.status import status_parts
from lich.tui.input_history import InputHistory
from lich.tui.log_capture import LogCapture
from lich.tui.messages import AgentEventMessage, LogNotice, RunFinished
from lich.tui.widgets import PromptInput, StatusBar, Transcript
from lich.tui.widgets.approval import ApprovalScreen
from lich.tui.widgets.text import plain
from lich.types import Message, UserMessage

__all__ = ["LichApp"]

SPINNER_INTERVAL_S = 0.08


@attrs.define
class _Run:
    """The run in flight."""

    serial: int
    text: str
    session_id: str
    cancel: CancelToken = attrs.field(factory=CancelToken)
    error_shown: bool = False


class LichApp(App[int]):
    """The lich TUI.

    :param agent: the agent to drive (tests inject one built on a scripted chat).
    :param resume: a session id or ``latest`` to continue at start.
    :param owns_agent: close the agent's providers when the app ends.
    :param model: override the model shown (default: from the agent and config).
    :param provider: override the provider shown.
    :param capture_logs: while running, show ``lich`` log warnings as notices
        instead of letting them reach the terminal (``run_tui`` sets this).
    :param config_location: the config file in use and why (``lich tui`` passes
        the one it loaded): where an ``always`` approval offers to write its rules
        (:func:`lich.approvals.store.approval_config_targets`).
    """

    TITLE = "lich"
    ENABLE_COMMAND_PALETTE = False
    # The look of the whole screen in one place; ToolView styles its own parts.
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
    # Every key the app handles, the inherited ones restated (Tab, Ctrl+Q) so that this
    # list, with the widgets' own, is what /help shows (lich.tui.commands.keys_help_lines).
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel_run", "cancel the run in flight", priority=True),
        Binding("ctrl+o", "toggle_last_tool", "expand or collapse the newest tool output"),
        Binding("tab", "focus_next", "move focus (the input, tool result lines)", show=False),
        Binding("shift+tab", "focus_previous", "move focus back", show=False),
        Binding("ctrl+q", "quit", "quit (cancels a run in flight first)", priority=True,
                show=False),
        # In place of Textual's own Ctrl+C, a toast that only says how to quit. Not a
        # priority binding: the input's copy (with a selection) and the approval
        # dialog's Ctrl+C come first.
        Binding("ctrl+c", "ctrl_c", "cancel the run; when idle, twice quits", show=False),
    ]
    #: How soon a second Ctrl+C must follow the first for an idle app to quit.
    CTRL_C_AGAIN_S = 2.0

    def __init__(
        self,
        agent: Agent,
        *,
        resume: str | None = None,
        owns_agent: bool = False,
        model: str | None = None,
        provider: str | None = None,
        capture_logs: bool = False,
        config_location: ConfigLocation | None = None,
    ) -> None:
        super().__init__()
        self.capture_logs = capture_logs
        self._log_capture = LogCapture(self)
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
        self.commands = TuiCommands(self)
        #: Asks the person about tool calls that need approval (registered on mount).
        self.config_location = config_location
        self.approver = TuiApprover(
            self,
            targets=lambda: approval_config_targets(self.agent.config, self.config_location),
            write_rules=add_allow_rules,
        )
        self._approver_registered = False

    # ----------------------------------------------------------------- layout

    def compose(self) -> ComposeResult:
        yield Static(
            plain(f"lich {__version__} — Enter send · Esc cancel · /help · Ctrl+Q quit"),
            id="header",
            markup=False,
        )
        yield Transcript(id="transcript")
        yield StatusBar(id="status")
        yield PromptInput(
            self.input_history,
            placeholder="Message lich (/help for commands)",
            id="prompt",
        )

    async def on_mount(self) -> None:
        """Focus the input, start the spinner and resume a session if asked."""
        self.prompt.focus()
        self.set_interval(SPINNER_INTERVAL_S, self._tick)
        self._refresh_status()
        if self.capture_logs:
            self._log_capture.start()
        for report in self.agent.host.failures:
            verb = "was skipped" if report.status == "skipped" else "failed to load"
            await self.notice(
                f"· plugin {report.entry!r} {verb} ({report.describe_error()}); "
                "continuing without it",
                "warn",
            )
        await self._register_approver()
        if self._resume_ref is not None:
            await self.resume_session(self._resume_ref)

    async def _register_approver(self) -> None:
        # On the host, not the agent: an agent rebuilt by /model shares the host, so
        # the approver goes on answering for it.
        report = self.agent.host.register_object(self.approver, PLUGIN_NAME)
        self._approver_registered = report.ok
        if not report.ok:
            await self.notice(
                f"· approvals: the TUI could not register its approver "
                f"({report.describe_error()}); tool calls that need approval are asked "
                "of the other approvers, or denied",
                "warn",
            )

    async def on_unmount(self) -> None:
        """Cancel a run still in flight; close the agent when the app owns it."""
        if self._run is not None:
            self._run.cancel.cancel()
        pm = self.agent.host.pm
        if self._approver_registered and pm.is_registered(self.approver):
            # An agent that outlives the app (embedding) must not ask a closed screen.
            pm.unregister(self.approver)
        self._approver_registered = False
        self._log_capture.stop()
        if self.owns_agent:
            await self.agent.aclose()

    @on(LogNotice)
    async def _on_log_notice(self, message: LogNotice) -> None:
        await self.notice(message.text, message.level)

    @property
    def transcript(self) -> Transcript:
        """The scrolling transcript."""
        return self.query_one("#transcript", Transcript)

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
        return self.transcript.text()

    async def add_block(self, block: Block) -> None:
        """Append one block to the transcript."""
        await self.transcript.add_block(block)

    async def notice(self, text: str, level: NoticeLevel = "info") -> None:
        """Append a notice line."""
        await self.add_block(NoticeBlock(text, level))

    async def clear_transcript(self) -> None:
        """Remove every block (the conversation itself is kept)."""
        await self.transcript.clear()

    # ------------------------------------------------------------ status bar

    def _set_state(self, new: st.UiState) -> None:
        self.ui = new
        self._refresh_status()

    def _refresh_status(self) -> None:
        ui = self.ui
        parts = status_parts(
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
            priced=self.agent.host.has_impls("lich_price_call"),
            cost_usd=ui.total_cost_usd,
        )
        try:
            status = self.query_one("#status", StatusBar)
        except Exception:  # not composed yet / shutting down
            return
        status.show(parts)

    def _tick(self) -> None:
        if self.ui.busy:
            self._frame += 1
            self._refresh_status()

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
        command = self.commands.table.parse(text, "tui")
        if command is not None:
            self.prompt.take(text)
            await self.run_command(command)
            return
        if self.busy:
            await self.notice("· busy: a run is in progress (Esc cancels it)", "warn")
            return
        self.prompt.take(text)
        await self.start_run(text)

    async def start_run(self, text: str) -> None:
        """Start ``agent.run`` for ``text`` in a worker."""
        if self._run is not None:
            raise RuntimeError("a run is already in flight")
        self.runs_started += 1
        run = _Run(self.runs_started, text, self.session_id)
        self._run = run
        self._set_state(st.start_run(self.ui))
        self.prompt.set_busy(True)
        await self.add_block(UserBlock(text))
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

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Esc answers the approval dialog while it is up (no), instead of cancelling
        the run (the dialog's Ctrl+C does that)."""
        return not (action == "cancel_run" and isinstance(self.screen, ApprovalScreen))

    def run_cancelled(self) -> bool:
        """Whether the run in flight was asked to stop (Esc, Ctrl+C in a dialog, quit)."""
        return self._run is not None and self._run.cancel.cancelled

    def action_cancel_run(self) -> None:
        """Esc: cancel the run in flight."""
        run = self._run
        if run is None or run.cancel.cancelled:
            return
        run.cancel.cancel()
        self._set_state(st.request_cancel(self.ui))

    def action_toggle_last_tool(self) -> None:
        """Ctrl+O: show or hide the newest tool block's full output."""
        self.transcript.toggle_last_tool()

    async def action_ctrl_c(self) -> None:
        """Ctrl+C: cancel the run in flight; when idle, the first says "Ctrl-C again to
        quit" (a line of the transcript) and a second within a few seconds quits."""
        if self._run is not None and not self._run.cancel.cancelled:
            self.action_cancel_run()
            return
        now = time.monotonic()
        if now - self._ctrl_c_at <= self.CTRL_C_AGAIN_S:
            await self.action_quit()
            return
        self._ctrl_c_at = now
        await self.transcript.notice("Ctrl-C again to quit (or Ctrl+Q)")

    _ctrl_c_at = float("-inf")

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
        transcript = self.transcript
        self._set_state(st.apply_event(self.ui, event))
        if isinstance(event, LlmStart):
            await transcript.end_answer(None)
        elif isinstance(event, TextDelta):
            await transcript.stream_text(event.text)
        elif isinstance(event, StreamReset):
            await transcript.discard_answer()
        elif isinstance(event, LlmEnd):
            await transcript.end_answer(event.result.message.content)
        elif isinstance(event, ToolCallStart):
            await transcript.start_tool(event.call)
        elif isinstance(event, ToolOutput):
            transcript.tool_output(event.call_id, event.text)
        elif isinstance(event, ToolCallEnd):
            await transcript.finish_tool(event.call, event.result)
        elif isinstance(event, ApprovalRequested):
            # Above the tool's block, whose result comes after the answer.
            await transcript.add_before_tool(event.call.id, approval_requested_notice(event))
        elif isinstance(event, ApprovalResolved):
            await transcript.add_before_tool(event.call_id, approval_resolved_notice(event))
        elif isinstance(event, CompressEnd):
            await self.add_block(compress_notice(event))
        elif isinstance(event, Retry):
            await self.add_block(retry_notice(event))
        elif isinstance(event, Failover):
            await self.add_block(failover_notice(event))
        elif isinstance(event, InstructionsCut | PromptBlocked | CompressSkipped | RunContinued):
            await self.add_block(hook_notice(event))
        elif isinstance(event, ErrorEvent):
            run.error_shown = True
            await self.add_block(error_notice(event.message))
        elif isinstance(event, RunEnd):
            await transcript.end_answer(None)
            if not (event.stopped_reason == "error" and run.error_shown):
                end = run_end_notice(event, self.ui.budget_reason)
                if end is not None:
                    run.error_shown = run.error_shown or end.level == "error"
                    await self.add_block(end)

    @on(RunFinished)
    async def _on_run_finished(self, message: RunFinished) -> None:
        run = self._run
        if run is None or message.serial != run.serial:
            return
        await self.transcript.end_answer(None)
        self.transcript.forget_tools()
        if message.result is not None:
            self.history = list(message.result.messages)
        elif message.error is not None:
            error = f"{type(message.error).__name__}: {message.error}"
            if not run.error_shown:
                await self.add_block(error_notice(error))
            self._set_state(st.apply_run_error(self.ui, error))
        if self.ui.busy:  # no run_end arrived (should not happen): settle anyway
            self._set_state(st.apply_run_error(self.ui, "run ended without run_end"))
        self._run = None
        self.prompt.set_busy(False)

    # ------------------------------------------- what the slash commands do

    async def run_command(self, command: SlashInput) -> None:
        """Run a slash command (client side; never sent to the model)."""
        await self.commands.run(command)

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
        try:
            switched = agent.with_model(model)
        except (ConfigError, PluginLoadError) as exc:
            await self.add_block(error_notice(f"cannot switch to {model!r}: {exc}"))
            return False
        if self.owns_agent:
            await agent.aclose()
        # The app built the new agent, so it is the app's to close.
        self.agent, self.owns_agent = switched, True
        self.model_name, self.provider_name = _model_and_provider(switched)
        self._refresh_status()
        await self.notice(f"· model: {model} (provider {switched.config.providers[0].name})")
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
            await self.add_block(error_notice(f"cannot resume {ref!r}: {exc}"))
            return False
        messages = repair_dangling_tool_calls(contents.messages)
        self.history = messages
        self._set_state(st.new_session(self.ui, session_id))
        await self.clear_transcript()
        for block in history_blocks(messages):
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
        provider = first.kind or agent.provider_kinds.default_kind() or ""
        if len(providers) > 1:
            provider += f" +{len(providers) - 1}"
    if not model:
        # An injected chat function (tests, embedding): its name is all there is to show.
        model = str(getattr(agent.chat, "name", "") or "")
    return model, provider
