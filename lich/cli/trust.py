"""``lich trust [DIR]``: trust a project's ``.lich/config.toml`` (see :mod:`lich.trust`).

``lich trust`` trusts the project lich would use from the current (or the given)
directory, as its config is now; ``--list`` shows the trusted projects and whether
their config changed since; ``--remove`` forgets one.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from lich.cli.common import EXIT_OK, EXIT_STOPPED, EXIT_USAGE, echo_error, echo_warning
from lich.cli.options import get_settings, json_option

__all__ = ["trust_command"]


@click.command("trust")
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@click.option("--list", "list_", is_flag=True, help="List the trusted projects.")
@click.option("--remove", is_flag=True, help="Stop trusting the project of DIR.")
@json_option()
@click.pass_context
def trust_command(ctx: click.Context, directory: str | None, list_: bool, remove: bool) -> None:
    """Trust the project's .lich/config.toml in DIR (default: here) or a parent.

    Until a project is trusted, lich ignores what its config would run or widen:
    plugins other than yours, MCP servers, providers' base_url / api_key_env /
    headers, approvals, tool limits, telemetry exporters and the tables plugins read.
    Trust is kept with a hash of the config: when the config changes, lich asks again.
    For CI, list directories in `trusted_dirs` in the user config, or pass --trust.
    """
    settings = get_settings(ctx)
    if list_ and (remove or directory):
        echo_error("--list takes no DIR and no --remove")
        ctx.exit(EXIT_USAGE)
    if list_:
        ctx.exit(_list(settings.json))
    ctx.exit(_change(Path(directory or settings.work_dir or os.getcwd()), remove, settings.json))


def _list(as_json: bool) -> int:
    from lich.trust import config_digest, trust_file, trusted_entries

    rows = []
    for project, entry in sorted(trusted_entries().items()):
        config = Path(entry.get("config", ""))
        digest = config_digest(config)
        state = ("missing" if not digest else
                 "trusted" if digest == entry.get("sha256") else "changed")
        rows.append({"project": project, "config": str(config), "state": state,
                     "trusted_at": entry.get("trusted_at", "")})
    if as_json:
        import json

        click.echo(json.dumps({"file": str(trust_file()), "projects": rows}))
        return EXIT_OK
    if not rows:
        click.echo(f"no trusted projects ({trust_file()})", err=True)
        return EXIT_OK
    for row in rows:
        click.echo(f"{row['project']}\t{row['state']}\t{row['trusted_at']}")
    return EXIT_OK


def _change(directory: Path, remove: bool, as_json: bool) -> int:
    from lich.config import ConfigError, load_config, locate_config
    from lich.trust import forget, record_trust, trust_file, trust_of

    if not directory.is_dir():
        echo_error(f"{directory}: no such directory")
        return EXIT_USAGE
    directory = directory.resolve()
    if remove:
        found = forget(directory)
        if not found:
            # The project lich would use from there (DIR may be below it).
            location = locate_config(directory)
            if location is not None and location.project_dir is not None:
                found = forget(location.project_dir)
                directory = location.project_dir
        if not found:
            echo_error(f"{directory} is not a trusted project (`lich trust --list`)")
            return EXIT_STOPPED
        click.echo(f"no longer trusted: {directory}")
        return EXIT_OK
    passed_over: list[str] = []
    try:
        location = locate_config(directory, passed_over=passed_over)
    except ConfigError as exc:
        echo_error(str(exc))
        return EXIT_USAGE
    for line in passed_over:
        echo_warning(line)
    if location is None or location.project_dir is None:
        echo_error(f"no project config (.lich/config.toml) in {directory} or its parents "
                   "that lich would read; nothing to trust")
        return EXIT_STOPPED
    enables: tuple[str, ...] = ()
    try:
        # What the untrusted load leaves out is exactly what trusting enables.
        shown = load_config(work_dir=directory, trust=False).trust
        enables = shown.ignored if shown is not None else ()
    except ConfigError as exc:
        echo_warning(f"{exc} (trusted anyway: lich reports it when it loads the config)")
    before = trust_of(location.project_dir, location.path, env={})
    record_trust(location.project_dir, location.path)
    if as_json:
        import json

        click.echo(json.dumps({"project": str(location.project_dir),
                               "config": str(location.path), "enables": list(enables),
                               "was_trusted": before.trusted, "file": str(trust_file())}))
        return EXIT_OK
    click.echo(f"trusted: {location.project_dir} (its config {location.path}, as it is now)")
    if enables:
        click.echo(f"this enables: {', '.join(enables)}", err=True)
    return EXIT_OK
