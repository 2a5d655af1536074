"""``lich sessions``: the recorded conversations (JSONL transcripts, or the configured
``[session_store]``): list, show, path, and the housekeeping: rm and prune."""

from __future__ import annotations

import contextlib
import functools
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec

import click

from lich.cli.common import EXIT_OK, EXIT_STOPPED, EXIT_USAGE, echo_error, echo_warning
from lich.cli.options import CliSettings, get_settings, json_option, setup_options
from lich.cli.output import add_row, load_or_report, out_console, print_json, print_table
from lich.guards import truncate_text
from lich.visible import visible

if TYPE_CHECKING:
    from lich.sessions import SessionInfo, SessionStore

__all__ = [
    "approvals_of",
    "parse_duration",
    "sessions_group",
    "sessions_list",
    "sessions_path",
    "sessions_prune",
    "sessions_rm",
    "sessions_show",
    "status_label",
]


@click.group("sessions")
@json_option()
def sessions_group() -> None:
    """Recorded conversations (JSONL transcripts, or the [session_store]).

    A SESSION is an id, the start of one id, a session file's path, or 'latest'.
    """


@sessions_group.command("list")
@setup_options
@json_option()
@click.option("--limit", "-n", type=int, default=50, show_default=True,
              help="Show at most N sessions (0: all).")
@click.pass_context
def sessions_list_command(ctx: click.Context, limit: int) -> None:
    """Sessions, newest first, with how their last run ended."""
    settings = get_settings(ctx)
    ctx.exit(sessions_list(settings, settings.json, limit))


@sessions_group.command("show")
@setup_options
@json_option()
@click.argument("session")
@click.pass_context
def sessions_show_command(ctx: click.Context, session: str) -> None:
    """Print a session."""
    settings = get_settings(ctx)
    ctx.exit(sessions_show(settings, session, settings.json))


@sessions_group.command("path")
@setup_options
@json_option()
@click.argument("session", required=False)
@click.pass_context
def sessions_path_command(ctx: click.Context, session: str | None) -> None:
    """The session directory, or the file of SESSION."""
    ctx.exit(sessions_path(get_settings(ctx), session))


@sessions_group.command("rm")
@setup_options
@json_option()
@click.argument("sessions", nargs=-1, required=True, metavar="SESSION...")
@click.option("--dry-run", is_flag=True, help="Print what would be removed; remove nothing.")
@click.pass_context
def sessions_rm_command(ctx: click.Context, sessions: tuple[str, ...], dry_run: bool) -> None:
    """Remove sessions. Every SESSION is checked first: one that is unknown or
    ambiguous is an error (exit 2) and nothing is removed."""
    ctx.exit(sessions_rm(get_settings(ctx), sessions, dry_run=dry_run))


DURATION_UNITS: Mapping[str, int] = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.I)


def parse_duration(text: str) -> float:
    """Seconds in a duration such as ``90m``, ``12h``, ``30d`` or ``2w`` (``s`` too).

    :raises ValueError: ``text`` is not a number followed by one of those units.
    """
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration: a number and a unit, "
                         "s, m, h, d or w (90m, 12h, 30d)")
    return float(match.group(1)) * DURATION_UNITS[match.group(2).lower()]


def _duration_option(_ctx: click.Context, _param: click.Parameter,
                     value: str | None) -> float | None:
    try:
        return None if value is None else parse_duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@sessions_group.command("prune")
@setup_options
@json_option()
@click.option("--older-than", "older_than", callback=_duration_option, metavar="DURATION",
              help="Sessions not written to for this long (90m, 12h, 30d, 2w).")
@click.option("--failed", is_flag=True, help="Sessions whose last run failed.")
@click.option("--dry-run", is_flag=True, help="Print what would be removed; remove nothing.")
@click.pass_context
def sessions_prune_command(ctx: click.Context, older_than: float | None, failed: bool,
                           dry_run: bool) -> None:
    """Remove old or failed sessions (both given: sessions that are both).
    Prints each one removed."""
    ctx.exit(sessions_prune(get_settings(ctx), older_than=older_than, failed=failed,
                            dry_run=dry_run))


@contextlib.contextmanager
def _store(settings: CliSettings) -> Iterator[SessionStore | None]:
    """The configured session store (``None`` after saying why there is none), closed
    when the command is done with it."""
    from lich.cli.common import host_for, quiet_plugin_log, warn_plugin_failures
    from lich.config import ConfigError
    from lich.sessions import DEFAULT_STORE_KIND, open_session_store

    loaded = load_or_report(settings)
    if loaded is None:
        yield None
        return
    # The default store needs no plugin: load them only for another kind.
    host = (None if loaded.config.table("session_store").get("kind", DEFAULT_STORE_KIND)
            == DEFAULT_STORE_KIND else host_for(settings, loaded.config))
    try:
        with quiet_plugin_log():
            store = open_session_store(loaded.config, host)
    except ConfigError as exc:
        if host is not None:
            warn_plugin_failures(host)  # a store plugin that failed to load: the likely cause
        echo_error(str(exc))
        yield None
        return
    try:
        yield store
    finally:
        store.close()


_P = ParamSpec("_P")


def _store_errors_reported(fn: Callable[_P, int]) -> Callable[_P, int]:
    """A store that fails mid-command (its database went away) is one error line, exit 1."""
    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> int:
        from lich.sessions import StoreError

        try:
            return fn(*args, **kwargs)
        except StoreError as exc:
            echo_error(f"session store: {exc}")
            return EXIT_STOPPED
    return wrapper


def status_label(info: SessionInfo) -> str:
    """How the session's last run ended, in the words ``lich sessions list`` uses."""
    if info.failed:
        return "failed, no answer" if not info.answered else "failed"
    return {"open": "unfinished", "": ""}.get(info.status, info.status)


def _info_json(s: SessionInfo) -> dict[str, Any]:
    return {"session_id": s.session_id, "path": None if s.path is None else str(s.path),
            "location": s.location, "title": s.title,
            "modified": s.modified, "size": s.size, "status": s.status,
            "answered": s.answered, "failed_unanswered": s.failed_unanswered,
            "cost_usd": s.cost_usd}


@_store_errors_reported
def sessions_list(settings: CliSettings, as_json: bool, limit: int) -> int:
    """``lich sessions list``: newest first."""
    with _store(settings) as store:
        if store is None:
            return EXIT_USAGE
        sessions = store.list()[: limit if limit > 0 else None]
        where = store.describe()
    if as_json:
        print_json([_info_json(s) for s in sessions])
        return EXIT_OK
    if not sessions:
        click.echo(f"no sessions in {where}", err=True)
        return EXIT_OK
    from rich.table import Column, Table

    from lich.money import format_usd

    headers = ("session", "modified", "size", "status", "cost")
    table = Table(*(Column(h, no_wrap=True) for h in headers),
                  "first message", box=None, pad_edge=False)
    for s in sessions:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.modified))
        # Blank when unknown: sessions recorded without a pricing plugin have no cost.
        cost = format_usd(s.cost_usd) if s.cost_usd is not None else ""
        add_row(table, s.session_id, when, f"{s.size:,}", status_label(s), cost, s.title)
    print_table(out_console(), table)
    return EXIT_OK


@_store_errors_reported
def sessions_path(settings: CliSettings, ref: str | None) -> int:
    """``lich sessions path [ID]``: the session dir, or one session's file (for another
    store: where it keeps the sessions, or one of them)."""
    from lich.sessions import SessionNotFound

    with _store(settings) as store:
        if store is None:
            return EXIT_USAGE
        try:
            path = store.describe() if ref is None else store.location(store.resolve(ref))
        except (SessionNotFound, ValueError) as exc:
            echo_error(str(exc))
            return EXIT_USAGE
    if settings.json:
        print_json({"path": str(path)})
    else:
        click.echo(str(path))
    return EXIT_OK


def _remove(settings: CliSettings, store: SessionStore, doomed: Sequence[SessionInfo],
            *, dry_run: bool) -> int:
    """Remove ``doomed`` (or, with ``dry_run``, only say so), one line per session."""
    from lich.sessions import SessionNotFound

    removed: list[SessionInfo] = []
    failures = 0
    for info in doomed:
        if not dry_run:
            try:
                store.remove(info.session_id)
            except (OSError, ValueError, SessionNotFound) as exc:
                echo_error(f"cannot remove {info.session_id}: {exc}")
                failures += 1
                continue
        removed.append(info)
    if settings.json:
        print_json({"dry_run": dry_run, "removed": [_info_json(s) for s in removed]})
    else:
        verb = "would remove" if dry_run else "removed"
        for info in removed:
            # The title is the first message's text: a chat user's or a model's.
            click.echo(f"{verb} {info.session_id}  {visible(info.title)}".rstrip())
        if not removed:
            click.echo("no sessions to remove", err=True)
    return EXIT_USAGE if failures else EXIT_OK


@_store_errors_reported
def sessions_rm(settings: CliSettings, refs: Sequence[str], *, dry_run: bool = False) -> int:
    """``lich sessions rm SESSION...``: all or nothing — every ref resolves, or none goes."""
    with _store(settings) as store:
        if store is None:
            return EXIT_USAGE
        return _rm(settings, store, refs, dry_run=dry_run)


def _rm(settings: CliSettings, store: SessionStore, refs: Sequence[str], *,
        dry_run: bool) -> int:
    from lich.sessions import SessionNotFound

    ids: list[str] = []
    problems = 0
    for ref in refs:
        try:
            sid = store.resolve(ref)
        except (SessionNotFound, ValueError) as exc:
            echo_error(str(exc))
            problems += 1
            continue
        if sid not in ids:
            ids.append(sid)
    if problems:
        echo_error(f"nothing removed: {problems} of {len(refs)} sessions named are not "
                   "(uniquely) found")
        return EXIT_USAGE
    by_id = {s.session_id: s for s in store.list()}
    return _remove(settings, store, [by_id[i] for i in ids if i in by_id], dry_run=dry_run)


@_store_errors_reported
def sessions_prune(settings: CliSettings, *, older_than: float | None, failed: bool,
                   dry_run: bool = False) -> int:
    """``lich sessions prune``: remove the sessions older than ``older_than`` seconds
    and/or whose last run failed."""
    if older_than is None and not failed:
        echo_error("prune needs --older-than DURATION and/or --failed "
                   "(to remove every session: lich sessions rm, or the directory itself)")
        return EXIT_USAGE
    with _store(settings) as store:
        if store is None:
            return EXIT_USAGE
        cutoff = time.time() - older_than if older_than is not None else None
        doomed = [s for s in store.list()
                  if (cutoff is None or s.modified < cutoff) and (not failed or s.failed)]
        return _remove(settings, store, doomed, dry_run=dry_run)


def _clip(text: str, limit: int) -> str:
    return truncate_text(text.rstrip(), limit, style="inline")


@_store_errors_reported
def sessions_show(settings: CliSettings, ref: str, as_json: bool) -> int:
    """``lich sessions show ID``: the conversation, readable (or as JSON)."""
    from lich import serialization
    from lich.sessions import SessionNotFound, session_cost

    with _store(settings) as store:
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
            "path": None if contents.path is None else str(contents.path),
            "location": contents.location,
            "messages": [serialization.message_to_dict(m) for m in contents.messages],
            "approvals": approvals_of(contents.records),
            "problems": list(contents.problems),
            "torn_tail": contents.torn_tail,
            "cost_usd": session_cost(contents.records),
        })
        return EXIT_OK
    from rich.text import Text

    console = out_console()

    def line(text: str, style: str = "") -> None:
        console.print(Text(visible(text), style=style), soft_wrap=True)

    line(f"session {contents.session_id}  ({contents.location})", "bold")
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
            elif event.get("type") == "approval_requested":
                _show_approval_request(line, event)
            elif event.get("type") == "approval_resolved":
                _show_approval_resolution(line, event)
    total = session_cost(contents.records)
    if total is not None:
        from lich.money import format_usd

        line(f"── session cost: {format_usd(total)}", "dim")
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
        from lich.cli._render import counted
        from lich.money import format_usd
        from lich.sessions import run_cost

        usage = record.get("usage") or {}
        error = f"; error: {record['error']}" if record.get("error") else ""
        cost = run_cost(record)
        priced = f", {format_usd(cost)}" if cost is not None else ""
        line(f"── run ended: {record.get('stopped_reason')} after "
             f"{counted(_count(record.get('turns_used')), 'turn')}, "
             f"{counted(_count(usage.get('total_tokens')), 'token')}{priced}{error}", "dim")


def _count(value: Any) -> int:
    """A count read from a transcript record (0 for anything but a whole number)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _waited(event: Mapping[str, Any]) -> str:
    try:
        ms = float(event.get("waited_ms") or 0)
    except (TypeError, ValueError):
        return ""
    return f"{ms / 1000:.1f}s" if ms >= 100 else f"{ms:.0f} ms"


def _show_approval_request(line: Any, event: Mapping[str, Any]) -> None:
    call = event.get("call") or {}
    asked_by = ", ".join(str(p) for p in event.get("asked_by") or ())
    by = f" (asked by {asked_by})" if asked_by else ""
    line(f"  ? approval asked for {call.get('name')}: {_clip(str(event.get('reason') or ''), 200)}"
         f"{by}", "yellow")


def _show_approval_resolution(line: Any, event: Mapping[str, Any]) -> None:
    approver = event.get("approver")
    waited = _waited(event)
    after = f", after {waited}" if waited else ""
    if event.get("approved"):
        if approver == "session":
            line("    ✓ allowed by an earlier approval in this session", "green")
            return
        scope = event.get("scope") or "once"
        line(f"    ✓ approved by {approver or '?'} ({scope}{after})", "green")
        if event.get("args") is not None:
            from lich.cli._render import args_preview

            args = event.get("args")
            shown = args_preview(args, limit=300) if isinstance(args, Mapping) else str(args)
            line(f"      with edited arguments: {shown}", "green")
    else:
        by = f" by {approver}" if approver else ""
        message = _clip(str(event.get("message") or "denied"), 300)
        line(f"    ✗ denied{by}{after}: {message}", "red")


def approvals_of(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The approval requests of a transcript's records, each with its resolution.

    One entry per ``approval_requested`` event, in order: ``id``, ``call_id``,
    ``tool``, ``args`` (as asked), ``reason``, ``asked_by``, ``rules``,
    ``timeout_s``, and ``resolution`` — the ``approval_resolved`` event's
    ``approved``, ``scope``, ``approver``, ``args`` (edited, or ``null``),
    ``message`` and ``waited_ms``, or ``null`` when the transcript ends before it
    (the process died while waiting).
    """
    out: list[dict[str, Any]] = []
    pending: dict[str, dict[str, Any]] = {}
    for record in records:
        if record.get("kind") != "event":
            continue
        event = record.get("event") or {}
        kind = event.get("type")
        if kind == "approval_requested":
            call = event.get("call") or {}
            entry: dict[str, Any] = {
                "id": event.get("id"), "call_id": call.get("id"), "tool": call.get("name"),
                "args": call.get("args"), "reason": event.get("reason"),
                "asked_by": list(event.get("asked_by") or ()),
                "rules": list(event.get("rules") or ()), "timeout_s": event.get("timeout_s"),
                "resolution": None,
            }
            out.append(entry)
            pending[str(event.get("id"))] = entry
        elif kind == "approval_resolved":
            found = pending.pop(str(event.get("id")), None)
            if found is not None:
                found["resolution"] = {k: event.get(k) for k in (
                    "approved", "scope", "approver", "args", "message", "waited_ms")}
    return out
