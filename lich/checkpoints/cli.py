"""``lich checkpoints list|show|diff SESSION`` and ``lich rewind SESSION``.

Exit codes: 0 done; 1 nothing to act on or a store/git failure (one error line);
2 bad usage (an unknown session, checkpoint or turn).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from lich.checkpoints.plugin import open_store
from lich.checkpoints.rewind import (
    RewindError,
    SessionCheckpoints,
    agent_changes,
    describe,
    load,
    rewind,
    rewind_conversation,
)
from lich.checkpoints.store import SnapshotError
from lich.cli.common import EXIT_OK, EXIT_STOPPED, EXIT_USAGE, echo_error, host_for
from lich.cli.options import get_settings, json_option, setup_options
from lich.cli.output import load_or_report, print_json

if TYPE_CHECKING:
    from lich.cli.options import CliSettings
    from lich.sessions import SessionStore

__all__ = ["checkpoints_group", "rewind_command"]


@contextmanager
def _session(settings: CliSettings, ref: str) -> Iterator[tuple[SessionStore,
                                                                SessionCheckpoints]]:
    """The session store and the session's checkpoints in this work dir."""
    from lich.config import ConfigError
    from lich.sessions import SessionNotFound, StoreError, open_session_store

    loaded = load_or_report(settings)
    if loaded is None:
        raise RewindError("", EXIT_USAGE)
    try:
        store = open_session_store(loaded.config, host_for(settings, loaded.config))
        shadow = open_store(loaded.config)
    except (ConfigError, SnapshotError) as exc:
        raise RewindError(str(exc), EXIT_USAGE) from exc
    try:
        try:
            session = load(store, ref, shadow)
        except SessionNotFound as exc:
            raise RewindError(str(exc), EXIT_USAGE) from exc
        except StoreError as exc:
            raise RewindError(f"session store: {exc}", EXIT_STOPPED) from exc
        yield store, session
    finally:
        store.close()


def _run(fn: Any) -> int:
    try:
        return int(fn())
    except RewindError as exc:
        if str(exc):
            echo_error(str(exc))
        return exc.code
    except SnapshotError as exc:
        echo_error(f"checkpoints: {exc}")
        return EXIT_STOPPED


@click.group("checkpoints")
def checkpoints_group() -> None:
    """Snapshots of the work dir the checkpoints plugin took during a session.

    A SESSION is an id, the start of one id, or 'latest'.
    """


@checkpoints_group.command("list")
@setup_options
@json_option()
@click.argument("session")
@click.pass_context
def list_command(ctx: click.Context, session: str) -> None:
    """The session's checkpoints (points to rewind to), oldest first."""
    settings = get_settings(ctx)

    def go() -> int:
        with _session(settings, session) as (_store, cps):
            rows = [{**c.to_dict(cps.turns.get(c.run_id)),
                     "agent_changed": agent_changes(cps.points, c)} for c in cps.targets]
            if settings.json:
                print_json({"session_id": cps.session_id, "checkpoints": rows})
                return EXIT_OK
            if not rows:
                click.echo(f"no checkpoints in session {cps.session_id}")
            for row in rows:
                files = ", ".join(row["agent_changed"]) or "-"
                click.echo(f"{row['id']}  turn {row['session_turn'] or '-'}  "
                           f"{row['phase']:<7} then changed: {files}")
            return EXIT_OK
    ctx.exit(_run(go))


@checkpoints_group.command("show")
@setup_options
@json_option()
@click.argument("session")
@click.argument("checkpoint")
@click.pass_context
def show_command(ctx: click.Context, session: str, checkpoint: str) -> None:
    """One checkpoint: its record, and the files it holds."""
    settings = get_settings(ctx)

    def go() -> int:
        with _session(settings, session) as (_store, cps):
            cp = cps.find(checkpoint)
            files = sorted(cps.shadow.entries(cp.commit))
            data = {**cp.to_dict(cps.turns.get(cp.run_id)), "files": files}
            if settings.json:
                print_json(data)
                return EXIT_OK
            for key in ("id", "commit", "phase", "session_turn", "turn", "tool",
                        "tool_call_id"):
                click.echo(f"{key}: {data[key]}")
            click.echo(f"changed since the previous snapshot: {', '.join(cp.changed) or '-'}")
            for skip in cp.skipped:
                click.echo(f"skipped: {skip.get('path')} ({skip.get('reason')})")
            click.echo(f"files: {len(files)}")
            return EXIT_OK
    ctx.exit(_run(go))


@checkpoints_group.command("diff")
@setup_options
@json_option()
@click.argument("session")
@click.argument("checkpoint")
@click.argument("other", required=False)
@click.pass_context
def diff_command(ctx: click.Context, session: str, checkpoint: str, other: str | None) -> None:
    """The changes from CHECKPOINT to OTHER (another checkpoint), or to the work dir now."""
    settings = get_settings(ctx)

    def go() -> int:
        with _session(settings, session) as (_store, cps):
            shadow = cps.shadow
            cp = cps.find(checkpoint)
            to = cps.find(other) if other else None
            if to is None:
                # The work dir as it is, through a snapshot on a chain of its own: the
                # session's chain is the record of what happened, not of who looked.
                scratch = f"{cps.session_id}#diff"
                now = shadow.snapshot(scratch, {"phase": "diff", "session_id": scratch})
                new = now.commit
            else:
                new = to.commit
            patch = shadow.diff(cp.commit, new)
            if settings.json:
                print_json({"from": cp.id, "to": to.id if to else None,
                            "paths": list(shadow.changed(cp.commit, new)), "patch": patch})
            else:
                click.echo(patch, nl=False)
            return EXIT_OK
    ctx.exit(_run(go))


@checkpoints_group.command("prune")
@setup_options
@json_option()
@click.argument("session", required=False)
@click.option("--dry-run", is_flag=True, help="Print what would be dropped; drop nothing.")
@click.pass_context
def prune_command(ctx: click.Context, session: str | None, dry_run: bool) -> None:
    """Drop snapshots and delete what no session holds any more (git gc).

    With SESSION, that session's snapshots; without, those of removed sessions,
    scratch ones, those older than [checkpoints] max_age_days, then the oldest while
    the store is bigger than max_store_mb.
    """
    from lich.checkpoints.plugin import checkpoint_settings
    from lich.checkpoints.prune import prune
    from lich.config import ConfigError
    from lich.sessions import SessionNotFound, open_session_store

    settings = get_settings(ctx)

    def go() -> int:
        loaded = load_or_report(settings)
        if loaded is None:
            return EXIT_USAGE
        try:
            limits = checkpoint_settings(loaded.config)
            shadow = open_store(loaded.config)
            store = open_session_store(loaded.config, host_for(settings, loaded.config))
        except (ConfigError, SnapshotError) as exc:
            raise RewindError(str(exc), EXIT_USAGE) from exc
        try:
            try:
                sid = store.resolve(session) if session is not None else None
            except SessionNotFound as exc:
                raise RewindError(str(exc), EXIT_USAGE) from exc
            done = prune(shadow, set(store.ids()), session=sid,
                         max_age_s=limits.max_age_days * 86400 or None,
                         max_store_bytes=limits.max_store_mb * 1024 * 1024 or None,
                         dry_run=dry_run)
        finally:
            store.close()
        rows = [{"session_id": c.session_id, "ref": c.ref, "latest": c.latest,
                 "reason": why} for c, why in done.dropped]
        if settings.json:
            print_json({"dropped": rows, "bytes_before": done.before,
                        "bytes_after": done.after, "dry_run": dry_run})
            return EXIT_OK
        for row in rows:
            click.echo(f"{'would drop' if dry_run else 'dropped'}: "
                       f"{row['session_id'] or row['ref']} ({row['reason']})")
        if done.after is not None:
            click.echo(f"store: {done.before:,} bytes before, {done.after:,} after")
        return EXIT_OK
    ctx.exit(_run(go))


@click.command("rewind")
@setup_options
@json_option()
@click.argument("session")
@click.option("--to", "to", metavar="TURN|CHECKPOINT",
              help="A turn of the session (undo it and every later one) or a checkpoint id; "
                   "default: the latest checkpoint.")
@click.option("--code", is_flag=True, help="Restore the files (the default).")
@click.option("--conversation", is_flag=True,
              help="Cut the conversation back to before that turn's message (--resume "
                   "then continues from there).")
@click.option("--both", is_flag=True, help="--code and --conversation.")
@click.option("--dry-run", is_flag=True, help="Print what would change; change nothing.")
@click.option("--force", is_flag=True,
              help="Also restore files changed by hand since the agent last wrote them.")
@click.pass_context
def rewind_command(ctx: click.Context, session: str, to: str | None, code: bool,
                   conversation: bool, both: bool, dry_run: bool, force: bool) -> None:
    """Put the files the agent changed since a checkpoint back as they were.

    Only files the agent (or a rewind) wrote are touched; one changed by hand after
    the agent's last write is reported and left alone unless --force. The state found
    is taken as a checkpoint first, so a rewind is undone by rewinding to it.
    """
    settings = get_settings(ctx)

    def go() -> int:
        files = code or both or not conversation
        talk = conversation or both
        with _session(settings, session) as (store, cps):
            data: dict[str, Any] = {}
            lines: list[str] = []
            if talk:
                # Resolved before the files are touched: a bad --to changes nothing.
                cps.conversation_target(to)
            if files:
                try:
                    result = rewind(store, cps, to, dry_run=dry_run, force=force)
                except RewindError as exc:
                    if not talk or exc.code != EXIT_STOPPED:
                        raise
                    lines.append(str(exc))  # no file to restore: the conversation still goes
                else:
                    data.update(result.to_dict())
                    lines += describe(result, cps.session_id)
            if talk:
                cut = rewind_conversation(store, cps, to, dry_run=dry_run)
                data["conversation"] = cut
                lines.append(f"{'would drop' if dry_run else 'dropped'} turn {cut['turn']} "
                             f"and after: {cut['messages_dropped']} messages "
                             f"(kept {cut['messages_kept']})")
            if settings.json:
                print_json(data)
            else:
                for line in lines:
                    click.echo(line)
            return EXIT_OK
    ctx.exit(_run(go))

