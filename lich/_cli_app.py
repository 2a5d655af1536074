"""What the commands share: exit codes, error lines, logging, config and plugin loading.

Imported only by commands that run (never by ``lich --version``), but it
still keeps the heavy parts (the agent, providers) inside functions.
"""

from __future__ import annotations

import logging
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from lich._cli_options import Settings

if TYPE_CHECKING:
    from collections.abc import Iterator

    from lich.agent import Agent
    from lich.config import LichConfig, LoadedConfig
    from lich.plugins import PluginHost

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_STOPPED",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "build_agent",
    "echo_error",
    "echo_warning",
    "host_for",
    "load_settings_config",
    "quiet_plugin_log",
    "setup_logging",
    "warn_plugin_failures",
]

EXIT_OK = 0
EXIT_STOPPED = 1  # the run ended on its budget, was aborted, or the model failed
EXIT_USAGE = 2  # bad flags, bad config, plugins failing in strict mode
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
EXIT_TERMINATED = 143  # SIGTERM (128 + SIGTERM)


def echo_error(message: str) -> None:
    """``lich: error: <message>`` on stderr, never wrapped: the message holds paths and
    ``$.path`` problems to copy (a multi-line message keeps its own lines)."""
    click.echo(f"lich: error: {message}", err=True)


def echo_warning(message: str) -> None:
    """``lich: warning: <message>`` on stderr."""
    click.echo(f"lich: warning: {message}", err=True)


# ---------------------------------------------------------------- logging

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
           "warning": logging.WARNING, "error": logging.ERROR}


class _CliLogHandler(logging.Handler):
    """One line a record on stderr; through the rich console when one is live,
    so log lines land above a spinner instead of through it."""

    console: Any = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
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


# A long-running service (``lich gateway``): timestamped, and the rest of the line is
# the logfmt its events are written in.
_SERVICE_FORMAT = "%(asctime)s level=%(levelname)s %(message)s"


def setup_logging(level: str | None, console: Any = None, *, service: bool = False) -> None:
    """Send the ``lich`` loggers to stderr at ``level`` (default ``info``).

    :param console: the rich console of the run's output, when there is one.
    :param service: timestamped ``<time> level=<LEVEL> <message>`` lines (the
        gateway's) instead of ``[lich:<level>] <message>``.

    Replaces the handler an earlier call installed, so no line is printed twice.
    """
    logger = logging.getLogger("lich")
    for handler in list(logger.handlers):
        if isinstance(handler, _CliLogHandler):
            logger.removeHandler(handler)
    handler = _CliLogHandler()
    handler.console = console
    handler.setFormatter(logging.Formatter(_SERVICE_FORMAT) if service else _CliFormatter())
    logger.addHandler(handler)
    logger.setLevel(_LEVELS.get((level or "info").lower(), logging.INFO))


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


def load_settings_config(settings: Settings, *, with_plugins: bool = True) -> LoadedConfig:
    """:func:`lich.config.load_config` with this invocation's flags.

    :raises lich.config.ConfigError: naming the file and the ``$.path``.
    """
    from lich.config import load_config

    return load_config(config_path=settings.config_path,
                       flags=settings.flags(with_plugins=with_plugins))


def host_for(settings: Settings, config: LichConfig) -> PluginHost:
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
            f"plugin {report.entry!r} {verb} ({report.describe_error()}); "
            "continuing without it (see `lich plugins`)"
        )


def build_agent(settings: Settings, config: LichConfig) -> Agent:
    """An :class:`~lich.agent.Agent` for ``config`` using the invocation's plugin host.

    :raises lich.config.ConfigError: no model, unknown provider kind, …
    :raises lich.plugins.PluginLoadError: strict mode and a plugin failed.
    """
    from lich.agent import Agent

    host = host_for(settings, config)
    with quiet_plugin_log():
        return Agent(config, host=host)
