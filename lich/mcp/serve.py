"""The ``lich mcp serve`` command (click): lich's enabled tools over MCP on stdio.

It takes the configuration flags of every ``lich`` command (``--config``,
``--work-dir``, ``--plugin``, …) plus ``--tools``. Importing this module is
cheap (click only); the MCP SDK and the serving logic (:mod:`lich.mcp.serving`)
are imported when the command runs.

Exit codes: 0 when the client closed the connection, 2 for a usage or
configuration error (or the SDK missing), 130 / 143 after SIGINT / SIGTERM.
"""

from __future__ import annotations

import click

from lich.cli.options import CliSettings, config_options, get_settings

__all__ = ["parse_tool_names", "serve", "serve_command"]


def parse_tool_names(values: tuple[str, ...]) -> list[str] | None:
    """``--tools a,b --tools c`` → ``["a", "b", "c"]``; ``None`` when not given.

    :raises click.BadParameter: the option was given but names no tool.
    """
    if not values:
        return None
    names = [name.strip() for value in values for name in value.split(",")]
    names = [name for name in names if name]
    if not names:
        raise click.BadParameter("names no tool (give a comma-separated list of tool names)",
                                 param_hint="'--tools'")
    return list(dict.fromkeys(names))


@click.command("serve")
@click.option("--tools", "tool_names", metavar="NAME[,NAME...]", multiple=True,
              help="Serve only these of the enabled tools (comma-separated; repeatable).")
@click.option("--allow", "allowed", metavar="NAME[,NAME...]", multiple=True,
              help="Approve the calls of these served tools that ask for approval "
                   "(a deny rule still refuses); every other such call is denied.")
@config_options
@click.pass_context
def serve_command(ctx: click.Context, tool_names: tuple[str, ...],
                  allowed: tuple[str, ...]) -> None:
    """Serve lich's enabled tools to an MCP client over stdin/stdout.

    Every call runs through the plugins' before- and after-hooks and the tools'
    limits, in the work dir (--work-dir); a call that needs approval is denied
    (there is no one to ask) unless --allow names its tool. --yes does not apply:
    it would approve every call of whatever client connects. stdout carries only
    the protocol: logs and warnings go to stderr. See docs/mcp.md.
    """
    names = parse_tool_names(tool_names)
    ctx.exit(serve(get_settings(ctx), names, parse_tool_names(allowed) or []))


def serve(settings: CliSettings, names: list[str] | None, allowed: list[str] | None = None
          ) -> int:
    """Assemble the agent and serve its tools (``names`` of them, when given) until
    the client leaves; the exit code. ``allowed``: the tools whose calls that ask
    are approved (``--allow``)."""
    from lich.cli.common import (
        EXIT_INTERRUPTED,
        EXIT_OK,
        EXIT_TERMINATED,
        EXIT_USAGE,
        CommandError,
        assemble,
        echo_error,
        echo_warning,
    )

    try:
        from lich.mcp import serving
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in ("mcp", "mcp_types"):
            raise
        echo_error("lich mcp serve needs the MCP SDK: pip install 'lich-agent[mcp]'")
        return EXIT_USAGE
    import asyncio
    import sys

    if settings.yes:
        # --yes means "I am here and say yes to everything this run asks"; a served
        # call comes from whatever client connects, which no one on this command line
        # watches: it would approve a terminal or write_file call of any of them.
        echo_error("--yes does not apply to lich mcp serve (it would approve every call "
                   "of any MCP client); name the tools whose calls may run unasked with "
                   "--allow NAME[,NAME...], or allow them in [approvals]")
        return EXIT_USAGE
    if _is_terminal(sys.stdin):
        # Run by hand, it would wait silently for JSON-RPC on the keyboard.
        echo_warning("lich mcp serve speaks MCP on stdin/stdout: an MCP client starts it "
                     "(see docs/mcp.md); Ctrl-C stops it")
    # Taken before anything is loaded: a plugin printing at import must not write
    # into the protocol stream either.
    with serving.protocol_streams() as (reader, writer):
        try:
            # A served session calls no model: serving needs no provider configured.
            built = assemble(settings, service=True, chat=serving.no_model)
        except CommandError as exc:
            return exc.report()
        agent = built.agent
        assert agent is not None
        tools = serving.ServedTools(agent, names)
        served = {t.name for t in tools.list()}
        not_served = [n for n in (allowed or []) if n not in served]
        if not_served:
            asyncio.run(agent.aclose())
            echo_error(f"--allow: {', '.join(not_served)} is not a served tool "
                       f"(served: {', '.join(sorted(served)) or 'none'})")
            return EXIT_USAGE
        if allowed:
            built.host.register_object(serving.AllowListApprover(allowed),
                                       serving.ALLOW_APPROVER)
        unknown = tools.unknown()
        if unknown:
            asyncio.run(agent.aclose())
            enabled = ", ".join(t.name for t in agent.tools.list()) or "none"
            echo_error(f"--tools: no enabled tool named {', '.join(unknown)} "
                       f"(enabled: {enabled}; see `lich tools`)")
            return EXIT_USAGE
        if not tools.list():
            echo_warning("no tools enabled: the MCP client will see none (see `lich tools`)")
        stopped_by = asyncio.run(serving.serve_stdio(agent, tools, reader, writer))
    if stopped_by == "SIGINT":
        return EXIT_INTERRUPTED
    if stopped_by == "SIGTERM":
        return EXIT_TERMINATED
    return EXIT_OK


def _is_terminal(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):  # no stream, or a closed one
        return False
