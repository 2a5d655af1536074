"""The ``lich_*`` hook specifications. Their docstrings are the plugin reference.

Rules that hold for every hook:

* Arguments are passed by keyword. An implementation may accept *fewer*
  arguments than the spec names (it opts in to what it needs); it may not ask
  for one the spec lacks — that plugin then fails to load (phase ``validate``).
  Specs grow only by adding arguments.
* An implementation may be ``def`` or ``async def``; lich awaits what needs
  awaiting. A plain ``def`` implementation of a run-time hook (every hook
  called under a deadline: ``lich_run_start``, ``lich_before_model_call``, the
  tool-call and approval hooks, ``lich_run_end``, ``lich_shutdown``) runs in a
  worker thread, so a slow one neither blocks the event loop nor escapes
  ``hook_timeout_s``, unless marked :func:`lich.hooks.runs_inline`;
  ``lich_event``, ``lich_price_call`` and the registration hooks run inline
  (``lich_price_call`` must be a fast plain ``def``).
* Implementations run in pluggy order: the most recently registered plugin
  first, ``tryfirst``/``trylast`` respected. Builtins are registered before
  third-party plugins, so a third-party implementation runs before a builtin.
* How lich calls a hook (the answers it accepts, fail open or closed, its
  deadline, the wording of its reports) is the hook's row in
  :mod:`lich.plugins.policy`: a new hook is its spec here and one row there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lich.hooks import hookspec

if TYPE_CHECKING:
    import click

    from lich.config import LichConfig, ProviderConfig
    from lich.events import ApprovalResolved, Envelope
    from lich.hooks import (
        Approval,
        ApprovalRequest,
        Ask,
        Block,
        Compression,
        FollowUp,
        InstructionSection,
        PromptEdit,
        Rewrite,
        RunInfo,
        RunOutcome,
        Stop,
    )
    from lich.plugins.host import PluginHost
    from lich.processes import ProcessRunner
    from lich.providers import ProviderRegistry
    from lich.sessions import SessionStore
    from lich.settings import ConfigTables
    from lich.slash import SlashRegistry
    from lich.tools import ToolRegistry
    from lich.types import (
        ChatFn,
        Message,
        Provider,
        ToolCall,
        ToolDefinition,
        ToolResult,
        Usage,
    )


# --------------------------------------------------------------------------
# A plugin's own hooks and tables
# --------------------------------------------------------------------------


@hookspec(historic=True)
def lich_add_hookspecs(host: PluginHost) -> None:
    """Add this plugin's own hook specifications, for other plugins to implement.

    :param host: call ``host.add_hookspecs(module_or_class)`` with the module (or
        class) holding the specs, each a function marked ``@lich.hooks.hookspec``
        and named ``lich_*``, its docstring the hook's reference; a
        ``HOOK_POLICIES`` tuple beside them (rows of
        :mod:`lich.plugins.policy`) says how the host's one caller calls each.
        The plugin then calls its hooks itself: ``host.call_hook`` /
        ``host.call_hook_sync`` for a hook with a row,
        :meth:`lich.plugins.PluginHost.register_into` for a registration hook
        filling a :class:`lich.registry.Registry`, ``host.pm.hook.<name>(...)``
        for a plain one.

    Called once, as the plugin is registered (a pluggy *historic* hook, as
    pytest's ``pytest_addhooks``). Load order does not matter: a plugin listed
    before the one whose hook it implements is checked against the spec when the
    spec arrives, at the end of loading; an implementation of a hook no loaded
    plugin specifies fails its plugin then (phase ``validate``, naming the
    hook). A spec name taken already (by lich or another plugin) fails the
    plugin adding it (phase ``register``). The builtin ``gateway`` plugin adds
    ``lich_register_gateway_adapters`` and ``lich_make_bus`` this way;
    ``lich plugins`` shows which plugin added which spec.
    """


@hookspec
def lich_register_config_tables(tables: ConfigTables) -> None:
    """Claim the top-level config tables this plugin reads.

    :param tables: call ``tables.claim(name, SettingsClass)`` for each
        ``[name]`` table (a frozen attrs class, built with
        :func:`lich.settings.structure_settings`); ``kind=`` claims a table only
        for one value of its ``kind`` key (``[bus] kind = "nats"``), so that
        several plugins can share a table name.
    :return: nothing.

    A claimed table is checked with its settings class by ``lich config
    validate`` and before any run (every problem with its ``$.name.key``
    path), shown with its defaults by ``lich config show`` and written into
    the template by ``lich config init`` — for builtin and third-party
    plugins alike. A top-level table no loaded plugin claims is a
    configuration error, with the closest known name and, when an installed
    plugin that is not enabled would claim it, that plugin's name. The plugin
    reads its values with ``config.table(name)`` in any hook given the config.

    Called once per plugin host, after every plugin of the config is loaded.
    A table (or kind) claimed twice keeps the first claim; the later one is a
    warning on that plugin's load report. If this hook raises, the plugin is
    unloaded whole.
    """


# --------------------------------------------------------------------------
# Registration: called while an Agent (or the CLI, or the gateway) is assembled
# --------------------------------------------------------------------------


@hookspec
def lich_register_tools(
    registry: ToolRegistry, config: LichConfig, runner: ProcessRunner
) -> None:
    """Add tools to the agent.

    Fires once per agent assembly, after every plugin of the config is loaded.

    :param registry: call ``registry.register(tool)`` for each :class:`lich.Tool`.
        A tool whose name is taken is reported on the later plugin's load report
        (``duplicate_tool: <name> (already registered by <plugin>); skipped``)
        and skipped; the first registration wins.
    :param config: the effective configuration (``config.tools`` holds the
        ``[tools.<name>]`` tables, ``config.table(name)`` a plugin's own ``[name]``).
    :param runner: the agent's :class:`lich.processes.ProcessRunner` (the answer of
        ``lich_make_process_runner``): a plugin that starts processes while it
        registers (the MCP plugin's stdio servers) starts them through it. Tools
        get the same runner at call time as ``ctx.process_runner``.
    :return: nothing. ``tools_enabled`` / ``tools_disabled`` are applied to
        every registered tool afterwards, plugin tools included.

    If this hook raises, the plugin is unloaded whole: the tools it registered
    before raising are removed too.
    """


@hookspec(firstresult=True)
def lich_make_process_runner(config: LichConfig) -> ProcessRunner | None:
    """Return the :class:`lich.processes.ProcessRunner` every process of a tool and
    every stdio MCP server is started through.

    :param config: the effective configuration (a sandbox plugin reads its own
        table from it).
    :return: a runner, or ``None`` to let the next implementation decide. With no
        answer, :data:`lich.processes.DIRECT` runs every launch as given.

    What goes through the runner: the ``terminal`` tool's command, the builtin
    tools' helper programs (``grep_files``' worker, ``disk_usage``'s ``du``),
    stdio MCP servers, and every process a third-party tool starts through
    ``ctx.process_runner``. Each start is a :class:`lich.processes.Launch`
    (argv, env, cwd, inherited descriptors, ``kind`` and ``owner``); the runner's
    ``launch(spec)`` context yields the launch to really start — a sandbox
    rewrites it to ``bwrap … -- <argv>`` — and is left when lich is done with
    the process. An exception raised there fails that start (a tool error, a
    failed MCP server), so a sandbox that cannot start fails closed.

    ``firstresult``: the first non-``None`` answer wins. Called once per agent
    assembly (and once per ``lich tools`` listing, which starts MCP servers),
    before ``lich_register_tools``. A ``ConfigError`` raised here is reported as
    it is; anything else is a configuration error naming the plugin. An answer
    without a callable ``launch`` fails its plugin (phase ``register``) and the
    next implementation decides.

    Example::

        import contextlib
        import attrs
        from lich import hookimpl

        class Wrapped:
            @contextlib.asynccontextmanager
            async def launch(self, spec):
                yield attrs.evolve(spec, argv=("nice", "-n", "10", *spec.argv))

        @hookimpl
        def lich_make_process_runner(config):
            return Wrapped()
    """


@hookspec
def lich_register_providers(registry: ProviderRegistry) -> None:
    """Add provider kinds.

    :param registry: call ``registry.register(kind, factory, defaults=...)``;
        ``factory`` takes a :class:`lich.config.ProviderConfig` and returns a
        :class:`lich.types.Provider`. ``defaults`` is a
        :class:`lich.providers.ProviderDefaults`: the kind's well-known
        ``base_url``, the ``key_env`` its key is read from when the config names
        none, and the ``key_hosts`` that default key may be sent to (the host of
        ``base_url`` unless given). The factory receives the config with those
        defaults applied: a ``base_url`` the config left out is the default, and
        ``api_key_env`` is the default variable only when the endpoint is one of
        ``key_hosts`` — a key the config did not name never goes to another host.
        A kind registered twice is reported
        (``duplicate_provider_kind: <kind> (already registered by <plugin>);
        skipped``) and the later one skipped.
    :return: nothing.

    A ``providers`` entry without ``kind`` gets the first kind of the provider
    plugin listed first in ``plugins``. One whose ``kind`` no loaded plugin
    registered is a configuration error naming the plugin to enable. Every
    registered ``key_env`` counts as a secret: tools never show it to a model.
    """


@hookspec(firstresult=True)
def lich_make_router(providers: list[Provider], config: LichConfig) -> ChatFn | None:
    """Return the :data:`lich.types.ChatFn` the loop calls, walking ``providers``.

    :param providers: the configured providers, built, in config order.
    :param config: the effective configuration.
    :return: a ``ChatFn`` (an async callable), or ``None`` to let the next
        implementation decide.

    ``firstresult``: the first non-``None`` answer wins. The ``failover``
    plugin implements it (``trylast``), so a third-party router takes over by
    implementing it too. With no implementation and a single provider, that
    provider is called directly; with several it is a configuration error. An
    answer that is not callable fails its plugin (phase ``register``, on its
    load report) and the next implementation decides.
    """


@hookspec(firstresult=True)
def lich_make_session_store(config: LichConfig) -> SessionStore | None:
    """Return the transcript store: where the agent, ``lich sessions``,
    ``--resume``, the TUI and the gateway keep and find sessions.

    :param config: the effective configuration; ``config.table("session_store")`` is
        the ``[session_store]`` table, whose ``kind`` says which store is wanted (a
        store plugin claims its kind: ``tables.claim("session_store", Settings,
        kind="mine")``, as lich claims ``"jsonl"`` for its own store).
    :return: a :class:`lich.sessions.SessionStore`, or ``None`` to let the
        next implementation decide (a plugin answers only for its own ``kind``).

    Asked only when ``kind`` is set and is not ``"jsonl"``: no table (or
    ``kind = "jsonl"``) is lich's JSONL store under ``session_dir``, and
    ``lich sessions`` then loads no plugin. ``firstresult``: the first
    non-``None`` answer wins; a ``kind`` no implementation answers is a
    configuration error naming it. The builtin ``postgres`` plugin answers
    ``kind = "postgres"``. Called once per agent (and once per ``lich
    sessions`` command), on the thread assembling it: return quickly and
    connect on first use. A ``ConfigError`` raised here
    is reported as it is; anything else is a configuration error naming the
    plugin. An answer that is not a store (lacks a method of the interface)
    fails its plugin (phase ``register``) and the next implementation decides.
    Every store must pass ``lich.testing.contracts.SessionStoreContract``.
    """


@hookspec
def lich_check_config(config: LichConfig) -> None:
    """Check this plugin's settings in ``config``; raise if they are wrong.

    :param config: the effective configuration (``config.table(name)`` for the
        tables the plugin claims, ``config.tools``).
    :raises lich.config.ConfigError: listing every problem as ``"$.path: message"``
        (:func:`lich.settings.structure_settings` builds exactly that).
    :return: nothing.

    Fires when an agent is assembled (before any model call) and in ``lich
    config validate``, so a config a run would reject is never reported as
    valid. Every implementation is called and all their problems are reported
    together. An implementation that raises anything but ``ConfigError`` fails
    its plugin (phase ``validate``), which is unloaded.
    """


@hookspec
def lich_register_slash_commands(registry: SlashRegistry) -> None:
    """Add slash commands to the interactive front ends: ``lich chat``, the TUI
    and the gateway's chats.

    :param registry: call ``registry.register(command)`` with a
        :class:`lich.slash.SlashCommand` — its name, one line of help, an
        optional argument hint, the front ends that offer it (all three by
        default) and its ``run`` function. ``run(context)`` gets a
        :class:`lich.slash.SlashContext` (the argument, the front end, the
        config, the session id) and returns the text to show, or ``None``; it
        may be ``async def``.
    :return: nothing.

    Slash commands are handled by the front end and never sent to the model.
    ``/help`` in each front end lists every command it offers, builtin and
    plugin alike, from this one registry; the builtin commands (``/help``,
    ``/model``, ``/new``, ...) register through this hook too, so a plugin's
    command whose name or alias is taken is reported on the plugin's load
    report (``slash_command_taken``) and left out — a plugin cannot replace
    a builtin command. Called once per front end as it starts. A ``run`` that
    raises is shown as an error line (``/name failed: ...``) and the front end
    goes on. If this hook raises, the plugin is unloaded whole.
    """


@hookspec
def lich_register_commands(cli: click.Group) -> None:
    """Add click commands to the ``lich`` command line.

    :param cli: the root ``click.Group``; call ``cli.add_command(...)``.

    Fires when the CLI is built. A plugin whose hook raises is reported in
    ``lich plugins`` and its commands are left out; ``lich`` stays usable.
    """


# --------------------------------------------------------------------------
# Run time
# --------------------------------------------------------------------------


@hookspec
def lich_run_start(run: RunInfo) -> None:
    """A run begins: before the first model call.

    :param run: run id, session id, the input, the work dir, the config and the
        run's tool registry (``run.tools``).

    Observers: every implementation is called; one that raises or exceeds
    ``hook_timeout_s`` is logged and skipped.
    """


@hookspec(firstresult=True)
def lich_price_call(
    provider: ProviderConfig | None, model: str, usage: Usage, config: LichConfig
) -> float | None:
    """The price of one model call, in US dollars.

    :param provider: the configured provider that answered, resolved as it was
        used (its ``kind``, ``name``, ``base_url`` with the kind's default
        applied, the configured ``model``); ``None`` when the answer names no
        configured provider (a chat function given to :class:`lich.Agent`).
    :param model: the model the answer names (the provider's own id, e.g.
        ``gpt-4o-2024-08-06``), else the configured one.
    :param usage: the call's tokens, cache and reasoning breakdowns included.
    :param config: the agent's effective configuration (its own price table, if any).
    :return: the cost, or ``None`` when this implementation cannot price the call
        (the next one is asked). ``None`` from all means *cost unknown*: the
        events carry ``cost_usd: null`` and the run's total is unknown too.

    Called inline after every model call (the turn's and the compression
    summarizer's) and before ``llm_end`` is emitted, so the price travels on
    the event to every observer, the transcript and ``--json``. It must be a
    plain, fast ``def`` (no I/O per call). ``firstresult``: the first number
    wins, so a third-party plugin with its own price list overrides the builtin
    ``prices`` plugin. An implementation that raises or returns anything but a
    finite number ``>= 0`` or ``None`` is logged and skipped.

    Why a hook and not an event observer: the price must be *on* ``llm_end``
    and ``run_end`` (and checked by budgets before the next call), and only the
    core can put it there; the core itself knows no prices and no providers.
    """


@hookspec(firstresult=True)
def lich_before_model_call(
    run: RunInfo, turn: int, usage: Usage, cost_usd: float | None
) -> Stop | None:
    """A turn is about to call the model: let it, or end the run on a budget.

    :param run: the run.
    :param turn: the turn about to start (1 for the first model call).
    :param usage: the tokens the run has used so far (compression included).
    :param cost_usd: the run's cost so far; ``None`` when a call so far had no
        known price (0.0 before the first call).
    :return: ``None`` to go on, or :class:`lich.Stop` ``(reason)`` to end the
        run with ``stopped_reason="budget"`` before the turn starts.

    Checked at every turn boundary, before the turn's compression and model
    call — never during a call or a stream, so a stopped run's transcript ends
    on a complete turn. The run then emits ``budget_exhausted`` (with the
    ``reason`` and the plugin's name) and ``run_end``; ``lich TASK`` exits 1.
    The builtin ``budgets`` plugin implements ``max_cost_usd`` and
    ``max_total_tokens`` with it.

    ``firstresult``: implementations run one at a time in pluggy order until
    one stops the run. One that raises, exceeds ``hook_timeout_s`` or returns
    anything else is logged and skipped (fail open: a broken observer must not
    end every run; a budget plugin that must fail closed catches its own
    errors and returns a ``Stop``).
    """


@hookspec
def lich_before_tool_call(call: ToolCall, run: RunInfo) -> Block | Ask | Rewrite | None:
    """A tool call is about to run. Allow it, ask a person, rewrite its arguments,
    or block it.

    :param call: the call, with the arguments as rewritten by earlier hooks.
    :param run: the run it belongs to; ``run.tool(call.name)`` is the tool the call
        runs (``None`` if no tool has that name).
    :return: ``None`` to allow, :class:`lich.Rewrite` ``(args)`` to replace the
        arguments, :class:`lich.Ask` ``(reason)`` to run it only if a person
        approves, or :class:`lich.Block` ``(reason)`` to refuse.

    Composition: implementations run one at a time in pluggy order; each sees
    the arguments as rewritten so far. Precedence across them:

    1. The first ``Block`` wins over everything: the chain stops, the tool does
       not run, no one is asked, the after-hooks do not run, and the model
       receives ``blocked_by_plugin: <reason>``.
    2. Otherwise any ``Ask`` means the call needs approval. The chain goes on
       after an ``Ask`` (a later hook may still block or rewrite), and when it
       ends the approver (:func:`lich_request_approval`) is asked once, about
       the final arguments, with every ``Ask`` reason.
    3. ``Rewrite`` answers compose: each replaces the arguments the next hook
       sees.

    Then :func:`lich_check_tool_call` judges the final arguments, before the
    person is asked (no one is asked about a call a guard refuses) and again
    on arguments the person edited. An implementation that raises, exceeds
    ``hook_timeout_s`` or returns anything else blocks the call (fail closed)
    with ``blocked_by_plugin: hook_error (<plugin>): <message>``; so does one
    that changes ``call.args`` in place (it gets its own deep copy, so the
    change never reaches the tool; return a ``Rewrite``). A later hook may
    still rewrite what this one allowed: a guard that must judge the final
    arguments implements :func:`lich_check_tool_call` instead. The plugins
    that rewrote or blocked are recorded on the ``tool_call_end`` event and in
    the transcript; approval requests and answers as ``approval_requested``
    and ``approval_resolved`` events.

    A hook that wants a human must answer ``Ask``, not wait for one: it runs
    under ``hook_timeout_s``, the approver under ``approval_timeout_s``.
    """


@hookspec(firstresult=True)
def lich_request_approval(
    call: ToolCall, run: RunInfo, reason: str, request: ApprovalRequest
) -> Approval | None:
    """Ask a person whether ``call`` may run: the front end's approver.

    :param call: the call, with the arguments the tool would receive.
    :param run: the run it belongs to; ``run.tool(call.name)`` is the tool the call
        runs (``None`` if no tool has that name).
    :param reason: why approval is needed (the ``Ask`` reasons, joined).
    :param request: everything to show: the tool, a preview (a diff for a file
        write), the rules a ``session``/``always`` approval grants, the request's
        short ``id`` and its timeout.
    :return: an :class:`lich.Approval`, or ``None`` when this implementation
        cannot ask (no terminal, not its conversation): the next one is tried.

    ``firstresult``: the first non-``None`` answer decides. The CLI, ``lich
    chat``, the TUI and the gateway each register one; ``--yes`` registers one
    that approves every ``Ask`` (a ``Block`` never reaches it). With no
    answer at all the call is denied: ``approval_unavailable: no one is there
    to approve this call; ...`` (:data:`lich.executor.APPROVAL_UNAVAILABLE`).

    It may take as long as a person does: ``approval_timeout_s`` (default
    300; 0 waits for ever) bounds it, not ``hook_timeout_s``, and the call is
    denied when it passes (``approval_timeout: ...``). A cancelled run stops
    waiting at once. An implementation that raises, or returns anything else,
    denies the call (fail closed). A plain ``def`` implementation runs in a
    worker thread.

    What the answer does: a denial gives the model ``approval_denied:
    <message>``; an approval with ``args`` runs the edited arguments after they
    pass the tool's schema and :func:`lich_check_tool_call`; ``session`` and
    ``always`` approvals grant the request's ``rules``, which the plugin that
    offered them keeps (:func:`lich_approval_resolved`): the builtin
    ``approvals`` plugin answers the requests they cover itself, first
    (``approver="session"``), so no one is asked again.
    """


@hookspec
def lich_prepare_approval(request: ApprovalRequest, run: RunInfo) -> ApprovalRequest | None:
    """Complete an approval request before anyone is asked: what a ``session`` or
    ``always`` approval grants, a preview of what the call would do.

    :param request: the request so far: its ``id``, ``call``, ``reason``,
        ``asked_by``, ``tool`` and ``timeout_s`` are set by lich; ``rules`` and
        ``preview`` are empty unless an earlier implementation filled them.
    :param run: the run the call belongs to; ``run.work_dir`` is where it runs.
    :return: the request with more in it (``attrs.evolve(request, rules=...,
        preview=...)``), or ``None`` to leave it as it is.

    Called once per request, whichever plugin asked, before ``approval_requested``
    is emitted: the event, the approvers and :func:`lich_approval_resolved` all
    see the request as the last implementation left it. Chained: each
    implementation gets the request the one before returned. An answer that
    changes the request's ``id``, ``call`` or ``tool`` (what is asked about, not
    what is shown) is refused and skipped, as is one that raises, exceeds
    ``hook_timeout_s`` or answers anything else: the request is then shown as it
    was (fail open: it only informs the person). The builtin ``approvals``
    plugin fills ``rules`` (its allow rules, ``terminal(git status*)``) and
    ``preview`` (the tool's own, a diff for a file write); without any
    implementation a request offers no rules, and a ``session`` answer covers
    that call only.
    """


@hookspec
def lich_approval_resolved(request: ApprovalRequest, resolved: ApprovalResolved,
                           run: RunInfo) -> None:
    """An approval request was resolved: what a plugin that asked keeps of the answer.

    :param request: the request as the approver saw it (its ``rules`` are the
        :attr:`lich.Ask.rules` of the plugins that asked).
    :param resolved: the ``approval_resolved`` event just emitted: ``approved``,
        ``scope`` (``once``, ``session``, ``always``), ``approver``, the edited
        ``args`` that run, if any.
    :param run: the run the call belongs to (``run.session_id``).
    :return: nothing.

    Called once per request, after its ``approval_resolved`` event and before the
    call runs — also for a denial and for a request no approver answered. The
    builtin ``approvals`` plugin keeps the ``rules`` of a ``session`` or
    ``always`` approval here, for the rest of the session, and answers later
    requests they cover itself (``approver="session"``). Observers: every
    implementation is called; one that raises or exceeds ``hook_timeout_s`` is
    logged and skipped.
    """


@hookspec
def lich_check_tool_call(call: ToolCall, run: RunInfo) -> Block | Ask | None:
    """The final check of a tool call: allow it, ask a person, or block it, on the
    arguments the tool will run with.

    :param call: the call with its final arguments, after every
        ``lich_before_tool_call`` rewrite.
    :param run: the run it belongs to; ``run.tool(call.name)`` is the tool the call
        runs (``None`` if no tool has that name).
    :return: ``None`` to allow, :class:`lich.Ask` ``(reason)`` to run it only if a
        person approves, or :class:`lich.Block` ``(reason)`` to refuse.

    Runs after the whole ``lich_before_tool_call`` chain, and only if no
    before-hook blocked; it cannot rewrite. This is the phase for guards and
    for approval policies: a before-hook, even a ``trylast`` one, may be
    followed by another ``trylast`` plugin that rewrites what it allowed, while
    nothing changes the arguments after this phase — the tool runs with exactly
    the arguments every check saw (or, after an approval, the ones the person
    edited, which are checked again). (A separate phase rather than re-running
    approving before-hooks after each rewrite: that re-runs side effects, need
    not settle, and still leaves the last rewriter unchecked.)

    Composition: every implementation runs, one at a time, each on the same
    arguments; the first ``Block`` stops the chain and the model receives
    ``blocked_by_plugin: <reason>``. An ``Ask`` here joins the before-hooks'
    ones: the person is asked once, after this phase (the same plugin giving
    the same reason in both phases is asked about once). On arguments a person
    edited, only a ``Block`` counts — that person has just said yes. One that
    raises, exceeds ``hook_timeout_s`` or returns anything else (a ``Rewrite``
    included) blocks the call (fail closed). The ``call`` handed to a hook is
    its own copy: changing ``call.args`` in place changes nothing that runs,
    and is refused as a failure (in both phases; a change is only ever a
    ``Rewrite``).
    """


@hookspec
def lich_after_tool_call(call: ToolCall, result: ToolResult, run: RunInfo) -> ToolResult | None:
    """A tool call finished (also a failed or timed-out one; not a blocked one).

    :param call: the call with the arguments the tool actually received.
    :param result: the result so far (possibly replaced by an earlier hook).
    :param run: the run it belongs to; ``run.tool(call.name)`` is the tool the call
        runs (``None`` if no tool has that name).
    :return: ``None`` to keep the result, or a :class:`lich.ToolResult` to
        replace it for the model and for later hooks.

    Composition: one at a time in pluggy order. An implementation that raises
    or times out is logged and skipped (fail open). Each gets its own copy of
    ``call``: changing ``call.args`` in place is ignored with a warning.
    """


@hookspec
def lich_run_end(run: RunInfo, outcome: RunOutcome) -> None:
    """A run ended. Always called: after a final answer, a budget stop, a
    cancellation (``stopped_reason="aborted"``) and a failure
    (``stopped_reason="error"``, the exception is re-raised afterwards).

    :param run: the run that ended.
    :param outcome: stopped reason, turns used, usage, the final message.

    Observers: one that raises is logged and skipped.
    """


@hookspec
def lich_shutdown(registry: ToolRegistry) -> None:
    """An agent is closing: release what this plugin opened for it (server
    processes, connections, threads).

    :param registry: the tool registry this plugin filled in
        ``lich_register_tools`` for that agent — which agent is closing, when one
        plugin host assembles several (``/model`` in ``lich chat`` and the TUI
        builds a new agent before the old one is closed).
    :return: nothing.

    Called by :meth:`lich.Agent.aclose` (once per agent; the CLI, ``lich chat``,
    the TUI and the gateway close their agents), and by the commands that fill a
    registry without running an agent (``lich tools``, ``lich plugins``, ``lich
    config validate``). Observers: every implementation is called; one that
    raises or exceeds ``hook_timeout_s`` is logged and skipped. A plain ``def``
    implementation runs in a worker thread, so it may block while it waits.

    A hook rather than an async context on the agent: agents are built
    synchronously (before the event loop of ``lich run``, inside the TUI's or the
    gateway's) and every front end already closes them with ``aclose``, so the
    hook reaches every place an agent ends without changing how one is made. A
    plugin should not count on it alone — a script may drop an agent unclosed —
    and also clean up when the registry is garbage-collected (``weakref.finalize``).
    """


@hookspec
def lich_event(event: Envelope, run: RunInfo) -> None:
    """Every agent event, for audit and telemetry plugins.

    :param event: an :class:`lich.events.Envelope` (``run_id``, ``session_id``,
        ``seq``, ``ts`` and the ``event`` itself; ``lich.serialization.
        envelope_to_dict`` gives its JSON form).
    :param run: the run the event belongs to (its config, its settings, the
        input as the run took it) — so a plugin keeps per-run state keyed by
        ``run.run_id`` instead of in a module global. An implementation that
        takes only ``event`` keeps working (it is called with what it names).

    Called synchronously as the event happens; keep it fast. An ``async def``
    implementation is scheduled and awaited before the run returns. One that
    raises is logged and skipped (once per plugin and run at warning level).

    Example, an audit line per tool call with the run's work dir::

        @hookimpl
        def lich_event(event, run):
            if event.type == "tool_call_end":
                log.info("%s in %s: %s", event.event.call.name, run.work_dir,
                         event.event.result.ok)
    """


@hookspec
def lich_instructions(run: RunInfo) -> list[InstructionSection] | InstructionSection | None:
    """Sections of the system prompt for this run (instruction files, a skills
    catalog, a plugin's own rules).

    :param run: the run about to start (``run.input`` is the user's message as
        ``lich_user_prompt`` left it; ``run.work_dir`` where instruction files
        are looked for).
    :return: an :class:`lich.InstructionSection`, a list of them, or ``None``.

    Called once per run, before its first event (``run_start``), for every
    implementation in pluggy order. The core assembles the system prompt from
    the config's ``system_prompt`` (or the default one) followed by every
    section — the cacheable ones first, in the order given, then the others —
    separated by blank lines, under one budget, ``instructions_budget_tokens``
    (estimated as :func:`lich.context.estimate_text_tokens` does). Over it,
    sections are cut whole, the lowest ``priority`` first (of equal ones, the
    later first), until the rest fits; ``system_prompt`` itself is never cut.
    Nothing is silent: ``run_start`` lists every section (``instructions``:
    source, priority, tokens, kept), and each cut has an ``instructions_cut``
    event (shown as a progress line, in ``--json`` and recorded in the
    transcript). The assembled prompt is the run's system message, which
    compression never summarises: it is put back verbatim after every
    compression. An implementation that raises, exceeds ``hook_timeout_s`` or
    answers anything else is logged and left out (fail open: the rest of the
    prompt stands).

    Example, a house rule that yields to everything else::

        @hookimpl
        def lich_instructions(run):
            return InstructionSection("Answer in British English.", source="house",
                                      priority=-10)
    """


@hookspec
def lich_user_prompt(run: RunInfo, message: str) -> PromptEdit | Block | None:
    """What the user submitted, before the run takes it: rewrite it, add context
    to it, or refuse it.

    :param run: the run about to start (``run.input`` is the message as submitted).
    :param message: the message as the implementations before this one left it.
    :return: ``None`` to keep it, :class:`lich.PromptEdit` ``(text=...,
        context=...)`` to replace it and/or add a paragraph after it, or
        :class:`lich.Block` ``(reason)`` to refuse it.

    Called for every message a front end hands to :meth:`lich.Agent.run` —
    ``lich TASK``, ``lich chat``, the TUI, the gateway and the cluster's
    workers alike — once per run, before ``lich_instructions`` and before the
    message is recorded (not for :meth:`lich.Agent.continue_turn`, whose
    message was taken before). Implementations run one at a time in pluggy
    order, each on the message as edited so far; the first ``Block`` stops the
    chain. The edited message is what the model gets and what the transcript
    records. A refused message is not recorded and the model is not called:
    the run emits ``prompt_blocked`` (``reason``, ``blocked_by``) and ends with
    ``stopped_reason="blocked"`` (``lich TASK`` exits 1). An implementation
    that raises, exceeds ``hook_timeout_s`` or answers anything else blocks
    the message (fail closed) with ``hook_error (<plugin>): <message>``.

    Example, refusing pasted keys::

        @hookimpl
        def lich_user_prompt(message):
            if "sk-" in message:
                return Block("the message holds what looks like an API key")
    """


@hookspec
def lich_prepare_tools(
    run: RunInfo, turn: int, tools: tuple[ToolDefinition, ...]
) -> list[ToolDefinition] | None:
    """The tool definitions the model is offered this turn: filter, rename or
    annotate them.

    :param run: the run.
    :param turn: the turn about to call the model (1 for the first).
    :param tools: the definitions as the implementations before this one left
        them (the first gets every registered tool of the run).
    :return: the definitions to offer instead, or ``None`` to keep ``tools``.

    Called before every model call, after the turn's budget check. A call of a
    name not offered this turn is answered ``unknown_tool: <name> (not offered
    this turn)`` without running. To rename, offer
    ``definition.renamed("new_name")``: a call of the new name runs the
    registered tool, every hook sees the call under the tool's own name
    (``run.tool(call.name)`` finds it), and the transcript keeps the name the
    model used. To annotate, offer ``attrs.evolve(definition,
    description=...)``. A definition cannot widen anything: a name that is not
    a registered tool is offered, but its calls answer ``unknown_tool``.
    Implementations run one at a time in pluggy order. One that raises,
    exceeds ``hook_timeout_s`` or answers anything else is logged and skipped
    (fail open: what a turn offers is not a guard — a tool the run must never
    call is refused in :func:`lich_check_tool_call` or left out with
    ``tools_disabled``). Keep it cheap: it runs every turn.

    Example, no shell after the third turn::

        @hookimpl
        def lich_prepare_tools(turn, tools):
            return [t for t in tools if t.name != "terminal"] if turn > 3 else None
    """


@hookspec
def lich_before_compress(
    run: RunInfo, messages: tuple[Message, ...]
) -> Compression | Block | None:
    """A compression is due (the context estimate crossed ``compress_threshold``):
    observe it, veto it, or shape it.

    :param run: the run.
    :param messages: the conversation as it is, system prompt included.
    :return: ``None`` to let it happen as configured, :class:`lich.Compression`
        ``(keep_recent=..., focus=...)`` to keep more or fewer recent messages
        verbatim or tell the summariser what to keep, or :class:`lich.Block`
        ``(reason)`` to skip it.

    ``firstresult``-like: implementations run one at a time in pluggy order
    until one answers something other than ``None``. A veto emits
    ``compress_skipped`` (``reason``, ``skipped_by``) and the compression is
    not tried again for three turns (the run may then overflow the model's
    window: the veto is the plugin's responsibility). The summariser is the
    model of the ``compress`` role (``[models.compress]``, else the run's
    model). The system prompt is never summarised. An implementation that
    raises, exceeds ``hook_timeout_s`` or answers anything else is logged and
    skipped (fail open).

    Example, keep more of a long refactoring verbatim::

        @hookimpl
        def lich_before_compress(messages):
            return Compression(keep_recent=16, focus="the files changed so far")
    """


@hookspec
def lich_after_final(run: RunInfo, outcome: RunOutcome) -> FollowUp | None:
    """The model gave a final answer: accept it, or have the run go on.

    :param run: the run.
    :param outcome: the run so far (``stopped_reason`` ``final``, the answer in
        ``outcome.final``, turns used, usage and cost).
    :return: ``None`` to accept, or :class:`lich.FollowUp` ``(prompt)`` to go on
        with ``prompt`` as the next user message.

    Asked after every final answer while the turn budget (``max_turns``) has a
    turn left: the follow-ups of a run are bounded by it, and so by every
    budget checked at turn boundaries. A follow-up emits ``run_continued``
    (``turn``, ``prompt``, ``continued_by``), is recorded as a user message,
    and the loop goes on with the next turn. Implementations run one at a time
    in pluggy order until one answers ``FollowUp``. One that raises, exceeds
    ``hook_timeout_s`` or answers anything else is logged and skipped (fail
    open: the answer stands).

    Example, insist on a test run::

        @hookimpl
        def lich_after_final(outcome):
            if outcome.final and "pytest" not in outcome.final.content:
                return FollowUp("Run the tests and report their result.")
    """
