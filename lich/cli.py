"""The ``lich`` command line (click).

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

import re
import sys
from collections.abc import Sequence
from typing import Any

import click

from lich import __version__
from lich._cli_options import (
    JSON_OPTION,
    config_options,
    get_settings,
    run_options,
    session_options,
)

__all__ = ["LichGroup", "build_cli", "main"]

# A word that could name a command; a task like "what is in here?" cannot, so looking
# it up does not need the plugins.
_COMMAND_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")


class LichGroup(click.Group):
    """The root group: builtin commands, plugin commands loaded on demand, and words
    that name no command taken as a task (``lich what is here`` = ``lich run what is here``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._builtin: dict[str, click.Command] = {}
        self._plugin_commands: set[str] = set()
        self._loaded_for: object | None = None
        self.plugin_problem: str | None = None

    def seal_builtins(self) -> None:
        """Remember the builtin commands (plugins may not replace them)."""
        self._builtin = dict(self.commands)

    def load_plugin_commands(self, ctx: click.Context) -> None:
        """Call ``lich_register_commands`` of the configured plugins, once per invocation.

        Never raises: a bad config or a broken plugin leaves the builtin commands working.
        """
        settings = get_settings(ctx)
        if self._loaded_for is settings:
            return
        for name in self._plugin_commands:  # a previous invocation's (tests reuse groups)
            self.commands.pop(name, None)
        self._plugin_commands = set()
        self._loaded_for = settings
        self.plugin_problem = None
        try:
            from lich._cli_app import host_for, load_settings_config, quiet_plugin_log

            config = load_settings_config(settings).config
            host = host_for(settings, config)
            before = set(self.commands)
            with quiet_plugin_log():
                host.register_commands(self)
        except Exception as exc:  # whatever happens here, `lich --help` must keep working
            self.plugin_problem = f"{type(exc).__name__}: {exc}"
            return
        for name, command in self._builtin.items():
            if self.commands.get(name) is not command:
                self.commands[name] = command  # builtins win over plugin commands
        self._plugin_commands = set(self.commands) - before

    def list_commands(self, ctx: click.Context) -> list[str]:
        self.load_plugin_commands(ctx)
        return sorted(self.commands)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = self.commands.get(cmd_name)
        if command is None and _COMMAND_NAME.match(cmd_name):
            self.load_plugin_commands(ctx)
            command = self.commands.get(cmd_name)
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0]
        if not name.startswith("-") and self.get_command(ctx, name) is None:
            # Not a command: every word, this one included, is the task.
            return "run", self.commands["run"], args
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self.load_plugin_commands(ctx)
        sections = (
            ("Commands", sorted(n for n in self.commands if n not in self._plugin_commands)),
            ("Plugin commands", sorted(self._plugin_commands)),
        )
        width = formatter.width or 80
        for title, names in sections:
            rows = []
            for name in names:
                command = self.commands[name]
                if command.hidden:
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


def _launch_tui(ctx: click.Context) -> int:
    """Run the Textual UI (``lich tui``, or bare ``lich`` on a terminal)."""
    from lich._cli_app import EXIT_USAGE, echo_error, load_settings_config
    from lich.config import ConfigError

    settings = get_settings(ctx)
    try:
        # --plugin entries go to the TUI separately, which loads them on top of the config's.
        config = load_settings_config(settings, with_plugins=False).config
    except ConfigError as exc:
        echo_error(str(exc))
        return EXIT_USAGE
    from lich.plugins import PluginLoadError

    try:
        from lich.tui import run_tui

        return int(run_tui(config, resume=settings.resume, plugins=tuple(settings.plugins)))
    except ModuleNotFoundError as exc:
        # Textual may be imported by lich.tui itself or only when the TUI starts.
        if (exc.name or "").split(".")[0] == "textual":
            echo_error("the TUI needs Textual: pip install 'lich[tui]'")
            return EXIT_USAGE
        raise
    except (ConfigError, PluginLoadError) as exc:
        echo_error(str(exc))
        return EXIT_USAGE


def build_cli() -> LichGroup:
    """The root command group, with the builtin commands. Plugin commands join it lazily."""

    @click.group(
        cls=LichGroup,
        invoke_without_command=True,
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
        epilog="Flags may come before or after the command. Ctrl-C cancels a run and keeps "
        "its transcript (exit 130). docs/cli.md has the details.",
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
            from lich._cli_run import one_shot

            ctx.exit(one_shot(get_settings(ctx), ()))
        if sys.stdout is not None and sys.stdout.isatty():
            ctx.exit(_launch_tui(ctx))
        click.echo(ctx.get_help(), err=True)
        ctx.exit(2)

    @cli.command("run")
    @run_options
    @click.argument("task", nargs=-1)
    @click.pass_context
    def run_cmd(ctx: click.Context, task: tuple[str, ...]) -> None:
        """Run one task (what `lich TASK...` does).

        The answer streams to stdout, progress goes to stderr. With no TASK and
        stdin not a terminal, the task is read from stdin. Use `lich run -- TASK`
        when the task starts with a command's name or a dash.
        """
        from lich._cli_run import one_shot

        ctx.exit(one_shot(get_settings(ctx), task))

    @cli.command("chat")
    @session_options
    @click.pass_context
    def chat_cmd(ctx: click.Context) -> None:
        """Talk with the agent; it remembers the conversation (one session).

        Slash commands: /help /exit /quit /usage /model /sessions /resume ID|latest /new.
        Ctrl-C cancels the answer in progress, not the chat.
        """
        from lich._cli_chat import chat

        ctx.exit(chat(get_settings(ctx)))

    @cli.command("tui")
    @session_options
    @click.pass_context
    def tui_cmd(ctx: click.Context) -> None:
        """The terminal UI (needs the `tui` extra: pip install 'lich[tui]')."""
        ctx.exit(_launch_tui(ctx))

    @cli.command("demo")
    @JSON_OPTION
    @click.option("--no-stream", "no_stream", is_flag=True, default=None, expose_value=False,
                  callback=lambda ctx, _p, v: setattr(get_settings(ctx), "no_stream", True)
                  if v else None, help="Whole answers instead of streamed text.")
    @click.pass_context
    def demo_cmd(ctx: click.Context) -> None:
        """A real run with no network and no keys.

        Starts a scripted model server on 127.0.0.1; the agent reaches it over HTTP
        through the openai_compat provider and uses the builtin tools in a
        temporary work dir (write a file, read it back, list the directory).
        """
        from lich._cli_demo import demo

        ctx.exit(demo(get_settings(ctx)))

    # ----------------------------------------------------------------- config

    @cli.group("config")
    def config_grp() -> None:
        """Write, show, locate and check the configuration."""

    @config_grp.command("init")
    @config_options
    @click.option("--user", is_flag=True, help="Write the user config instead of the work dir's.")
    @click.option("--force", is_flag=True, help="Overwrite an existing file.")
    @click.option("--print", "to_stdout", is_flag=True, help="Print the template instead.")
    @click.pass_context
    def config_init_cmd(ctx: click.Context, user: bool, force: bool, to_stdout: bool) -> None:
        """Write a commented .lich/config.toml template."""
        from lich._cli_admin import config_init

        ctx.exit(config_init(get_settings(ctx), user=user, force=force, to_stdout=to_stdout))

    @config_grp.command("show")
    @config_options
    @click.option("--json", "as_json", is_flag=True, help="As JSON.")
    @click.pass_context
    def config_show_cmd(ctx: click.Context, as_json: bool) -> None:
        """The effective configuration, each value with its source
        (default, file, env, flag). Secrets are never shown."""
        from lich._cli_admin import config_show

        ctx.exit(config_show(get_settings(ctx), as_json or get_settings(ctx).json))

    @config_grp.command("path")
    @config_options
    @click.pass_context
    def config_path_cmd(ctx: click.Context) -> None:
        """The config file in use (exit 1 when there is none)."""
        from lich._cli_admin import config_path

        ctx.exit(config_path(get_settings(ctx)))

    @config_grp.command("validate")
    @config_options
    @click.pass_context
    def config_validate_cmd(ctx: click.Context) -> None:
        """Check the config: errors name the file and the $.path; plugins and
        provider kinds are checked too."""
        from lich._cli_admin import config_validate

        ctx.exit(config_validate(get_settings(ctx)))

    # ---------------------------------------------------------------- plugins

    @cli.group("plugins", invoke_without_command=True)
    @config_options
    @click.option("--json", "as_json", is_flag=True, help="As JSON.")
    @click.pass_context
    def plugins_grp(ctx: click.Context, as_json: bool) -> None:
        """The configured plugins and how loading each went."""
        if ctx.invoked_subcommand is None:
            from lich._cli_admin import plugins_list

            ctx.exit(plugins_list(get_settings(ctx), as_json or get_settings(ctx).json))
        ctx.meta["lich.json"] = as_json

    @plugins_grp.command("available")
    @config_options
    @click.option("--json", "as_json", is_flag=True, help="As JSON.")
    @click.pass_context
    def plugins_available_cmd(ctx: click.Context, as_json: bool) -> None:
        """Installed plugins (entry points of group `lich`), read from metadata
        without importing them; marks the enabled ones."""
        from lich._cli_admin import plugins_available

        as_json = as_json or bool(ctx.meta.get("lich.json")) or get_settings(ctx).json
        ctx.exit(plugins_available(get_settings(ctx), as_json))

    # ------------------------------------------------------------------ tools

    @cli.command("tools")
    @config_options
    @click.option("--json", "as_json", is_flag=True, help="As JSON, with parameter schemas.")
    @click.pass_context
    def tools_cmd(ctx: click.Context, as_json: bool) -> None:
        """The enabled tools, with their plugin and description."""
        from lich._cli_admin import tools_list

        ctx.exit(tools_list(get_settings(ctx), as_json or get_settings(ctx).json))

    # --------------------------------------------------------------- sessions

    @cli.group("sessions")
    def sessions_grp() -> None:
        """Recorded conversations (JSONL transcripts)."""

    @sessions_grp.command("list")
    @config_options
    @click.option("--json", "as_json", is_flag=True, help="As JSON.")
    @click.option("--limit", "-n", type=int, default=50, show_default=True,
                  help="Show at most N sessions (0: all).")
    @click.pass_context
    def sessions_list_cmd(ctx: click.Context, as_json: bool, limit: int) -> None:
        """Sessions, newest first."""
        from lich._cli_admin import sessions_list

        ctx.exit(sessions_list(get_settings(ctx), as_json or get_settings(ctx).json, limit))

    @sessions_grp.command("show")
    @config_options
    @click.argument("session")
    @click.option("--json", "as_json", is_flag=True, help="As JSON.")
    @click.pass_context
    def sessions_show_cmd(ctx: click.Context, session: str, as_json: bool) -> None:
        """Print a session (an id, a path, or 'latest')."""
        from lich._cli_admin import sessions_show

        ctx.exit(sessions_show(get_settings(ctx), session, as_json or get_settings(ctx).json))

    @sessions_grp.command("path")
    @config_options
    @click.argument("session", required=False)
    @click.pass_context
    def sessions_path_cmd(ctx: click.Context, session: str | None) -> None:
        """The session directory, or the file of SESSION."""
        from lich._cli_admin import sessions_path

        ctx.exit(sessions_path(get_settings(ctx), session))

    cli.seal_builtins()
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
