"""``lich sandbox``: the sandbox plugin's commands (:data:`sandbox_group`).

* ``lich sandbox doctor`` — what the probe found (bwrap, its version, whether it can
  create its namespaces here, and why not), and the settings in effect; exits 1 when
  the sandbox cannot run.
* ``lich sandbox -- CMD [ARGS…]`` — run one command in the sandbox of the current
  profile, in the work dir, as ``terminal`` would run it sandboxed; exits with its status.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

import click

from lich.cli.options import get_settings, json_option, setup_options

__all__ = ["sandbox_group"]


class _SandboxGroup(click.Group):
    """A group whose ``--`` starts a command to run instead of naming a subcommand."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:
            at = args.index("--")
            # What follows `--` is the command (never options of lich's, nor a subcommand).
            ctx.meta["lich.sandbox.command"] = args[at + 1:]
            args = args[:at]
        return super().parse_args(ctx, args)


@click.group("sandbox", cls=_SandboxGroup, invoke_without_command=True)
@setup_options
@click.pass_context
def sandbox_group(ctx: click.Context) -> None:
    """The OS sandbox tool processes and MCP servers run in: `lich sandbox doctor` shows
    whether this machine can run it; `lich sandbox -- CMD` runs CMD in it."""
    command: list[str] | None = ctx.meta.get("lich.sandbox.command")
    if ctx.invoked_subcommand is not None:
        if command is not None:
            raise click.UsageError(f"`--` runs a command: not with `{ctx.invoked_subcommand}`")
        return
    if command is None:
        click.echo(ctx.get_help())
        ctx.exit(0)
    if not command:
        raise click.UsageError("no command after `--`")
    ctx.exit(_run(get_settings(ctx), command))


def _run(settings: Any, command: list[str]) -> int:
    from lich.cli.common import EXIT_STOPPED, EXIT_USAGE, echo_error
    from lich.cli.output import load_or_report
    from lich.config import ConfigError
    from lich.sandbox.bwrap import SandboxError, probe
    from lich.sandbox.plugin import runner_for, settings_of

    loaded = load_or_report(settings)
    if loaded is None:
        return EXIT_USAGE
    config = loaded.config
    try:
        sandbox = settings_of(config)
    except ConfigError as exc:
        echo_error(str(ConfigError(exc.problems, loaded.file)))
        return EXIT_USAGE
    if sandbox.profile == "full":
        echo_error('the profile is "full": no sandbox to run the command in')
        return EXIT_USAGE
    found = probe()
    if not found.ok:
        echo_error(found.line())
        return EXIT_STOPPED
    env = dict(os.environ)
    try:
        argv = runner_for(config, sandbox, found).argv(command, config.work_dir, env)
    except SandboxError as exc:
        echo_error(f"sandbox: {exc}")
        return EXIT_STOPPED
    try:
        return subprocess.run(argv, env=env, check=False).returncode
    except OSError as exc:
        echo_error(f"sandbox: {exc}")
        return EXIT_STOPPED


@sandbox_group.command("doctor")
@setup_options
@json_option("As JSON: the probe's findings and the settings.")
@click.pass_context
def doctor_command(ctx: click.Context) -> None:
    """What the probe found: bwrap, its version, whether it can create its namespaces on
    this machine (a real sandboxed `true`), and the settings in effect. Exits 1 when the
    sandbox cannot run here."""
    from lich.cli.common import EXIT_OK, EXIT_STOPPED, EXIT_USAGE, echo_error
    from lich.cli.output import load_or_report, print_json
    from lich.config import ConfigError
    from lich.sandbox.bwrap import probe
    from lich.sandbox.plugin import settings_of

    settings = get_settings(ctx)
    loaded = load_or_report(settings)
    if loaded is None:
        ctx.exit(EXIT_USAGE)
    assert loaded is not None
    try:
        sandbox = settings_of(loaded.config)
    except ConfigError as exc:
        echo_error(str(ConfigError(exc.problems, loaded.file)))
        ctx.exit(EXIT_USAGE)
    found = probe()
    if settings.json:
        print_json({"ok": found.ok, "bwrap": found.bwrap, "version": found.version,
                    "reason": found.reason or None, "mode": sandbox.mode,
                    "profile": sandbox.profile, "read_paths": list(sandbox.read_paths)})
    else:
        click.echo(f"bwrap:    {found.bwrap or 'not found'}")
        click.echo(f"version:  {found.version or '-'}")
        click.echo(f"probe:    {'ok (a sandboxed true ran)' if found.ok else found.reason}")
        click.echo(f"mode:     {sandbox.mode}")
        click.echo(f"profile:  {sandbox.profile}")
        if sandbox.mode == "off":
            click.echo('(mode = "off": tool processes are not sandboxed; set '
                       '[sandbox] mode = "auto" or "required")')
        elif not found.ok:
            click.echo("tool processes run unsandboxed" if sandbox.mode == "auto" else
                       "runs stop: the sandbox is required")
    ctx.exit(EXIT_OK if found.ok else EXIT_STOPPED)
