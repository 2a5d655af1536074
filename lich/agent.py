"""The composition root: an :class:`Agent` asks the plugin host for tools,
providers and the router, then runs conversations and records them.

>>> agent = Agent(load_config().config)          # plugins from the config
>>> result = agent.run_sync("what is in this directory?")
>>> print(result.text)
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import platform
import sys
import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

import attrs
from attrs import frozen

from lich import serialization
from lich.cancel import CancelToken
from lich.config import ConfigError, LichConfig, ProviderConfig, config_with
from lich.events import (
    ApprovalRequested,
    ApprovalResolved,
    CompressEnd,
    CompressSkipped,
    Envelope,
    ErrorEvent,
    Event,
    EventHandler,
    Failover,
    InstructionsCut,
    LlmEnd,
    PromptBlocked,
    Retry,
    RunContinued,
    RunEmitter,
    RunEnd,
    RunStart,
    StoppedReason,
    ToolCallEnd,
    TurnStart,
)
from lich.executor import HookedToolRunner, ToolExecutor
from lich.hooks import Block, RunInfo, RunOutcome
from lich.instructions import AssembledPrompt, assemble_instructions
from lich.journal import TurnJournal
from lich.loop import (
    BudgetStop,
    CompressPlan,
    LoopDeps,
    LoopOutcome,
    LoopParams,
    ToolOutcome,
    ToolRunner,
    continue_conversation,
    last_assistant,
    run_conversation,
    seed_system_prompt,
)
from lich.plugins import PluginHost
from lich.plugins.calling import PromptDecision
from lich.processes import ProcessRunner
from lich.protected import ProtectedPaths
from lich.providers import (
    ProviderRegistry,
    build_chat,
    build_providers,
    redacting_chat,
    secret_env_names,
)
from lich.sessions import (
    JsonlSessionStore,
    SessionStore,
    SessionWriter,
    StaleWriter,
    TranscriptWriter,
    open_session_store,
)
from lich.tools import ToolRegistry
from lich.types import (
    ChatFn,
    ChatOptions,
    ChatResult,
    Message,
    Provider,
    ProviderError,
    ToolCall,
    ToolDefinition,
    ToolResult,
    Usage,
    UserMessage,
)

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "INTERRUPTED_ERROR",
    "Agent",
    "HookedToolRunner",
    "RunResult",
    "build_tool_registry",
    "default_system_prompt",
    "load_plugins",
]

log = logging.getLogger("lich.agent")

DEFAULT_SYSTEM_PROMPT = (
    "You are lich, a capable and concise assistant. Use the available tools when they help "
    "with the user's task, and report results plainly."
)


def default_system_prompt(work_dir: str, *, today: datetime.date | None = None) -> str:
    """:data:`DEFAULT_SYSTEM_PROMPT` plus what a model cannot know by itself and keeps
    getting wrong: the working directory (tool paths are relative to it), the operating
    system (which shell commands exist) and today's date.

    Deterministic for a given ``today`` (tests pass one); no file or process is read.
    A ``system_prompt`` in the config replaces all of it.
    """
    day = today or datetime.date.today()
    system = platform.system() or sys.platform
    return (f"{DEFAULT_SYSTEM_PROMPT}\n\n"
            f"Working directory: {work_dir}\n"
            f"Operating system: {system}\n"
            f"Today's date: {day.isoformat()}")

#: The result :meth:`Agent.continue_turn` gives a call that may have run before the
#: process running it died (it is not run again).
INTERRUPTED_ERROR = (
    "interrupted: this call was started, but the process running it stopped before its "
    "result was recorded; it may or may not have taken effect, and it was not run again. "
    "Check its effect before you repeat it."
)

# Events that go into the transcript besides the messages themselves.
_RECORDED_EVENTS = (
    ToolCallEnd, ApprovalRequested, ApprovalResolved, CompressEnd, CompressSkipped, Retry,
    Failover, ErrorEvent, InstructionsCut, PromptBlocked, RunContinued,
)


@frozen
class RunResult:
    """What :meth:`Agent.run` returns."""

    run_id: str
    session_id: str
    session_path: str | None
    outcome: LoopOutcome
    usage: Usage
    #: Why a ``lich_user_prompt`` hook refused the message (``stopped_reason ==
    #: "blocked"``), with the plugin: ``"<plugin>: <reason>"``; ``None`` otherwise.
    refusal: str | None = None

    @property
    def messages(self) -> tuple[Message, ...]:
        """The whole conversation after the run, each message once."""
        return self.outcome.messages

    @property
    def stopped_reason(self) -> StoppedReason:
        """``final``, ``budget``, ``aborted`` or ``blocked``."""
        return self.outcome.stopped_reason

    @property
    def text(self) -> str:
        """The final answer's text ('' when there is none)."""
        return self.outcome.final.content if self.outcome.final else ""

    @property
    def cost_usd(self) -> float | None:
        """What the run cost in US dollars; ``None`` when unknown (see ``lich_price_call``)."""
        return self.outcome.cost_usd


def load_plugins(config: LichConfig, extra: Sequence[tuple[str, object]] = ()) -> PluginHost:
    """A fresh :class:`PluginHost` with the config's plugins (and ``extra`` objects) loaded.

    Strict mode raises :class:`lich.plugins.PluginLoadError`; otherwise failures
    stay in ``host.reports``.
    """
    host = PluginHost(work_dir=config.work_dir, hook_timeout_s=config.hook_timeout_s)
    host.load(config.plugins)
    for name, plugin in extra:
        host.register_object(plugin, name)
    return host


def build_tool_registry(
    host: PluginHost, config: LichConfig, runner: ProcessRunner | None = None, *,
    inspect_only: bool = False,
) -> ToolRegistry:
    """Every plugin's tools, with ``tools_enabled`` / ``tools_disabled`` applied.

    ``runner`` starts what registering starts (MCP servers); ``None`` asks the
    plugins (``lich_make_process_runner``). ``inspect_only``: to look at, not to
    run — the plugins start nothing (:class:`lich.tools.ToolRegistry`)."""
    registry = ToolRegistry(inspect_only=inspect_only)
    host.register_tools(registry, config, runner)
    registry.filter(config.tools_enabled, config.tools_disabled)
    return registry


def _model_role_problems(config: LichConfig) -> list[str]:
    """``[models.<role>]`` tables naming a provider the config does not have."""
    names = [p.name for p in config.providers]
    return [f"$.models.{role}.provider: no provider named {spec.provider!r} "
            f"(configured: {', '.join(names) or 'none'})"
            for role, spec in config.models.items()
            if spec.provider is not None and spec.provider not in names]


def _unusable_model(problem: ConfigError) -> ChatFn:
    """A chat function failing every call with ``problem`` (an agent without a model)."""
    reason = "; ".join(problem.problems)

    async def chat(messages: Sequence[Message], tools: Sequence[ToolDefinition],
                   options: ChatOptions) -> ChatResult:
        raise ProviderError("bad_request", "none",
                            f"this process has no usable model: {reason}")

    return chat


class Agent:
    """An agent: tools and a chat function assembled from plugins, plus a session store.

    :param config: the effective configuration.
    :param host: a plugin host with plugins already loaded; by default one is
        made and the config's ``plugins`` are loaded into it.
    :param plugins: extra in-process plugin objects as ``(name, object)`` pairs.
    :param chat: use this chat function instead of building providers (tests,
        embedding); the router and provider plugins are then not consulted.
    :param env: extra environment handed to tools.
    :param today: the date the default system prompt gives the model (tests pin it).
    :param sessions: use this transcript store (it stays the caller's to close);
        by default the one ``lich_make_session_store`` (or the JSONL default)
        gives, closed by :meth:`aclose`.
    :param model_optional: for a process that may run no model at all (a cluster
        ingress, whose bus hands every message to workers): providers that cannot
        be built (no model configured, a key not set) do not fail the agent; the
        problem is kept in :attr:`model_problem` and every model call fails with
        it. The caller decides, once it knows, whether that is an error.

    Strict mode (``config.strict_plugins``) raises
    :class:`lich.plugins.PluginLoadError` when any plugin failed.
    """

    def __init__(
        self,
        config: LichConfig,
        *,
        host: PluginHost | None = None,
        plugins: Sequence[tuple[str, object]] = (),
        chat: ChatFn | None = None,
        env: dict[str, str] | None = None,
        today: Callable[[], datetime.date] = datetime.date.today,
        sessions: SessionStore | None = None,
        model_optional: bool = False,
    ) -> None:
        self.config = config
        self._env = env
        self._today = today
        if host is None:
            host = load_plugins(config, plugins)
        else:
            for name, plugin in plugins:
                host.register_object(plugin, name)
        self.host = host
        # Every plugin's settings, checked before anything is built: a run rejects
        # exactly what `lich config validate` reports.
        problems = [*host.check_config(config), *_model_role_problems(config)]
        if problems:
            raise ConfigError(problems)
        #: What every process of a tool and every stdio MCP server is started through
        #: (``lich_make_process_runner``; :data:`lich.processes.DIRECT` by default).
        self.process_runner = host.make_process_runner(config)
        self.tools = build_tool_registry(host, config, self.process_runner)
        self.providers: list[Provider] = []
        #: Why no model can be called (``model_optional`` agents only), else None.
        self.model_problem: ConfigError | None = None
        # The kinds are registered even with an injected chat function: their default key
        # variables are what the tools must never reveal.
        self.provider_kinds = ProviderRegistry()
        host.register_providers(self.provider_kinds)
        if chat is None:
            # Strict mode first: a provider kind missing because its plugin failed is
            # reported as that plugin failure, not as a config error.
            if config.strict_plugins:
                host.raise_if_failed()
            try:
                self.providers = build_providers(config, self.provider_kinds)
                chat = build_chat(config, host, self.providers)
            except ConfigError as exc:
                if not model_optional:
                    raise
                self.providers = []
                chat = _unusable_model(exc)
                self.model_problem = exc
        if config.strict_plugins:
            host.raise_if_failed()
        self.chat: ChatFn = chat
        self.executor = ToolExecutor(
            self.tools, work_dir=config.work_dir, env=env, tool_settings=config.tools,
            secret_env_names=secret_env_names(config, self.provider_kinds),
            protected=ProtectedPaths.for_config(config),
            process_runner=self.process_runner,
        )
        # After the checks: a bad [session_store] is reported with everything else.
        self._owns_sessions = sessions is None
        self.sessions: SessionStore = (
            open_session_store(config, host) if sessions is None else sessions)
        self._resolved_providers: dict[str, ProviderConfig] | None = None
        # The auxiliary model roles built so far ([models.<role>]; chat_for).
        self._role_chats: dict[str, ChatFn] = {}
        self._role_providers: list[Provider] = []
        self._closed = False

    @property
    def model(self) -> str:
        """The first provider's model ('' when a chat function was injected)."""
        return self.providers[0].model if self.providers else ""

    def chat_for(self, role: str) -> ChatFn:
        """The chat function of the auxiliary model role ``role`` (what
        :meth:`lich.RunInfo.chat_for` answers): the ``[models.<role>]`` table's
        provider (by name; the first by default) with its model, built once, or this
        agent's own chat function when the config has no such table.

        :raises lich.config.ConfigError: the table names no configured provider, or
            the provider cannot be built.
        """
        role_config = self.config.models.get(role)
        if role_config is None:
            return self.chat
        chat = self._role_chats.get(role)
        if chat is not None:
            return chat
        providers = self.config.providers
        index = next((i for i, p in enumerate(providers)
                      if role_config.provider in (None, p.name)), None)
        if index is None:
            names = ", ".join(p.name for p in providers) or "none"
            raise ConfigError([f"$.models.{role}.provider: no provider named "
                               f"{role_config.provider!r} (configured: {names})"])
        chosen = providers[index]
        provider = self.provider_kinds.create(
            attrs.evolve(chosen, model=role_config.model or chosen.model), index)
        self._role_providers.append(provider)
        self._role_chats[role] = provider.chat
        return provider.chat

    def with_model(self, model: str) -> Agent:
        """A new agent on the same plugin host whose first provider calls ``model``.

        What ``/model NAME`` does in ``lich chat`` and the TUI: everything else of
        the configuration stays, the new agent is assembled (and checked) exactly
        as this one was. The caller closes this agent when it is done with it.

        :raises lich.config.ConfigError: the new configuration is unusable.
        :raises ValueError: this agent was given a chat function, not providers.
        """
        if not self.providers:
            # An injected chat function (tests, embedding) has no provider to rebuild: a
            # new agent from the config would silently call the real providers instead.
            raise ValueError("this agent was given a chat function, not providers: "
                             "there is no model to switch")
        first = attrs.evolve(self.config.providers[0], model=model)
        config = config_with(self.config, providers=(first, *self.config.providers[1:]))
        switched = Agent(config, host=self.host, env=self._env, today=self._today,
                         sessions=self.sessions)
        # The store goes on with the new agent (a database pool is not reopened per
        # /model): it closes it, and closing this one leaves it open.
        switched._owns_sessions, self._owns_sessions = self._owns_sessions, False
        return switched

    async def aclose(self) -> None:
        """Close the providers' HTTP clients and the session store this agent opened, and
        let plugins release what they opened for this agent (``lich_shutdown``: MCP
        servers). Idempotent."""
        if not self._closed:
            self._closed = True
            await self.host.shutdown(self.tools)
        for provider in [*self.providers, *self._role_providers]:
            try:
                await provider.aclose()
            except Exception:
                log.debug("closing provider %s failed", provider.name, exc_info=True)
        if self._owns_sessions:
            self._owns_sessions = False
            try:
                await asyncio.to_thread(self.sessions.close)
            except Exception:
                log.warning("closing the session store failed", exc_info=True)

    async def run(
        self,
        input: str,
        history: Sequence[Message] | None = None,
        session_id: str | None = None,
        cancel: CancelToken | None = None,
        on_event: EventHandler | None = None,
        *,
        turn: TurnJournal | None = None,
    ) -> RunResult:
        """Run one conversation turn from ``input`` to a final answer, the budget or a cancel.

        :param history: earlier messages; when ``None`` and ``session_id``
            names an existing session, its history is resumed from the file.
        :param session_id: continue (or start) this session; a new one by default.
        :param cancel: cancel the run from anywhere; the run then ends
            ``aborted`` with a valid transcript.
        :param on_event: called with every event envelope of this run.
        :param turn: the run's journal (:class:`lich.journal.TurnJournal`): what the
            caller records beside the conversation, through this run's writer, at
            the steps :mod:`lich.journal` names — a durable turn
            (:class:`lich.turns.DurableTurn`) stores ``turn_start`` before the first
            model call and ``tool_start`` before every call of a tool that is not
            idempotent, and keeps the writer for the caller's ``turn_end`` and
            ``reply_sent``. Nothing is recorded without ``persist_sessions``.

        ``input`` goes through ``lich_user_prompt`` first (every front end calls
        this method, so every front end's messages do): the edited message is the
        run's input; a refused one ends the run with ``stopped_reason="blocked"``
        before any model call (:attr:`RunResult.refusal` says who refused it and why).

        A model failure re-raises its :class:`~lich.types.ProviderError` after
        ``lich_run_end`` has been called with ``stopped_reason="error"``. A
        transcript that cannot be written is logged and the run goes on without
        it, except when the session was claimed by another writer: the run is
        then cancelled and :class:`lich.sessions.StaleWriter` raised after
        ``lich_run_end`` (``stopped_reason="aborted"``).
        """
        resumed = False
        if session_id is not None:
            resumed, stored = await self._load_session(session_id, history is None)
            if stored is not None:
                history = stored
        return await self._run(input, list(history or ()), session_id, resumed, cancel,
                               on_event, turn)

    async def continue_turn(
        self,
        history: Sequence[Message],
        session_id: str,
        cancel: CancelToken | None = None,
        on_event: EventHandler | None = None,
        *,
        interrupted: Collection[str] | None = None,
        turn: TurnJournal | None = None,
    ) -> RunResult:
        """Finish a turn that an earlier run of ``session_id`` began and did not end
        (its process died, or it was cancelled), without asking it again.

        ``history`` is the conversation as recorded (not repaired: a tool call
        may lack its result), ending inside the unfinished turn; its last user
        message is the turn's input, and no new one is added. The calls of the
        last assistant message that have no result are settled first: a call of
        an :attr:`~lich.tools.Tool.idempotent` tool runs (again), and so does one
        that never started; a call that may have started (its id in
        ``interrupted``; every call of a tool that is not idempotent when
        ``interrupted`` is ``None``) is not run twice: it gets the result
        :data:`INTERRUPTED_ERROR`, which tells the model it may or may
        not have taken effect. A history that already ends in an answer is the
        turn's answer (no model call); otherwise the loop goes on from it.

        :param turn: the journal of the turn being continued (a durable turn writes
            no second ``turn_start``; ``tool_start`` as in :meth:`run`).
        :raises ValueError: ``history`` holds no user message (no turn to continue).

        Otherwise as :meth:`run` (the transcript gets a ``run_start`` with
        ``continued: true`` and the records of what this run adds).
        """
        last_user = next((m for m in reversed(history) if isinstance(m, UserMessage)), None)
        if last_user is None:
            raise ValueError("there is no turn to continue: the history holds no user message")
        return await self._run(last_user.content, list(history), session_id, True, cancel,
                               on_event, turn, continuing=True, interrupted=interrupted)

    async def _run(
        self,
        input: str,
        prior: list[Message],
        session_id: str | None,
        resumed: bool,
        cancel: CancelToken | None,
        on_event: EventHandler | None,
        journal: TurnJournal | None,
        *,
        continuing: bool = False,
        interrupted: Collection[str] | None = None,
    ) -> RunResult:
        """One run, in steps: open it (:meth:`_open`), take the user's message
        (:meth:`_take_prompt`), assemble the system prompt (:meth:`_assemble_prompt`),
        record the start (:meth:`_record_start`), converse (:meth:`_converse`), finish
        (:meth:`_finish`: ``run_end`` whatever happened)."""
        state = self._open(input, prior, session_id, resumed, cancel, on_event, journal,
                           continuing=continuing, interrupted=interrupted)
        outcome: LoopOutcome | None = None
        decision: PromptDecision | None = None
        try:
            # Inside the try from the first hook on: lich_run_end must follow even if
            # the task is cancelled here.
            decision = await self._take_prompt(state)
            await self._assemble_prompt(state)
            self._record_start(state, decision)
            await self.host.run_start(state.info)
            if decision is not None and decision.blocked_by is not None:
                outcome = state.blocked(decision.blocked_by, decision.reason or "")
            else:
                outcome = await self._converse(state)
        except asyncio.CancelledError:
            # The task itself was cancelled (e.g. Ctrl-C): record an aborted run, then let the
            # cancellation continue.
            await self._finish(state, "aborted")
            raise
        except BaseException as exc:
            await self._finish(state, "error", error=f"{type(exc).__name__}: {exc}")
            raise
        await self._finish(state, outcome.stopped_reason, outcome)
        writer = state.writer
        if writer is not None and writer.stale is not None:
            raise writer.stale
        return RunResult(
            run_id=state.info.run_id,
            session_id=state.info.session_id,
            session_path=writer.location if writer is not None and not writer.failed else None,
            outcome=outcome,
            usage=outcome.usage,
            refusal=(f"{decision.blocked_by}: {decision.reason}"
                     if decision is not None and decision.blocked_by is not None else None),
        )

    # -- the steps of a run ---------------------------------------------------------------

    def _open(
        self,
        input: str,
        prior: list[Message],
        session_id: str | None,
        resumed: bool,
        cancel: CancelToken | None,
        on_event: EventHandler | None,
        journal: TurnJournal | None,
        *,
        continuing: bool,
        interrupted: Collection[str] | None,
    ) -> _Run:
        """The run's ids, its writer (fenced by the journal before its first record) and
        its event subscribers; nothing is recorded or emitted yet."""
        config = self.config
        run_id = uuid.uuid4().hex[:12]
        session_id = session_id or self.sessions.new_id()
        writer: _RunWriter | None = None
        if config.persist_sessions:
            if cancel is None and self.sessions.fenced:
                # A writer that loses its session must be able to stop the run; a store
                # that cannot lose one costs no token (nor the race on every call).
                cancel = CancelToken()
            inner = self.sessions.open(session_id)
            if journal is not None:
                journal.fence(inner)  # before its first record: the claim is made with it
            writer = _RunWriter(inner, cancel.cancel if cancel is not None else None)
        info = RunInfo(run_id, session_id, input, config.work_dir, config, tools=self.tools,
                       models=self.chat_for,
                       recorder=writer.append if writer is not None else None)
        # The per-turn hooks this run calls: those a plugin implements and needs for this
        # config (a plugin loaded but not configured declares itself idle: needed_when).
        pricing = self.host.needs("lich_price_call", config)
        state = _Run(
            host=self.host, info=info, emitter=RunEmitter(run_id, session_id), writer=writer,
            spent=_UsageMeter(0.0 if pricing else None), pricing=pricing, cancel=cancel,
            # Nothing is recorded without a writer, so a journal has nothing to do.
            journal=journal if writer is not None else None,
            prior=prior, resumed=resumed, continuing=continuing, interrupted=interrupted,
        )
        state.emitter.subscribe(state.spent)
        if on_event is not None:
            state.emitter.subscribe(on_event)
        if self.host.needs("lich_event", config):
            state.emitter.subscribe(state.tell_plugins)
        if writer is not None:
            state.emitter.subscribe(_event_recorder(writer))
        return state

    async def _take_prompt(self, state: _Run) -> PromptDecision | None:
        """``lich_user_prompt`` on a new turn's message (a continued turn's was taken by
        the run that began it); the run's input becomes the message as edited."""
        if state.continuing or not self.host.has_impls("lich_user_prompt"):
            return None
        decision = await self.host.user_prompt(state.info, state.info.input)
        if decision.text != state.info.input:
            state.info = attrs.evolve(state.info, input=decision.text)
        return decision

    async def _assemble_prompt(self, state: _Run) -> None:
        """The system prompt: ``system_prompt`` (or the default) and the
        ``lich_instructions`` sections, cut to ``instructions_budget_tokens``."""
        config = self.config
        base = config.system_prompt or default_system_prompt(config.work_dir,
                                                             today=self._today())
        sections = (await self.host.instructions(state.info)
                    if self.host.has_impls("lich_instructions") else [])
        state.prompt = assemble_instructions(base, sections, config.instructions_budget_tokens)

    def _record_start(self, state: _Run, decision: PromptDecision | None) -> None:
        """The start records (``run_start``, the turn's user message, the journal's own)
        and the ``run_start`` event with the prompt's sections and cuts."""
        info, writer, journal = state.info, state.writer, state.journal
        prompt = state.prompt
        blocked = decision is not None and decision.blocked_by is not None
        if state.continuing or blocked:
            # A continued turn's message is recorded already; a refused one never is.
            seeded = seed_system_prompt(state.prior, prompt.text)
        else:
            seeded = seed_system_prompt([*state.prior, UserMessage(info.input)], prompt.text)
        state.seeded = seeded
        state.transcript = list(seeded)
        if writer is not None:
            start: dict[str, Any] = {"continued": True} if state.continuing else {}
            if decision is not None and decision.edited_by:
                start["edited_by"] = list(decision.edited_by)
            writer.append("meta", event="run_start", run_id=info.run_id, input=info.input,
                          model=self.model, work_dir=info.work_dir, **start)
            mark = journal.message_fields() if journal is not None else {}
            if state.continuing:
                if seeded != state.prior:  # the system prompt changed since: record it as it is
                    writer.compact(seeded)
            elif blocked:
                pass  # nothing new for the conversation: the model never saw the message
            elif not state.resumed:
                for message in seeded[:-1]:
                    writer.message(message)
                writer.message(seeded[-1], **mark)
            elif list(seeded[:-1]) == state.prior:
                writer.message(seeded[-1], **mark)  # a resumed session: only what is new
            else:
                # The system prompt was prepended or replaced: appending it would leave it
                # after the earlier turns in the file. Record the history as it now is.
                writer.compact(seeded, **mark)
            if journal is not None and not blocked:
                journal.attach(writer, info.run_id, continuing=state.continuing)
        state.emitter.emit(RunStart(info.input, info.work_dir, self.model, prompt.reports))
        state.started = True
        for cut in prompt.cuts:
            state.emitter.emit(cut)

    async def _converse(self, state: _Run) -> LoopOutcome:
        """The loop (or a continued turn's end and then the loop), with this run's
        tools, hooks and parameters."""
        config = self.config
        if state.journal is not None and state.writer is not None:
            await state.writer.flush()  # the journal's records are stored before any call
        secrets = self.executor.secret_env_names
        host = self.host
        compress_chat = (redacting_chat(self.chat_for("compress"), secrets)
                         if "compress" in config.models else None)
        deps = LoopDeps(
            # Provider errors are redacted where they enter the run: an error body
            # quoting the key must not reach an event, the transcript or a log.
            chat=redacting_chat(self.chat, secrets),
            tools=self._tool_runner(state),
            definitions=self.tools.definitions,
            emit=state.emit,
            on_message=state.on_message,
            on_compact=state.on_compact,
            price=self._price if state.pricing else None,
            before_call=(state.before_call if host.needs("lich_before_model_call", config)
                         else None),
            prepare_tools=(state.prepare_tools if host.has_impls("lich_prepare_tools")
                           else None),
            before_compress=(state.before_compress if host.has_impls("lich_before_compress")
                             else None),
            after_final=state.after_final if host.has_impls("lich_after_final") else None,
            compress_chat=compress_chat,
        )
        params = LoopParams(
            max_turns=config.max_turns,
            system_prompt=state.prompt.text,
            temperature=config.temperature,
            max_tokens=config.max_tokens,
            context_budget_tokens=config.context_budget_tokens,
            compress_threshold=config.compress_threshold,
            stream=config.stream,
            cancel=state.cancel,
        )
        if not state.continuing:
            return await run_conversation(deps, state.seeded, params)
        interrupted = state.interrupted
        return await continue_conversation(
            deps, state.seeded, params, interrupted_result=ToolResult.failure(INTERRUPTED_ERROR),
            rerun=lambda call: self._may_rerun(call, interrupted))

    def _tool_runner(self, state: _Run) -> ToolRunner:
        """The run's tool runner: the hooks, approvals and executor, and the journal's
        steps around each call when the run has one."""
        journal = state.journal
        before: Callable[[ToolCall], Awaitable[ToolResult | None]] | None = None
        if journal is not None:
            async def before(call: ToolCall) -> ToolResult | None:
                return await journal.before_tool(call, self.tools.get(call.name))

        hooked = HookedToolRunner(self.executor, self.host, state.info,
                                  emit=state.emit,
                                  before_execute=before)
        return hooked if journal is None else _JournaledTools(hooked, journal)

    async def _finish(self, state: _Run, reason: StoppedReason,
                      outcome: LoopOutcome | None = None, *, error: str | None = None) -> None:
        """``run_end`` (event, record, hook) with what the run spent, whatever ended it:
        the loop's outcome, or what the meter counted for a run that raised."""
        if outcome is not None:
            turns, usage, cost, final = (outcome.turns_used, outcome.usage, outcome.cost_usd,
                                         outcome.final)
        else:
            spent = state.spent
            turns, usage, cost = spent.turns, spent.usage, spent.cost
            final = last_assistant(state.transcript)
        info, writer = state.info, state.writer
        if not state.started:  # it ended before its start was told: every run_end has one
            state.emitter.emit(RunStart(info.input, info.work_dir, self.model))
        state.emitter.emit(RunEnd(reason, turns, usage, error, cost))
        if writer is not None:
            try:
                writer.append("meta", event="run_end", run_id=info.run_id, stopped_reason=reason,
                              turns_used=turns, usage=serialization.unstructure(usage),
                              error=error, cost_usd=cost)
            finally:
                await writer.aclose()
        await self.host.run_end(info, RunOutcome(reason, turns, usage, final, error, cost))
        await self.host.drain_events()

    def _may_rerun(self, call: ToolCall, interrupted: Collection[str] | None) -> bool:
        """Whether a call a dead run left without a result may run now: its tool is
        idempotent, or the call is known never to have started."""
        tool = self.tools.get(call.name)
        if tool is None or tool.idempotent:
            return True  # an unknown tool runs nothing: the executor answers unknown_tool
        return interrupted is not None and call.id not in interrupted

    async def _load_session(self, session_id: str,
                            want_history: bool) -> tuple[bool, list[Message] | None]:
        """``(exists, its history if wanted)`` of ``session_id``.

        The JSONL store is read right here, as it always was (a file read costs less
        than a thread hop); any other store in a worker thread: its reads may wait on
        a server (for as long as it retries a lost connection), and the event loop
        must not wait with them.
        """
        store = self.sessions

        def load() -> tuple[bool, list[Message] | None]:
            if not store.exists(session_id):
                return False, None
            return True, store.history(session_id) if want_history else None

        if isinstance(store, JsonlSessionStore):
            return load()
        return await asyncio.to_thread(load)

    def _price(self, result: ChatResult) -> float | None:
        """``lich_price_call`` for one answer, with the configured provider that gave it."""
        provider = self._provider_configs().get(result.provider_name)
        model = result.model or (provider.model if provider is not None else "")
        return self.host.price_call(provider, model, result.usage, self.config)

    def _provider_configs(self) -> dict[str, ProviderConfig]:
        # Resolved once per agent: the kind's default base_url is what a price list
        # recognises the provider by. A provider whose kind is not registered (a chat
        # function given directly) is simply not known here.
        if self._resolved_providers is None:
            resolved: dict[str, ProviderConfig] = {}
            for index, provider in enumerate(self.config.providers):
                try:
                    resolved[provider.name] = self.provider_kinds.resolve(provider, index)
                except ConfigError:
                    continue
            self._resolved_providers = resolved
        return self._resolved_providers

    def run_sync(self, input: str, **kwargs: Any) -> RunResult:
        """:meth:`run` for scripts: runs its own event loop."""
        return asyncio.run(self.run(input, **kwargs))


@attrs.define(eq=False)
class _Run:
    """One run's state: what the steps of :meth:`Agent._run` share, and the loop's
    callbacks into the run's writer and the plugins' hooks."""

    host: PluginHost
    info: RunInfo
    emitter: RunEmitter
    writer: _RunWriter | None
    spent: _UsageMeter
    pricing: bool
    cancel: CancelToken | None
    journal: TurnJournal | None
    prior: list[Message]
    resumed: bool
    continuing: bool
    interrupted: Collection[str] | None
    prompt: AssembledPrompt = attrs.Factory(lambda: AssembledPrompt(""))
    seeded: list[Message] = attrs.Factory(list)
    #: The conversation as it grows (for the final answer of a run that raised).
    transcript: list[Message] = attrs.Factory(list)
    #: Whether run_start was emitted.
    started: bool = False

    def blocked(self, blocked_by: str, reason: str) -> LoopOutcome:
        """The outcome of a run whose message a ``lich_user_prompt`` hook refused."""
        self.emitter.emit(PromptBlocked(reason, blocked_by))
        return LoopOutcome(tuple(self.seeded), None, None, 0, "blocked",
                           cost_usd=0.0 if self.pricing else None)

    # -- what the loop calls ----------------------------------------------------------------

    def emit(self, event: Event) -> None:
        self.emitter.emit(event)

    def tell_plugins(self, envelope: Envelope) -> None:
        self.host.event(envelope, self.info)

    def on_message(self, message: Message) -> None:
        self.transcript.append(message)
        if self.writer is not None:
            self.writer.message(message)

    def on_compact(self, messages: Sequence[Message]) -> None:
        self.transcript[:] = messages
        if self.writer is not None:
            self.writer.compact(messages)

    async def before_call(self, turn: int, usage: Usage, cost: float | None) -> BudgetStop | None:
        answer = await self.host.before_model_call(self.info, turn, usage, cost)
        if answer is None:
            return None
        stop, plugin = answer
        return BudgetStop(stop.budget or plugin, stop.reason, plugin)

    async def prepare_tools(self, turn: int,
                            tools: Sequence[ToolDefinition]) -> Sequence[ToolDefinition]:
        return await self.host.prepare_tools(self.info, turn, tuple(tools))

    async def before_compress(self, messages: Sequence[Message]) -> CompressPlan:
        answer = await self.host.before_compress(self.info, tuple(messages))
        if answer is None:
            return CompressPlan()
        decision, plugin = answer
        if isinstance(decision, Block):
            return CompressPlan(skipped_by=plugin, reason=decision.reason)
        return CompressPlan(keep_recent=decision.keep_recent, focus=decision.focus)

    async def after_final(self, turn: int, outcome: LoopOutcome) -> tuple[str, str] | None:
        answer = await self.host.after_final(self.info, RunOutcome(
            "final", outcome.turns_used, outcome.usage, outcome.final, None, outcome.cost_usd))
        if answer is None:
            return None
        follow_up, plugin = answer
        return follow_up.prompt, plugin


class _JournaledTools:
    """The run's tool runner with the journal's last word on every result
    (:meth:`lich.journal.TurnJournal.after_tool`)."""

    __slots__ = ("inner", "journal")

    def __init__(self, inner: ToolRunner, journal: TurnJournal) -> None:
        self.inner = inner
        self.journal = journal

    async def __call__(self, call: ToolCall, cancel: CancelToken | None) -> ToolOutcome:
        try:
            ran = await self.inner(call, cancel)
        except BaseException:
            self.journal.after_tool(call, ToolResult.failure("cancelled"), True)
            raise
        cancelled = cancel is not None and cancel.cancelled
        result = self.journal.after_tool(ran.call, ran.result, cancelled)
        return ran if result is ran.result else attrs.evolve(ran, result=result)

class _UsageMeter:
    """Adds up the usage and cost and counts the turns of one run (for runs that end in
    an exception). The cost is unknown (``None``) once one call had no price."""

    __slots__ = ("cost", "turns", "usage")

    def __init__(self, cost: float | None = 0.0) -> None:
        self.usage = Usage()
        self.turns = 0
        self.cost = cost

    def _add(self, cost: float | None) -> None:
        self.cost = None if self.cost is None or cost is None else self.cost + cost

    def __call__(self, envelope: Envelope) -> None:
        if isinstance(envelope.event, LlmEnd):
            self.usage = self.usage + envelope.event.result.usage
            self._add(envelope.event.cost_usd)
        elif isinstance(envelope.event, CompressEnd):
            self.usage = self.usage + envelope.event.usage
            if envelope.event.summary_chars or envelope.event.usage != Usage():
                self._add(envelope.event.cost_usd)
        elif isinstance(envelope.event, TurnStart):
            self.turns = envelope.event.turn


class _RunWriter:
    """The run's writer around the store's: it never fails a run. An unwritable session
    dir, a full disk or an unreachable database is logged once, and the run goes on
    without its transcript; a :class:`StaleWriter` (the session was claimed by another
    writer) stops the writes and cancels the run, and :meth:`Agent.run` raises it."""

    def __init__(self, inner: TranscriptWriter, cancel: Callable[[], None] | None) -> None:
        self.inner = inner
        self._cancel = cancel
        self.failed = False
        self.stale: StaleWriter | None = None

    @property
    def location(self) -> str:
        return self.inner.location

    def _failure(self, exc: BaseException) -> None:
        if self.failed:
            return
        self.failed = True
        if isinstance(exc, StaleWriter):
            self.stale = exc
            log.error("session %s: %s; stopping the run", self.inner.session_id, exc)
            if self._cancel is not None:
                self._cancel()
            return
        log.warning("session persistence failed (%s); continuing without transcript", exc)

    def append(self, kind: str, **fields: Any) -> None:
        if self.failed:
            return
        try:
            self.inner.append(kind, **fields)
        except OSError as exc:  # a file's, or a store's (StoreError)
            self._failure(exc)

    def message(self, message: Message, **extra: Any) -> None:
        self.append("message", message=serialization.message_to_dict(message), **extra)

    def compact(self, messages: Sequence[Message], **extra: Any) -> None:
        self.append("compact", messages=[serialization.message_to_dict(m) for m in messages],
                    **extra)

    async def flush(self) -> bool:
        """Wait until every record so far is stored; whether they all were."""
        if self.failed:
            return False
        try:
            if isinstance(self.inner, SessionWriter):
                self.inner.flush()  # a file's flush: nothing to wait for off the loop
            else:
                await self.inner.aclose()  # stores it all; the writer stays usable
        except OSError as exc:
            self._failure(exc)
        return not self.failed

    async def aclose(self) -> None:
        try:
            await self.inner.aclose()
        except OSError as exc:  # a file's, or a store's (StoreError)
            self._failure(exc)


def _event_recorder(writer: _RunWriter) -> Callable[[Envelope], None]:
    def record(envelope: Envelope) -> None:
        if isinstance(envelope.event, _RECORDED_EVENTS):
            event = serialization.event_to_dict(envelope.event)
            writer.append("event", seq=envelope.seq, event=event)

    return record

