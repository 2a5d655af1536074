"""``lich mcp``: the command group of the builtin ``mcp`` plugin (:data:`mcp_group`).

Commands:

* ``lich mcp list`` — each configured server's state (connected, failed and why,
  disabled), its tools as lich names them and their token cost; ``--json`` too.
* ``lich mcp import FILE [--write CONFIG]`` — a ``.mcp.json`` / Claude Desktop
  ``mcpServers`` file as ``[mcp.servers.<name>]`` TOML tables: printed, or appended
  to a lich config (atomically, its comments kept).
* ``lich mcp serve`` — lich's own tools served over MCP (:mod:`lich.mcp.serve`,
  added to this group where the two meet).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from lich.cli.options import get_settings, json_option, setup_options
from lich.mcp.serve import serve_command

__all__ = ["convert_mcp_json", "mcp_group"]


@click.group("mcp")
def mcp_group() -> None:
    """MCP servers: their state and tools, importing .mcp.json files, and serving lich's
    own tools to MCP clients (`lich mcp serve`)."""


@mcp_group.command("list")
@setup_options
@json_option("As JSON: one object per server, with its tools.")
@click.pass_context
def list_command(ctx: click.Context) -> None:
    """Each configured server's state, its tools and their token cost. Starts the
    servers (in parallel, as a run does) and stops them again; exits 1 when an
    enabled server did not start."""
    settings = get_settings(ctx)
    ctx.exit(_list(settings, bool(settings.json)))


def _list(settings: Any, as_json: bool) -> int:
    from lich.cli.common import EXIT_OK, EXIT_STOPPED, EXIT_USAGE, echo_error
    from lich.cli.output import add_row, load_or_report, out_console, print_json, print_table
    from lich.config import ConfigError
    from lich.mcp.config import parse_mcp_settings
    from lich.mcp.plugin import missing_sdk_message, open_runtime

    loaded = load_or_report(settings)
    if loaded is None:
        return EXIT_USAGE
    config = loaded.config
    try:
        mcp = parse_mcp_settings(config.table("mcp"))
    except ConfigError as exc:
        echo_error(str(ConfigError(exc.problems, loaded.file)))
        return EXIT_USAGE
    rows: list[dict[str, Any]] = []
    runtime = None
    if mcp.enabled():
        try:
            from lich.cli.common import host_for

            # Through the runner a run would use (a sandbox plugin's), not around it.
            runner = host_for(settings, config).make_process_runner(config)
            # A diagnosis: every server started, whatever the cache holds.
            runtime = open_runtime(mcp, config, runner, cached=False)
        except ImportError:
            echo_error(missing_sdk_message())
            return EXIT_USAGE
        except ConfigError as exc:  # a runner that cannot start (a required sandbox)
            echo_error(str(exc))
            return EXIT_USAGE
    try:
        rows = _rows(mcp, runtime)
    finally:
        if runtime is not None:
            runtime.close()
    failed = any(r["status"] not in ("connected", "disabled") for r in rows)
    if as_json:
        print_json(rows)
        return EXIT_STOPPED if failed else EXIT_OK
    if not rows:
        click.echo("no MCP servers configured (add [mcp.servers.<name>] tables; "
                   "`lich mcp import` converts a .mcp.json)", err=True)
        return EXIT_OK
    from rich.table import Column, Table
    from rich.text import Text

    table = Table(Column("server", no_wrap=True), Column("status", no_wrap=True),
                  Column("tools", justify="right"), Column("tokens", justify="right"),
                  "details", box=None, pad_edge=False)
    styles = {"connected": "green", "disabled": "dim"}
    for row in rows:
        tools = ", ".join(t["name"] for t in row["tools"])
        details = row["error"] or tools
        if row["task_only"]:
            details += ("; not offered (task-only: lich does not call tools as tasks): "
                        + ", ".join(row["task_only"]))
        if row["collisions"]:
            details += "; " + "; ".join(row["collisions"])
        add_row(table, row["name"], Text(row["status"], style=styles.get(row["status"], "red")),
                str(len(row["tools"])), str(row["tokens"]), details)
    console = out_console()
    print_table(console, table)
    total = sum(r["tokens"] for r in rows)
    console.print(f"MCP tool definitions: ~{total} tokens of context_budget_tokens "
                  f"{config.context_budget_tokens}", markup=False, soft_wrap=True)
    return EXIT_STOPPED if failed else EXIT_OK


def _rows(mcp: Any, runtime: Any) -> list[dict[str, Any]]:
    from lich.context import schema_tokens

    entries: list[Any] = []
    collisions: list[Any] = []
    states: dict[str, Any] = {}
    if runtime is not None:
        from lich.mcp.tools import build_entries

        states = {s.name: s for s in runtime.states()}
        entries, collisions = build_entries(runtime, list(states.values()))
    rows = []
    for name, server in mcp.servers.items():
        state = states.get(name)
        own = [e for e in entries if e.server == name]
        tools = [{"name": e.tool.name, "remote": e.remote,
                  "tokens": schema_tokens([e.tool.definition()]),
                  "requires_approval": e.tool.requires_approval} for e in own]
        rows.append({
            "name": name,
            "transport": server.transport,
            "status": state.status if state is not None else "disabled",
            "error": state.error if state is not None else None,
            "protocol_version": state.protocol_version if state is not None else None,
            "server": state.server_name if state is not None else None,
            "server_version": state.server_version if state is not None else None,
            "log": state.log_path if state is not None else None,
            "tools": tools,
            "tokens": schema_tokens([e.tool.definition() for e in own]),
            "collisions": [c.message for c in collisions if c.server == name],
            "task_only": list(state.task_only) if state is not None else [],
        })
    return rows


@mcp_group.command("import")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--write", "target", type=click.Path(dir_okay=False, path_type=Path),
              help="Append the tables to this TOML config instead of printing them "
                   "(atomically; its comments and the rest are kept; refused when it "
                   "has a server of the same name).")
def import_command(file: Path, target: Path | None) -> None:
    """Print FILE's servers (a .mcp.json or Claude Desktop config: "mcpServers") as
    [mcp.servers.<name>] TOML tables, to paste into .lich/config.toml, or append them
    to a config with --write. What cannot be carried over is said on stderr."""
    from lich.cli.common import EXIT_USAGE, echo_error, echo_warning

    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        echo_error(f"cannot read {file}: {exc}")
        raise click.exceptions.Exit(EXIT_USAGE) from None
    except ValueError as exc:
        echo_error(f"{file}: not valid JSON: {exc}")
        raise click.exceptions.Exit(EXIT_USAGE) from None
    try:
        text, warnings = convert_mcp_json(data)
    except ValueError as exc:
        echo_error(f"{file}: {exc}")
        raise click.exceptions.Exit(EXIT_USAGE) from None
    for warning in warnings:
        echo_warning(warning)
    if target is None:
        click.echo(text, nl=False)
        return
    try:
        count = _append_servers(target, text, source=file.name)
    except ValueError as exc:
        echo_error(f"{target}: {exc}")
        raise click.exceptions.Exit(EXIT_USAGE) from None
    except OSError as exc:
        echo_error(f"cannot write {target}: {exc}")
        raise click.exceptions.Exit(EXIT_USAGE) from None
    click.echo(f"wrote {count} server(s) to {target}")


def _append_servers(target: Path, tables: str, *, source: str) -> int:
    """Append the TOML ``tables`` to ``target`` whole or not at all; the number of
    servers added.

    Appending keeps every comment and line of the file as it was. The result is
    parsed before anything is written: a server name the file already has, or a file
    whose ``[mcp]`` is written in a way new tables cannot extend (an inline table),
    is refused, naming the problem.

    :raises ValueError: the file is not valid TOML, or the tables cannot be added.
    """
    import tomllib

    from lich.cli.config import write_text_atomically

    new = tomllib.loads(tables).get("mcp", {}).get("servers", {})
    old_text = target.read_text(encoding="utf-8") if target.exists() else ""
    try:
        old = tomllib.loads(old_text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"not valid TOML: {exc}") from None
    mcp = old.get("mcp", {})
    present = mcp.get("servers", {}) if isinstance(mcp, dict) else {}
    taken = sorted(set(new) & set(present if isinstance(present, dict) else {}))
    if taken:
        raise ValueError(f"already has server(s) {', '.join(taken)}; nothing written "
                         "(rename them in the source, or edit the file by hand)")
    prefix = old_text
    if prefix:
        # The file's last line ended, then one blank line before the new tables.
        prefix += "\n" if prefix.endswith("\n") else "\n\n"
    text = f"{prefix}# Imported from {source} by `lich mcp import`.\n{tables}"
    try:
        merged = tomllib.loads(text).get("mcp", {}).get("servers", {})
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"its [mcp] table cannot be extended by new tables ({exc}); "
                         "nothing written (add the printed tables by hand)") from None
    if not set(new) <= set(merged):
        raise ValueError("the tables would not be read as servers; nothing written")
    write_text_atomically(target, text)
    return len(new)


_KNOWN = {"command", "args", "env", "url", "headers", "type", "disabled", "cwd"}


def convert_mcp_json(data: Any) -> tuple[str, list[str]]:
    """A ``.mcp.json`` / Claude Desktop document as ``[mcp.servers.<name>]`` TOML, and
    warnings about what did not carry over.

    ``${VAR}`` and ``${VAR:-default}`` are kept as they are: lich expands the same
    syntax. A server of ``type = "sse"`` (a transport lich does not speak) is kept
    with ``enabled = false``; unknown keys are left out and named in a warning.

    :raises ValueError: the document has no ``mcpServers`` table, or a server is not
        a table.
    """
    import tomli_w

    if not isinstance(data, dict) or not isinstance(data.get("mcpServers"), dict):
        raise ValueError('no "mcpServers" object (expected a .mcp.json or Claude Desktop '
                         "config)")
    warnings: list[str] = []
    servers: dict[str, dict[str, Any]] = {}
    for name, entry in data["mcpServers"].items():
        if not isinstance(entry, dict):
            raise ValueError(f"mcpServers.{name}: expected an object")
        table: dict[str, Any] = {}
        kind = entry.get("type")
        for key in ("command", "args", "env", "cwd", "url", "headers"):
            if key in entry and entry[key] not in (None, "", [], {}):
                table[key] = entry[key]
        if "command" not in table and "url" not in table:
            raise ValueError(f"mcpServers.{name}: has neither command nor url")
        if kind == "sse":
            table["enabled"] = False
            warnings.append(f"{name}: an SSE server; lich speaks streamable HTTP only, so it "
                            "is imported disabled (check whether the server offers /mcp)")
        elif kind not in (None, "stdio", "http", "streamable-http", "streamableHttp"):
            warnings.append(f"{name}: unknown type {kind!r}; imported as "
                            f"{'stdio' if 'command' in table else 'HTTP'}")
        if entry.get("disabled") is True:
            table["enabled"] = False
        unknown = sorted(set(entry) - _KNOWN)
        if unknown:
            warnings.append(f"{name}: left out {', '.join(unknown)} (no lich equivalent)")
        servers[str(name)] = table
    if not servers:
        warnings.append("mcpServers is empty: nothing to import")
        return "", warnings
    return tomli_w.dumps({"mcp": {"servers": servers}}), warnings


# The serving command is its own module; like the rest it imports the SDK only when run.
mcp_group.add_command(serve_command)
