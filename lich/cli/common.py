"""What every command shares: exit codes, error lines, logging, and :func:`assemble`,
the one way a command turns this invocation's settings into a configuration, a loaded
plugin host and an agent.

Public: a plugin's own commands (``lich_register_commands``) use it as the builtin
commands do, with the flags of :mod:`lich.cli.options`::

    from lich.cli.common import CommandError, assemble, echo_error
    from lich.cli.options import config_options, get_settings

    @click.command("ask-twice")
    @config_options
    @click.pass_context
    def ask_twice(ctx):
        try:
            built = assemble(get_settings(ctx))
        except CommandError as exc:
            ctx.exit(exc.report())
        ...

Imported only by commands that run (never by ``lich --version``); the heavy parts
(the agent, providers) are imported inside the functions.
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click
from attrs import frozen

from lich.cli.options import CliSettings
from lich.secrets import redact_urls
from lich.visible import visible

if TYPE_CHECKING:
    from collections.abc import Iterator

    from lich.agent import Agent
    from lich.config import LichConfig, LoadedConfig
    from lich.plugins import LoadReport, PluginHost
    from lich.tools import ToolRegistry
    from lich.trust import ProjectTrust
    from lich.types import ChatFn

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_STOPPED",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "Assembly",
    "CommandError",
    "ask_on_terminal",
    "assemble",
    "check_named_plugins",
    "echo_error",
    "echo_warning",
    "host_for",
    "load_settings_config",
    "named_plugin_failures",
    "quiet_plugin_log",
    "setup_logging",
    "tools_for_run",
    "warn_plugin_failures",
]

EXIT_OK = 0
EXIT_STOPPED = 1  # the run ended on its budget, was aborted, or the model failed
EXIT_USAGE = 2  # bad flags, bad config, plugins failing in strict mode
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
EXIT_TERMINATED = 143  # SIGTERM (128 + SIGTERM)


def echo_error(message: str) -> None:
    """``lich: error: <message>`` on stderr, never wrapped: the message holds paths and
    ``$.path`` problems to copy (a multi-line message keeps its own lines). URLs in it
    lose their credentials (:func:`lich.secrets.redact_urls`)."""
    click.echo(f"lich: error: {visible(redact_urls(message))}", err=True)


def echo_warning(message: str) -> None:
    """``lich: warning: <message>`` on stderr (URLs redacted, as :func:`echo_error`)."""
    click.echo(f"lich: warning: {visible(redact_urls(message))}", err=True)


# ---------------------------------------------------------------- logging

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
           "warning": logging.WARNING, "error": logging.ERROR}


class _CliLogHandler(logging.Handler):
    """One line a record on stderr; through the rich console when one is live,
    so log lines land above a spinner instead of through it."""

    console: Any = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            # A message may quote a model's text, and a URL with a password or a token
            # in it (a bus's servers, a store's DSN, an exporter's endpoint).
            line = visible(redact_urls(self.format(record)))
            console = self.console
            if console is not None and console.is_terminal:
                from rich.text import Text

                console.print(Text(line, style="yellow"), soft_wrap=True)
            else:
                # Looked up at each call: tests (and CliRunner) swap sys.stderr.
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
        except Exception:  # a log line must never break a run
            self.handleError(record)


class _CliFormatter(logging.Formatter):
    """``[lich:<level>] message``; a traceback only at ``debug``."""

    def format(self, record: logging.LogRecord) -> str:
        level = record.levelname.lower()
        line = f"[lich:{'warn' if level == 'warning' else level}] {record.getMessage()}"
        if record.exc_info and record.levelno <= logging.DEBUG:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(level: str | None, console: Any = None, *, service: bool = False) -> None:
    """Send the ``lich`` loggers to stderr at ``level`` (default ``info``).

    :param console: the rich console of the run's output, when there is one.
    :param service: a long-running service's lines (``lich gateway``, ``lich
        worker``): timestamped ``<time> level=<LEVEL> <message>``, with the
        admission id of the message being handled (:mod:`lich.logcontext`),
        instead of ``[lich:<level>] <message>``. The handler is then the root
        logger's, so a plugin's own logger (not under ``lich``) is written the
        same way, at its own level (warnings and above unless it sets one).

    Replaces the handler an earlier call installed, so no line is printed twice.
    """
    logger = logging.getLogger("lich")
    root = logging.getLogger()
    for owner in (logger, root):
        for handler in list(owner.handlers):
            if isinstance(handler, _CliLogHandler):
                owner.removeHandler(handler)
    handler = _CliLogHandler()
    handler.console = console
    if service:
        from lich.logcontext import AdmissionFilter, ServiceFormatter

        handler.setFormatter(ServiceFormatter())
        handler.addFilter(AdmissionFilter())
        root.addHandler(handler)
    else:
        handler.setFormatter(_CliFormatter())
        logger.addHandler(handler)
    logger.setLevel(_LEVELS.get((level or "info").lower(), logging.INFO))


def freeze_startup_heap() -> int:
    """Before a long-running service (``lich gateway``, ``lich worker``) starts serving:
    collect once, then move every object alive now — modules, classes, config, plugins —
    out of the garbage collector's reach (:func:`gc.freeze`); the number frozen.

    Each full collection walks every tracked object: in a gateway under load that was
    7.7 % of its event loop, nearly all of it start-up objects that live as long as the
    process (B3 in docs/performance.md). Objects made later are collected as before.
    """
    import gc

    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


@contextmanager
def quiet_plugin_log() -> Iterator[None]:
    """Silence the plugin host's own load warnings: the CLI reports failures itself
    (once, with a hint), and ``lich --help`` or ``lich plugins`` should not repeat them."""
    logger = logging.getLogger("lich.plugins")
    previous = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(previous)


# ------------------------------------------------------- config and plugins


def load_settings_config(settings: CliSettings, *, with_plugins: bool = True) -> LoadedConfig:
    """:func:`lich.config.load_config` with this invocation's flags.

    An untrusted project config (:mod:`lich.trust`) is loaded without its unsafe keys;
    on a terminal lich first asks whether to trust it (not the ``config`` commands,
    which only show what trust would enable); either way the config files passed over
    and what was ignored are said once per invocation, one line each.

    :raises lich.config.ConfigError: naming the file and the ``$.path``.
    """
    from lich.config import load_config

    def load(trust: bool | None) -> LoadedConfig:
        return load_config(config_path=settings.config_path, trust=trust,
                           flags=settings.flags(with_plugins=with_plugins))

    loaded = load(settings.trust)
    state = loaded.trust
    if (state is not None and not state.trusted and state.ignored and settings.ask_trust
            and not settings.trust_reported and _ask_trust(state)):
        from lich.trust import record_trust

        record_trust(state.project_dir, state.config)
        settings.trust = True
        loaded = load(True)
    if not settings.trust_reported:
        settings.trust_reported = True
        # Once per invocation, however many times the command loads its config.
        for line in (*loaded.warnings, *loaded.notices):
            echo_warning(line)
        if loaded.trust is not None and not loaded.trust.trusted and loaded.trust.ignored:
            echo_warning(loaded.trust.describe())
    return loaded


def ask_on_terminal(question: str) -> str | None:
    """Ask ``question`` on the controlling terminal (``/dev/tty``) and return the line
    typed, without its newline; ``None`` when there is no terminal to ask on (a
    service, CI, a pipe without one) or it closed: the caller decides without asking.

    Not stderr: with ``2>log`` the question would be in the log and lich would wait
    for an answer nobody knows is wanted.
    """
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return None
    try:
        os.write(fd, question.encode("utf-8", "replace"))
        line = bytearray()
        while not line.endswith(b"\n"):
            chunk = os.read(fd, 1)  # a line at a time: the terminal is in line mode
            if not chunk:
                return None  # closed before a line (Ctrl-D): no answer
            line += chunk
    except (OSError, KeyboardInterrupt):
        return None
    finally:
        os.close(fd)
    return line.decode("utf-8", "replace").rstrip("\r\n")


def _ask_trust(state: ProjectTrust) -> bool:
    """Whether the user, asked on the terminal, trusts the project. Asked only when
    stdin is a terminal too (a person is there to answer)."""
    if sys.stdin is None or not sys.stdin.isatty():
        return False
    why = "changed since you trusted it" if state.changed else "not trusted"
    answer = ask_on_terminal(
        f"lich: the project config {state.config} is {why}; trusting "
        f"{state.project_dir} enables: {', '.join(state.ignored)}\n"
        "Trust this project (its plugins and commands run as you)? [y/N] ")
    return (answer or "").strip().lower() in ("y", "yes")


def host_for(settings: CliSettings, config: LichConfig) -> PluginHost:
    """A plugin host with ``config.plugins`` loaded, shared within one invocation."""
    key = (config.work_dir, tuple(config.plugins))
    host = settings.hosts.get(key)
    if host is None:
        from lich.plugins import PluginHost

        host = PluginHost(work_dir=config.work_dir, hook_timeout_s=config.hook_timeout_s)
        with quiet_plugin_log():
            host.load(config.plugins)
        settings.hosts[key] = host
    return host


def warn_plugin_failures(host: PluginHost) -> None:
    """One warning line per plugin that failed to load (the run goes on without it)."""
    for report in host.failures:
        verb = "was skipped" if report.status == "skipped" else "failed to load"
        echo_warning(
            f"plugin {report.entry!r} {verb} ({report.describe_error(at=True)}); "
            "continuing without it (see `lich plugins`)"
        )


def named_plugin_failures(settings: CliSettings, host: PluginHost) -> list[LoadReport]:
    """The reports of the ``--plugin`` entries that did not load (at import, at
    registration or in ``lich_check_config``), in load order."""
    named = set(settings.plugins)
    # The same file or module loaded under another spelling (the config's relative
    # "guard.py" and the command line's absolute path) is skipped as a duplicate: that
    # plugin is loaded, so it is no failure.
    loaded = {r.resolved for r in host.reports if r.ok and r.resolved}
    return [r for r in host.failures if r.entry in named
            and not (r.status == "skipped" and r.resolved in loaded)]


def check_named_plugins(settings: CliSettings, host: PluginHost) -> None:
    """A plugin named on the command line must load: a guard given with ``--plugin``
    that has a typo would otherwise mean no guard at all. Plugins from the config keep
    warn-and-continue (``--strict-plugins`` makes them fatal too).

    :raises CommandError: listing the load report of every failed ``--plugin`` entry.
    """
    failed = named_plugin_failures(settings, host)
    if failed:
        lines = [f"  {r.entry}: {r.status}: {r.describe_error()}" for r in failed]
        raise CommandError(
            "a plugin given with --plugin did not load:\n" + "\n".join(lines)
            + "\n(a --plugin entry must load; `lich plugins --plugin ...` shows its report)"
        )


class CommandError(Exception):
    """A command cannot go on. :meth:`report` prints ``lich: error: <message>`` and
    returns the exit code (``EXIT_USAGE`` unless told otherwise)."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code

    def report(self) -> int:
        """Print the error line; the exit code to leave with."""
        echo_error(str(self))
        return self.code


@frozen
class Assembly:
    """What :func:`assemble` put together for one invocation."""

    loaded: LoadedConfig
    host: PluginHost
    agent: Agent | None

    @property
    def config(self) -> LichConfig:
        """The effective configuration."""
        return self.loaded.config


def assemble(
    settings: CliSettings,
    *,
    config: LichConfig | None = None,
    agent: bool = True,
    console: Any = None,
    service: bool = False,
    chat: ChatFn | None = None,
) -> Assembly:
    """This invocation's settings → the configuration, a loaded plugin host, an agent.

    The one assembly every command, the TUI and the gateway go through: load the
    configuration (file, environment, flags), set up logging at its level, load its
    plugins once per invocation (:func:`host_for`), build the
    :class:`~lich.agent.Agent` (which checks every plugin's settings and builds the
    providers), and warn once about each plugin that failed.

    :param config: use this configuration instead of loading one (``lich demo``).
    :param agent: ``False``: stop at the plugin host (the gateway builds agents of
        its own from it, inspection commands need none).
    :param console: the rich console log lines go through while a run is shown.
    :param service: log as a long-running service (timestamped lines).
    :param chat: the agent's chat function instead of the configured providers (a
        command that calls no model, ``lich mcp serve``, needs none configured).
    :raises CommandError: a configuration error, a ``--plugin`` entry that did not
        load (:func:`check_named_plugins`), plugins failing in strict mode, or run
        flags that cannot be honoured (:func:`tools_for_run`).

    The run flags apply to the agent: ``--yes`` registers the approver that approves
    every call a before-hook asks about (:class:`lich.cli.approve.YesApprover`), and
    ``--tools`` / ``--no-tools`` / ``--read-only`` set its ``tools_enabled`` for
    this invocation.
    """
    from lich.config import ConfigError, LoadedConfig
    from lich.plugins import PluginLoadError

    try:
        loaded = (load_settings_config(settings) if config is None
                  else LoadedConfig(config=config, file=None, sources={}))
    except ConfigError as exc:
        raise CommandError(str(exc)) from exc
    setup_logging(loaded.config.log_level, console, service=service)
    host = host_for(settings, loaded.config)
    built: Agent | None = None
    try:
        # A --plugin entry that failed to import or register is the error, before
        # anything else it might cause (a provider kind it was to bring, say) is.
        check_named_plugins(settings, host)
        if loaded.config.strict_plugins:
            host.raise_if_failed()
        if agent:
            from lich.agent import Agent

            if settings.yes:
                from lich.cli.approve import install_yes_approver

                install_yes_approver(host)
            config = loaded.config
            if settings.tools is not None:
                # --tools names tools the config may not enable: choose among them all.
                from lich.config import config_with

                config = config_with(config, tools_enabled=None)
            with quiet_plugin_log():
                built = Agent(config, host=host, chat=chat)
            # Building the agent runs lich_check_config and the registration hooks:
            # a --plugin entry may fail there too.
            check_named_plugins(settings, host)
            if settings.chooses_tools:
                import attrs

                from lich.config import config_with

                # An agent of its own for the chosen tools (as /model makes one): its
                # config says what it offers, so an agent made from it offers the same.
                config = config_with(loaded.config,
                                     tools_enabled=tools_for_run(settings, built.tools,
                                                                 loaded.config))
                loaded = attrs.evolve(loaded, config=config,
                                      sources={**loaded.sources, "tools_enabled": "flag"})
                with quiet_plugin_log():
                    built = Agent(config, host=host, chat=chat)
    except (ConfigError, PluginLoadError) as exc:
        check_named_plugins(settings, host)  # the cause, when a --plugin entry failed
        # A config plugin that failed may be the cause too (a provider kind it was to
        # register): say so before the error.
        warn_plugin_failures(host)
        if isinstance(exc, ConfigError):
            from lich.config import with_file_lines

            # A plugin's settings check names the $.path; the file has its line.
            located = ConfigError(with_file_lines(loaded, exc.problems), exc.file)
            raise CommandError(str(located)) from exc
        raise CommandError(str(exc)) from exc
    # (An agent dropped by a failed check has made no request: its providers' clients
    # hold no connection to close.)
    warn_plugin_failures(host)
    return Assembly(loaded=loaded, host=host, agent=built)


def tools_for_run(
    settings: CliSettings, tools: ToolRegistry, config: LichConfig
) -> tuple[str, ...]:
    """The tools one run offers by its flags: ``--tools a,b`` those (each must be a tool a
    loaded plugin provides), ``--no-tools`` none, ``--read-only`` only the tools that
    only read (of those chosen, or of all the config enables).

    :param tools: the tools to choose from (every tool, when ``--tools`` is given).
    :raises CommandError: an unknown or disabled name in ``--tools``, a tool given
        with ``--tools`` that ``--read-only`` would take away, or ``--tools`` with
        ``--no-tools``.
    """
    from lich.suggest import did_you_mean

    if settings.no_tools:
        if settings.tools is not None:
            raise CommandError("--tools and --no-tools contradict each other: give one")
        return ()
    names = tools.names()
    chosen = list(names)
    if settings.tools is not None:
        problems = []
        for name in settings.tools:
            if name in names:
                continue
            if name in config.tools_disabled:
                problems.append(f"{name!r} is disabled by tools_disabled in the config")
            else:
                problems.append(f"unknown tool {name!r}{did_you_mean(name, names)}")
        if problems:
            raise CommandError("--tools: " + "; ".join(problems)
                               + " (`lich tools` lists the tools)")
        chosen = list(settings.tools)
    if settings.read_only:
        writers = [n for n in chosen if not _only_reads(tools, n)]
        if settings.tools is not None and writers:
            raise CommandError(f"--read-only leaves out {', '.join(writers)}, given with "
                               "--tools: these tools do not only read")
        chosen = [n for n in chosen if n not in writers]
    return tuple(chosen)


def _only_reads(tools: ToolRegistry, name: str) -> bool:
    tool = tools.get(name)
    return tool is not None and tool.read_only
