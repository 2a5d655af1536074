"""``lich sessions``: the recorded conversations (JSONL transcripts): list, show, path."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import click

from lich.cli._output import add_row, load_or_report, out_console, print_json, print_table
from lich.cli.common import EXIT_OK, EXIT_USAGE, echo_error, echo_warning
from lich.cli.options import Settings, config_options, get_settings
from lich.guards import truncate_text

__all__ = ["sessions_group", "sessions_list", "sessions_path", "sessions_show"]


@click.group("sessions")
def sessions_group() -> None:
    """Recorded conversations (JSONL transcripts)."""


@sessions_group.command("list")
@config_options
@click.option("--json", "as_json", is_flag=True, help="As JSON.")
@click.option("--limit", "-n", type=int, default=50, show_default=True,
              help="Show at most N sessions (0: all).")
@click.pass_context
def sessions_list_command(ctx: click.Context, as_json: bool, limit: int) -> None:
    """Sessions, newest first."""
    ctx.exit(sessions_list(get_settings(ctx), as_json or get_settings(ctx).json, limit))


@sessions_group.command("show")
@config_options
@click.argument("session")
@click.option("--json", "as_json", is_flag=True, help="As JSON.")
@click.pass_context
def sessions_show_command(ctx: click.Context, session: str, as_json: bool) -> None:
    """Print a session (an id, a path, or 'latest')."""
    ctx.exit(sessions_show(get_settings(ctx), session, as_json or get_settings(ctx).json))


@sessions_group.command("path")
@config_options
@click.argument("session", required=False)
@click.pass_context
def sessions_path_command(ctx: click.Context, session: str | None) -> None:
    """The session directory, or the file of SESSION."""
    ctx.exit(sessions_path(get_settings(ctx), session))


def _store(settings: Settings) -> Any:
    from lich.sessions import SessionStore

    loaded = load_or_report(settings)
    return None if loaded is None else SessionStore(loaded.config.session_dir)


def sessions_list(settings: Settings, as_json: bool, limit: int) -> int:
    """``lich sessions list``: newest first."""
    store = _store(settings)
    if store is None:
        return EXIT_USAGE
    sessions = store.list()[: limit if limit > 0 else None]
    if as_json:
        print_json([{"session_id": s.session_id, "path": str(s.path), "title": s.title,
                      "modified": s.modified, "size": s.size} for s in sessions])
        return EXIT_OK
    if not sessions:
        click.echo(f"no sessions in {store.directory}", err=True)
        return EXIT_OK
    from rich.table import Column, Table

    table = Table(*(Column(h, no_wrap=True) for h in ("session", "modified", "size")),
                  "first message", box=None, pad_edge=False)
    for s in sessions:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.modified))
        add_row(table, s.session_id, when, f"{s.size:,}", s.title)
    print_table(out_console(), table)
    return EXIT_OK


def sessions_path(settings: Settings, ref: str | None) -> int:
    """``lich sessions path [ID]``: the session dir, or one session's file."""
    from lich.sessions import SessionNotFound

    store = _store(settings)
    if store is None:
        return EXIT_USAGE
    if ref is None:
        click.echo(str(store.directory))
        return EXIT_OK
    try:
        click.echo(str(store.path_for(store.resolve(ref))))
    except (SessionNotFound, ValueError) as exc:
        echo_error(str(exc))
        return EXIT_USAGE
    return EXIT_OK


def _clip(text: str, limit: int) -> str:
    return truncate_text(text.rstrip(), limit, style="inline")


def sessions_show(settings: Settings, ref: str, as_json: bool) -> int:
    """``lich sessions show ID``: the conversation, readable (or as JSON)."""
    from lich import serialization
    from lich.sessions import SessionNotFound

    store = _store(settings)
    if store is None:
        return EXIT_USAGE
    try:
        contents = store.read(ref)
    except (SessionNotFound, ValueError, OSError) as exc:
        echo_error(str(exc))
        return EXIT_USAGE
    if as_json:
        print_json({
            "session_id": contents.session_id,
            "path": str(contents.path),
            "messages": [serialization.message_to_dict(m) for m in contents.messages],
            "problems": list(contents.problems),
            "torn_tail": contents.torn_tail,
        })
        return EXIT_OK
    from rich.text import Text

    console = out_console()

    def line(text: str, style: str = "") -> None:
        console.print(Text(text, style=style), soft_wrap=True)

    line(f"session {contents.session_id}  ({contents.path})", "bold")
    for record in contents.records:
        kind = record.get("kind")
        if kind == "message":
            _show_message(line, record.get("message") or {})
        elif kind == "meta":
            _show_meta(line, record)
        elif kind == "compact":
            line(f"── context compressed ({len(record.get('messages') or [])} messages kept)",
                 "dim")
        elif kind == "event":
            event = record.get("event") or {}
            if event.get("type") == "tool_call_end" and event.get("blocked_by"):
                line(f"   (blocked by plugin {event['blocked_by']})", "yellow")
    for problem in contents.problems:
        echo_warning(problem)
    if contents.torn_tail:
        echo_warning("the last line was cut off (the process died while writing it); skipped")
    return EXIT_OK


def _show_message(line: Any, message: Mapping[str, Any]) -> None:
    role = message.get("role")
    content = str(message.get("content") or "")
    if role == "system":
        line(f"system: {_clip(content, 200)}", "dim")
    elif role == "user":
        line(f"you: {content}", "bold cyan")
    elif role == "assistant":
        if content:
            line(f"lich: {content}")
        for call in message.get("tool_calls") or ():
            from lich.cli._render import args_preview

            line(f"  → {call.get('name')}({args_preview(call.get('args') or {})})", "magenta")
    elif role == "tool":
        mark, style = ("✗", "red") if message.get("is_error") else ("✓", "green")
        line(f"  {mark} {message.get('name')}: {_clip(content, 600)}", style)


def _show_meta(line: Any, record: Mapping[str, Any]) -> None:
    event = record.get("event")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(record.get("ts") or 0)))
    if event == "run_start":
        model = record.get("model") or "?"
        line(f"── run {record.get('run_id')} started {when} (model {model})", "dim")
    elif event == "run_end":
        usage = record.get("usage") or {}
        error = f"; error: {record['error']}" if record.get("error") else ""
        line(f"── run ended: {record.get('stopped_reason')} after {record.get('turns_used')} "
             f"turns, {usage.get('total_tokens', 0)} tokens{error}", "dim")
