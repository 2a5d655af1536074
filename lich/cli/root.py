"""The root of the ``lich`` command line (click): the group, command lookup, ``main``.

``lich TASK…`` runs one task; ``lich chat``, ``lich demo``, ``lich tui``,
``lich config``, ``lich plugins``, ``lich tools`` and ``lich sessions`` are
the builtin commands, and plugins add theirs through
``lich_register_commands``. See ``docs/cli.md``.

Start-up stays cheap: this module imports click and nothing heavy. Commands
import what they need when they run; plugins are loaded only to look up a
command that is not builtin or to list the commands for ``--help`` —
``--version`` never loads them.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from lich import __version__
from lich.cli.options import CliSettings, get_settings, run_options

__all__ = ["BUILTIN_COMMANDS", "LichGroup", "build_cli", "main"]

# A word that could name a command; a task like "what is in here?" cannot, so looking
# it up does not need the plugins.
_COMMAND_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
_AFTER_DASHDASH = "lich.after_dashdash"


# The builtin commands, one module each, imported when a command is looked up (so
# `lich --version` imports none of them, `lich TASK` only the run command's).
BUILTIN_COMMANDS: dict[str, str] = {
    "run": "lich.cli.run:run_command",
    "chat": "lich.cli.chat:chat_command",
    "tui": "lich.cli.tui:tui_command",
    "demo": "lich.cli.demo:demo_command",
    "config": "lich.cli.config:config_group",
    "plugins": "lich.cli.plugins:plugins_group",
    "tools": "lich.cli.tools:tools_command",
    "sessions": "lich.cli.sessions:sessions_group",
    "trust": "lich.cli.trust:trust_command",
}


def _import_command(target: str) -> click.Command:
    module, _, attr = target.partition(":")
    command = getattr(importlib.import_module(module), attr)
    assert isinstance(command, click.Command), target
    return command


class LichGroup(click.Group):
    """The root group: builtin commands, plugin commands loaded on demand, and words
    that name no command taken as a task (``lich what is here`` = ``lich run what is here``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._plugin_commands: set[str] = set()
        self._loaded_for: object | None = None
        self._host: Any = None
        self.plugin_problem: str | None = None

    def builtin(self, name: str) -> click.Command | None:
        """The builtin command ``name`` (imported on first use), or ``None``."""
        command = self.commands.get(name)
        if command is None and name in BUILTIN_COMMANDS:
            command = self.commands[name] = _import_command(BUILTIN_COMMANDS[name])
        return command if name in BUILTIN_COMMANDS else None

    def load_plugin_commands(self, ctx: click.Context, settings: CliSettings | None = None) -> None:
        """Call ``lich_register_commands`` of the configured plugins, once per invocation
        (per ``settings``: by default the flags parsed so far).

        Never raises: a bad config or a broken plugin leaves the builtin commands working.
        """
        settings = settings or get_settings(ctx)
        if ctx.resilient_parsing:
            settings.ask_trust = False  # shell completion never asks
        if self._loaded_for is settings:
            return
        for name in self._plugin_commands:  # a previous invocation's (tests reuse groups)
            self.commands.pop(name, None)
        self._plugin_commands = set()
        self._loaded_for = settings
        self.plugin_problem = None
        self._host = None
        before = dict(self.commands)
        try:
            from lich.cli.common import host_for, load_settings_config, quiet_plugin_log

            config = load_settings_config(settings).config
            host = self._host = host_for(settings, config)
            with quiet_plugin_log():
                # Builtins win over plugin commands; a plugin's command named like one is
                # left out and reported on its load report (`lich plugins` shows it).
                host.register_commands(self, reserved=BUILTIN_COMMANDS)
        except Exception as exc:  # whatever happens here, `lich --help` must keep working
            self.plugin_problem = f"{type(exc).__name__}: {exc}"
            return
        self._plugin_commands = set(self.commands) - set(before) - set(BUILTIN_COMMANDS)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self.load_plugin_commands(ctx)
        return sorted({*BUILTIN_COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = self.builtin(cmd_name) or self.commands.get(cmd_name)
        if command is None and _COMMAND_NAME.match(cmd_name):
            self.load_plugin_commands(ctx)
            command = self.commands.get(cmd_name)
        return command

    def _find_with_later_flags(
        self, ctx: click.Context, name: str, args: list[str]
    ) -> click.Command | None:
        """The plugin command ``name`` when the flags after it (``lich worker --config
        c.toml``, ``lich cluster status --plugin nats``) choose the config or plugins that
        provide it: click parses those flags only once it has found the command."""
        if not _COMMAND_NAME.match(name):
            return None
        later = _settings_with_flags(get_settings(ctx), args)
        if later is None:
            return None
        self.load_plugin_commands(ctx, later)
        return self.commands.get(name)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # `lich -- TASK` runs TASK as given, even `lich -- --dash-task` or `lich -- confg`:
        # remember that the words came after a `--` (click drops it).
        after = args[args.index("--") + 1:] if "--" in args else None
        rest = super().parse_args(ctx, args)
        # click >= 8.2 keeps the first word in _protected_args, 8.1 in protected_args.
        state = vars(ctx)
        protected = state.get("_protected_args", state.get("protected_args", ()))
        remainder = [*protected, *ctx.args]
        if after and remainder == after:
            ctx.meta[_AFTER_DASHDASH] = True
        return rest

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = self._resolve(ctx, args)
        if (command is not None and name in self._plugin_commands and get_settings(ctx).json
                and not _takes_json(command)):
            # `lich --json gateway`: the plugin's command has no --json of its own, so it
            # would print text to a script that asked for JSON.
            from lich.cli.common import EXIT_USAGE, echo_error

            echo_error(f"the plugin command {name!r} cannot print JSON (--json): "
                       "it has no --json option")
            raise click.exceptions.Exit(EXIT_USAGE)
        return name, command, rest

    def _resolve(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if ctx.meta.get(_AFTER_DASHDASH):
            return "run", self.builtin("run"), ["--", *args]
        name = args[0]
        if (not name.startswith("-") and self.get_command(ctx, name) is None
                and self._find_with_later_flags(ctx, name, args[1:]) is None):
            # Not a command: every word, this one included, is the task — unless the
            # word looks like a command mistyped, which would send a typo to the model.
            self._refuse_near_miss(ctx, name, args)
            return "run", self.builtin("run"), args
        return super().resolve_command(ctx, args)

    def _refuse_near_miss(self, ctx: click.Context, word: str, args: list[str]) -> None:
        """Exit 2 when ``word`` is close to a command's name, names a plugin that failed
        to load (whose commands are missing), or is a command of an installed plugin
        that is not enabled."""
        if not _COMMAND_NAME.match(word) or ctx.resilient_parsing:
            return  # (resilient: shell completion, which must never exit with an error)
        from lich.cli.common import EXIT_USAGE, echo_error
        from lich.suggest import closest

        names = self.list_commands(ctx)
        failed = self._failed_plugin(word)
        disabled = self._disabled_plugin_with(word) if failed is None else None
        # A capitalised word starts a sentence, and a line ending in "?" is a question:
        # neither is a command mistyped ("What is here?" is one edit from "chat").
        sentence = not word.islower() or (args[-1].rstrip().endswith("?"))
        close = None if sentence else closest(word, names, cutoff=0.8)
        if failed is not None:
            echo_error(f"unknown command {word!r}: the plugin {failed.plugin or failed.entry!r}, "
                       f"which would provide it, failed to load ({failed.describe_error()}); "
                       "see `lich plugins`")
        elif disabled is not None:
            echo_error(f"the command {word!r} is of the plugin {disabled!r}, which is installed "
                       f"but not enabled: add it with plugins = [\"+{disabled}\"] in the "
                       f"config (or --plugin {disabled} for one command)")
        elif close:
            echo_error(f"unknown command {word!r}; did you mean {close!r}? "
                       f"(to send it to the model as a task: lich run -- {word} ...)")
        else:
            return
        raise click.exceptions.Exit(EXIT_USAGE)

    def _disabled_plugin_with(self, word: str) -> str | None:
        """The installed plugin (entry point) that is not loaded here and whose
        ``lich_register_commands`` adds the command ``word``, if any.

        Its module is imported (plugin modules are cheap to import, their hooks import
        the rest) but not registered: only its commands are asked for, on a scratch group.
        """
        host = self._host
        if host is None:
            return None
        from lich.plugins import installed_entry_points

        loaded = {name for r in host.reports for name in (r.entry, r.plugin) if name}
        for name in sorted(installed_entry_points() - loaded):
            if word in _commands_of_entry_point(name):
                return name
        return None

    def _failed_plugin(self, word: str) -> Any:
        host = self._host
        if host is None:
            return None
        for report in host.failures:
            names = {report.plugin, report.entry, Path(report.entry).stem}
            if word in names or word.lower() in {n.lower() for n in names if n}:
                return report
        return None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self.load_plugin_commands(ctx)
        sections = (
            ("Commands", sorted(BUILTIN_COMMANDS)),
            ("Plugin commands", sorted(self._plugin_commands)),
        )
        width = formatter.width or 80
        for title, names in sections:
            rows = []
            for name in names:
                command = self.get_command(ctx, name)
                if command is None or command.hidden:
                    continue
                rows.append((name, command.get_short_help_str(max(width - 6 - len(name), 30))))
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
        if self.plugin_problem:
            with formatter.section("Plugin commands"):
                # Written as is, not through write_text: rewrapping would cut the file path
                # and the "$.path: message" lines the user has to read and copy.
                indent = " " * formatter.current_indent
                for line in f"unavailable: {self.plugin_problem}".splitlines():
                    formatter.write(f"{indent}{line}\n")


def _settings_with_flags(settings: CliSettings, args: list[str]) -> CliSettings | None:
    """A copy of ``settings`` with the ``--config``, ``--work-dir`` and ``--plugin`` values
    found in ``args`` (up to a ``--``), or ``None`` when ``args`` has none of them.

    The copy shares the loaded plugin hosts, so the command that then parses these
    flags itself finds its plugins already loaded.
    """
    import copy

    from lich.cli.options import plugin_entry

    found: list[tuple[str, str]] = []
    for i, arg in enumerate(args):
        if arg == "--":
            break
        for flag in ("--config", "--work-dir", "--plugin"):
            if arg == flag and i + 1 < len(args):
                found.append((flag, args[i + 1]))
            elif arg.startswith(flag + "="):
                found.append((flag, arg[len(flag) + 1:]))
    if not found:
        return None
    later = copy.copy(settings)
    later.plugins = list(settings.plugins)
    for flag, value in found:
        if flag == "--config":
            later.config_path = value
        elif flag == "--work-dir":
            later.work_dir = value
        else:
            later.plugins.append(plugin_entry(value))
    return later


def _commands_of_entry_point(name: str) -> frozenset[str]:
    """The command names the installed plugin ``name`` would add (none when it fails
    to import or to register them)."""
    from lich.plugins.loading import load_entry_point

    scratch = click.Group()
    try:
        register = getattr(load_entry_point(name), "lich_register_commands", None)
        if register is None:
            return frozenset()
        register(cli=scratch)
    except Exception:  # a broken plugin adds nothing; `lich plugins` reports it
        return frozenset()
    return frozenset(scratch.commands)


def _takes_json(command: click.Command) -> bool:
    """Whether ``command`` declares a ``--json`` option (a plugin command that does is
    trusted to honour it, reading :attr:`CliSettings.json` or its own value)."""
    return any("--json" in getattr(p, "opts", ()) for p in command.params)


def build_cli() -> LichGroup:
    """The root command group. Builtin commands are imported when looked up, plugin
    commands when a name is not builtin or ``--help`` lists them."""

    @click.group(
        cls=LichGroup,
        invoke_without_command=True,
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
        epilog="Flags may come before or after the command; the run flags (--model, --max-cost, "
        "--yes...) are those of a run (lich TASK, run, chat, tui). Ctrl-C cancels a run and "
        "keeps its transcript (exit 130). docs/cli.md has the details.",
    )
    @click.version_option(__version__, "--version", "-V", prog_name="lich",
                          message="%(prog)s %(version)s")
    @run_options
    @click.pass_context
    def cli(ctx: click.Context) -> None:
        """lich: a plugin-first AI agent harness.

        \b
        lich TASK...          run one task (or: echo TASK | lich)
        lich chat             talk, with memory, in one session
        lich                  the terminal UI (when stdin and stdout are terminals)
        lich demo             a real run against a local scripted model: no network, no keys

        Exit codes: 0 final answer, 1 budget exhausted / aborted / model failure,
        2 usage or configuration error, 130 interrupted (Ctrl-C).
        """
        if ctx.invoked_subcommand is not None:
            return
        if sys.stdin is not None and not sys.stdin.isatty():
            from lich.cli.run import one_shot

            ctx.exit(one_shot(get_settings(ctx), ()))
        if sys.stdout is not None and sys.stdout.isatty():
            from lich.cli.tui import launch_tui

            ctx.exit(launch_tui(get_settings(ctx)))
        click.echo(ctx.get_help(), err=True)
        ctx.exit(2)

    return cli


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``lich`` script and ``python -m lich``."""
    cli = build_cli()
    try:
        code = cli.main(args=list(argv) if argv is not None else None, prog_name="lich",
                        standalone_mode=False)
    except click.exceptions.Abort:
        # Ctrl-C (or EOF) outside a run: click turns KeyboardInterrupt into Abort.
        click.echo("", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        # `lich sessions list | head`: the reader left; do not print a traceback.
        _drop_stdout()
        sys.exit(1)
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        _drop_stdout()  # or Python complains about the unflushable stdout at exit
    sys.exit(code if isinstance(code, int) else 0)


def _drop_stdout() -> None:
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
