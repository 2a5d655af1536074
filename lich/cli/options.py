"""Command-line flags shared by the root group and its commands.

Every flag may be given before or after the command name (``lich --model m
chat`` and ``lich chat --model m`` are the same). Each option stores its value
in one :class:`CliSettings` object on the click context (``ctx.obj``), which
child contexts share; a later (command-level) value wins over an earlier
(group-level) one, and ``--plugin`` accumulates.

This module imports only click: it is loaded by ``lich --version``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

__all__ = [
    "CONFIG_OPTIONS",
    "JSON_OPTION",
    "MODEL_OPTIONS",
    "RESUME_OPTION",
    "RUN_OPTIONS",
    "SETUP_OPTIONS",
    "TOOL_OPTIONS",
    "CliSettings",
    "config_options",
    "get_settings",
    "json_option",
    "plugin_entry",
    "run_options",
    "session_options",
    "setup_options",
]

F = TypeVar("F", bound=Callable[..., Any])

LOG_LEVELS = ("debug", "info", "warn", "warning", "error")


class CliSettings:
    """The flags of one invocation, gathered from every level of the command line."""

    def __init__(self) -> None:
        self.config_path: str | None = None
        self.work_dir: str | None = None
        self.plugins: list[str] = []
        self.max_turns: int | None = None
        self.max_cost_usd: float | None = None
        self.max_total_tokens: int | None = None
        self.model: str | None = None
        self.provider_kind: str | None = None
        self.base_url: str | None = None
        self.api_key_env: str | None = None
        self.system_prompt: str | None = None
        self.session_dir: str | None = None
        self.log_level: str | None = None
        self.no_stream: bool = False
        self.strict_plugins: bool = False
        self.resume: str | None = None
        self.json: bool = False
        # --trust: the project config is trusted for this run (lich.trust).
        self.trust: bool | None = None
        # Whether lich may ask on the terminal to trust the project (the config
        # commands only show what trust would enable) and whether it said so already.
        self.ask_trust: bool = True
        self.trust_reported: bool = False
        # The run flags (TOOL_OPTIONS): what this run may do and who says yes.
        self.yes: bool = False
        self.read_only: bool = False
        self.tools: tuple[str, ...] | None = None
        self.no_tools: bool = False
        # Plugin hosts already loaded in this process, by (work_dir, plugins): the command
        # lookup and the run share one, so plugins load (and warn) once.
        self.hosts: dict[tuple[str, tuple[str, ...]], Any] = {}

    @property
    def chooses_tools(self) -> bool:
        """Whether ``--tools``, ``--no-tools`` or ``--read-only`` was given."""
        return self.tools is not None or self.no_tools or self.read_only

    def flags(self, *, with_plugins: bool = True) -> dict[str, Any]:
        """The ``flags`` mapping for :func:`lich.config.load_config`."""
        flags: dict[str, Any] = {
            "work_dir": self.work_dir,
            "system_prompt": self.system_prompt,
            "session_dir": self.session_dir,
            "log_level": self.log_level,
            "max_turns": self.max_turns,
            "max_cost_usd": self.max_cost_usd,
            "max_total_tokens": self.max_total_tokens,
            "model": self.model,
            "provider_kind": self.provider_kind,
            "base_url": self.base_url,
            "api_key_env": self.api_key_env,
        }
        if self.strict_plugins:
            flags["strict_plugins"] = True
        if self.no_stream:
            flags["stream"] = False
        if with_plugins and self.plugins:
            flags["plugins"] = list(self.plugins)
        return {k: v for k, v in flags.items() if v is not None}


def get_settings(ctx: click.Context) -> CliSettings:
    """The :class:`CliSettings` of this invocation (created on first use)."""
    return ctx.ensure_object(CliSettings)


def plugin_entry(entry: str) -> str:
    """A ``--plugin`` value as the config's loader reads it (a relative path made absolute)."""
    # A path given on the command line means a path from where the user stands, not from
    # the work dir (which is how the config file's relative entries are read).
    from lich.config import is_path_entry

    if is_path_entry(entry) and not os.path.isabs(entry):
        candidate = Path(entry).expanduser()
        if candidate.exists():
            return str(candidate.resolve())
    return entry


def _work_dir(value: str) -> str:
    # The work dir is where the agent reads and writes: a mistyped one must not be
    # created (with a .lich/sessions inside) and worked in as if it were the project.
    path = Path(value).expanduser()
    if not path.is_dir():
        problem = "is not a directory" if path.exists() else "does not exist"
        raise click.BadParameter(f"{value} {problem} (lich does not create the work dir)",
                                 param_hint="'--work-dir'")
    return value


def _tool_names(value: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    if not names:
        raise click.BadParameter("expected tool names separated by commas (read_file,grep_files); "
                                 "for a run without tools: --no-tools", param_hint="'--tools'")
    return names


def _store(attr: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def callback(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        if value is None or value is False or value == ():
            return  # not given at this level: keep what another level set
        settings = get_settings(ctx)
        if attr == "plugins":
            settings.plugins.extend(plugin_entry(v) for v in value)
        elif attr == "work_dir":
            settings.work_dir = _work_dir(value)
        elif attr == "tools":
            settings.tools = _tool_names(value)
        else:
            setattr(settings, attr, value)

    return callback


def _option(*decls: str, attr: str, **kwargs: Any) -> Callable[[F], F]:
    return click.option(*decls, expose_value=False, callback=_store(attr), **kwargs)


# The options that shape the configuration. --config, --work-dir and --plugin are eager so
# that `lich --plugin x.py --help` already knows which plugin commands to list.
SETUP_OPTIONS: tuple[Callable[[F], F], ...] = (
    _option("--config", "config_path", attr="config_path", metavar="FILE", is_eager=True,
            help="Config file (TOML or JSON) instead of the nearest .lich/config.toml / the user "
                 "config."),
    _option("--work-dir", attr="work_dir", metavar="DIR", is_eager=True,
            help="Directory the agent works in; must exist (default: the current directory)."),
    _option("--plugin", "plugins", attr="plugins", metavar="PATH|NAME", multiple=True,
            is_eager=True,
            help="Load this plugin too (entry point, module or .py file); it must load. "
                 "Repeatable."),
    _option("--trust", attr="trust", is_flag=True, default=None, is_eager=True,
            help="Trust the project's .lich/config.toml for this run: its plugins, MCP "
                 "servers, providers and rules apply (`lich trust` records it)."),
    _option("--strict-plugins", attr="strict_plugins", is_flag=True, default=None,
            help="Exit with an error when any plugin fails to load."),
    _option("--session-dir", attr="session_dir", metavar="DIR",
            help="Where transcripts are written (default: the project's .lich/sessions)."),
    _option("--log-level", attr="log_level", type=click.Choice(LOG_LEVELS), metavar="LEVEL",
            help="debug, info, warn or error."),
)

# What a model call is made with: the first provider, the run's budgets and prompt. Only
# the commands that run the agent (and the config commands, which show their effect)
# take them: `lich sessions show --max-cost` would be a flag that does nothing.
MODEL_OPTIONS: tuple[Callable[[F], F], ...] = (
    _option("--model", attr="model", metavar="MODEL", help="Model of the first provider."),
    _option("--provider-kind", attr="provider_kind", metavar="KIND",
            help="Provider kind of the first provider (one a loaded plugin registers)."),
    _option("--base-url", attr="base_url", metavar="URL", help="Base URL of the first provider."),
    _option("--api-key-env", attr="api_key_env", metavar="NAME",
            help="Environment variable holding the first provider's API key."),
    _option("--max-turns", attr="max_turns", type=click.IntRange(min=1), metavar="N",
            help="Most model calls per run."),
    _option("--max-cost", attr="max_cost_usd", type=click.FloatRange(min=0, min_open=True),
            metavar="USD",
            help="Stop a run before a model call once it has cost this many US dollars "
                 "(needs prices: the `prices` plugin)."),
    _option("--max-tokens", attr="max_total_tokens", type=click.IntRange(min=1), metavar="N",
            help="Stop a run before a model call once it has used this many tokens."),
    _option("--system-prompt", attr="system_prompt", metavar="TEXT",
            help="System prompt instead of the default."),
    _option("--no-stream", attr="no_stream", is_flag=True, default=None,
            help="Ask providers for whole answers instead of streamed text."),
)

CONFIG_OPTIONS: tuple[Callable[[F], F], ...] = (*SETUP_OPTIONS, *MODEL_OPTIONS)

RESUME_OPTION: Callable[[F], F] = _option(
    "--resume", attr="resume", metavar="ID|latest",
    help="Continue a recorded session ('latest' for the newest).",
)


def json_option(help: str = "As JSON.") -> Callable[[F], F]:
    """``--json``, stored in :attr:`CliSettings.json` like every flag, so that it may come
    before or after the command name (``lich --json tools`` = ``lich tools --json``).

    Every builtin command takes it; one that cannot print JSON (``chat``, ``tui``,
    ``config init``) says so and exits 2 rather than ignoring it.
    """
    return _option("--json", "json", attr="json", is_flag=True, default=None, help=help)


JSON_OPTION: Callable[[F], F] = json_option(
    "As JSON: a run prints every event as one JSON object per line (see docs/events.md), "
    "other commands their output."
)

# What one run may do, and who says yes to the calls that ask (docs/cli.md, "Approvals").
# They shape the run's agent, so every command that runs one (lich TASK, chat, tui) takes them.
TOOL_OPTIONS: tuple[Callable[[F], F], ...] = (
    _option("--yes", "-y", "yes", attr="yes", is_flag=True, default=None,
            help="Approve every tool call that asks for approval (a deny rule or a "
                 "plugin's block still refuses)."),
    _option("--read-only", "read_only", attr="read_only", is_flag=True, default=None,
            help="Only the tools that only read (no terminal, no file writes) for this run."),
    _option("--tools", "tools", attr="tools", metavar="A,B",
            help="Only these tools for this run (names as `lich tools` lists them)."),
    _option("--no-tools", "no_tools", attr="no_tools", is_flag=True, default=None,
            help="No tools for this run: the model can only answer."),
)
RUN_OPTIONS: tuple[Callable[[F], F], ...] = (RESUME_OPTION, JSON_OPTION, *TOOL_OPTIONS)


def _apply(options: tuple[Callable[[F], F], ...], f: F) -> F:
    for option in reversed(options):
        f = option(f)
    return f


def setup_options(f: F) -> F:
    """Decorate a command with the flags that choose the configuration, the plugins, the
    transcripts and the log (:data:`SETUP_OPTIONS`): a command that runs no model."""
    return _apply(SETUP_OPTIONS, f)


def config_options(f: F) -> F:
    """Decorate a command with every configuration flag: :data:`SETUP_OPTIONS` and the
    model's (:data:`MODEL_OPTIONS`), for a command that runs the agent as a service
    (``lich gateway``, ``lich worker``) or shows the configuration they make."""
    return _apply(CONFIG_OPTIONS, f)


def session_options(f: F) -> F:
    """Decorate a command with the configuration flags plus ``--resume`` and the run
    flags (:data:`TOOL_OPTIONS`)."""
    return _apply((*CONFIG_OPTIONS, RESUME_OPTION, *TOOL_OPTIONS), f)


def run_options(f: F) -> F:
    """Decorate a command with the configuration flags plus ``--resume``, ``--json`` and
    the run flags (:data:`TOOL_OPTIONS`)."""
    return _apply((*CONFIG_OPTIONS, *RUN_OPTIONS), f)
