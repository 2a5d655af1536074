"""``lich checkpoints list|show|diff SESSION`` and ``lich rewind SESSION``.

Exit codes: 0 done; 1 nothing to act on or a store/git failure (one error line);
2 bad usage (an unknown session, checkpoint or turn).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from lich.checkpoints.ledger import (
    POINTS,
    Checkpoint,
    checkpoints_of,
    plan_rewind,
    turn_runs,
)
from lich.checkpoints.plugin import open_store
from lich.checkpoints.store import ShadowStore, Snapshot, SnapshotError
from lich.cli.common import EXIT_OK, EXIT_STOPPED, EXIT_USAGE, echo_error, host_for
from lich.cli.options import get_settings, json_option, setup_options
from lich.cli.output import load_or_report, print_json

if TYPE_CHECKING:
    from lich.cli.options import CliSettings
    from lich.sessions import SessionStore

__all__ = ["checkpoints_group", "rewind_command"]


class _Failed(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@contextmanager
def _session(settings: CliSettings, ref: str) -> Iterator[tuple[SessionStore, str, ShadowStore,
                                                                list[Checkpoint], dict[str, int]]]:
    """The session store, the session's id, the work dir's shadow store, the session's
    checkpoints of that work dir and its run → turn mapping."""
    from lich.config import ConfigError
    from lich.sessions import SessionNotFound, StoreError, open_session_store

    loaded = load_or_report(settings)
    if loaded is None:
        raise _Failed("", EXIT_USAGE)
    try:
        store = open_session_store(loaded.config, host_for(settings, loaded.config))
        shadow = open_store(loaded.config)
    except (ConfigError, SnapshotError) as exc:
        raise _Failed(str(exc), EXIT_USAGE) from exc
    try:
        try:
            sid = store.resolve(ref)
            records = store.read(sid).records
        except SessionNotFound as exc:
            raise _Failed(str(exc), EXIT_USAGE) from exc
        except StoreError as exc:
            raise _Failed(f"session store: {exc}", EXIT_STOPPED) from exc
        points = [c for c in checkpoints_of(records) if c.work_dir == str(shadow.work_dir)]
        yield store, sid, shadow, points, turn_runs(records)
    finally:
        store.close()


def _run(fn: Any) -> int:
    try:
        return int(fn())
    except _Failed as exc:
        if str(exc):
            echo_error(str(exc))
        return exc.code
    except SnapshotError as exc:
        echo_error(f"checkpoints: {exc}")
        return EXIT_STOPPED


def _find(points: list[Checkpoint], ref: str) -> Checkpoint:
    found = [c for c in points if c.id.startswith(ref) or c.commit.startswith(ref)]
    if not found or len(ref) < 4:
        raise _Failed(f"no checkpoint {ref!r} in this session (see lich checkpoints list)",
                      EXIT_USAGE)
    if len({c.commit for c in found}) > 1:
        raise _Failed(f"checkpoint {ref!r} is ambiguous: {', '.join(c.id for c in found)}",
                      EXIT_USAGE)
    return found[0]


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
        with _session(settings, session) as (_store, sid, _shadow, points, turns):
            rows = [c.to_dict(turns.get(c.run_id)) for c in points if c.phase in POINTS]
            if settings.json:
                print_json({"session_id": sid, "checkpoints": rows})
                return EXIT_OK
            if not rows:
                click.echo(f"no checkpoints in session {sid}")
            for row in rows:
                # What the agent changed after it: the ledger's entries up to the next one.
                click.echo(f"{row['id']}  turn {row['session_turn']}  {row['phase']:<7} "
                           f"before {row['tool'] or '-'}")
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
        with _session(settings, session) as (_store, _sid, shadow, points, turns):
            cp = _find(points, checkpoint)
            files = sorted(shadow.entries(cp.commit))
            data = {**cp.to_dict(turns.get(cp.run_id)), "files": files}
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
        with _session(settings, session) as (_store, _sid, shadow, points, _turns):
            cp = _find(points, checkpoint)
            to = _find(points, other) if other else None
            if to is None:
                # The work dir as it is, through a snapshot on a chain of its own: the
                # session's chain is the record of what happened, not of who looked.
                now = shadow.snapshot(f"{_sid}#diff", {"phase": "diff"})
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


def _target(points: list[Checkpoint], turns: dict[str, int], to: str | None) -> Checkpoint:
    """The checkpoint ``--to`` names: a session turn (its first checkpoint), a
    checkpoint id, or by default the latest checkpoint."""
    candidates = [c for c in points if c.phase in POINTS]
    if not candidates:
        raise _Failed("this session has no checkpoints to rewind to", EXIT_STOPPED)
    if to is None:
        return candidates[-1]
    if to.isdigit() and len(to) < 6:
        of_turn = [c for c in candidates if c.phase == "before" and turns.get(c.run_id) == int(to)]
        if not of_turn:
            raise _Failed(f"turn {to} of this session has no checkpoint (it changed nothing)",
                          EXIT_USAGE)
        return of_turn[0]
    return _find(candidates, to)


def _record(store: SessionStore, sid: str, shadow: ShadowStore, snap: Snapshot, phase: str,
            run_id: str) -> None:
    writer = store.open(sid)
    try:
        writer.append("checkpoint", id=snap.id, commit=snap.commit, phase=phase,
                      run_id=run_id, turn=None, tool_call_id=None, tool="rewind",
                      work_dir=str(shadow.work_dir), changed=list(snap.changed),
                      skipped=[dict(s) for s in snap.skipped])
    finally:
        writer.close()


@click.command("rewind")
@setup_options
@json_option()
@click.argument("session")
@click.option("--to", "to", metavar="TURN|CHECKPOINT",
              help="A turn of the session (undo it and every later one) or a checkpoint id; "
                   "default: the latest checkpoint.")
@click.option("--code", is_flag=True, default=True,
              help="Restore the files (the default, and for now the only kind).")
@click.option("--dry-run", is_flag=True, help="Print what would change; change nothing.")
@click.option("--force", is_flag=True,
              help="Also restore files changed by hand since the agent last wrote them.")
@click.pass_context
def rewind_command(ctx: click.Context, session: str, to: str | None, code: bool,
                   dry_run: bool, force: bool) -> None:
    """Put the files the agent changed since a checkpoint back as they were.

    Only files the agent (or a rewind) wrote are touched; one changed by hand after
    the agent's last write is reported and left alone unless --force. The state found
    is taken as a checkpoint first, so a rewind is undone by rewinding to it.
    """
    settings = get_settings(ctx)

    def go() -> int:
        with _session(settings, session) as (store, sid, shadow, points, turns):
            target = _target(points, turns, to)
            run_id = "rewind-" + uuid.uuid4().hex[:8]
            if dry_run:
                now = shadow.snapshot(f"{sid}#dry-run", {"phase": "dry-run"})
            else:
                now = shadow.snapshot(sid, {"phase": "rewind", "run_id": run_id})
                _record(store, sid, shadow, now, "rewind", run_id)
                points = [*points, _as_checkpoint(now, "rewind", run_id, shadow)]
            plan = plan_rewind(shadow, points, target, now.commit, force=force)
            data: dict[str, Any] = {**plan.to_dict(), "dry_run": dry_run,
                                    "undo": None if dry_run else now.id}
            if not dry_run:
                shadow.restore(target.commit, plan.write, plan.delete)
                after = shadow.snapshot(sid, {"phase": "restored", "run_id": run_id})
                _record(store, sid, shadow, after, "restored", run_id)
            if settings.json:
                print_json(data)
                return EXIT_OK
            verb = "would restore" if dry_run else "restored"
            for path in plan.write:
                click.echo(f"{verb}: {path}")
            for path in plan.delete:
                click.echo(f"{'would delete' if dry_run else 'deleted'}: {path}")
            for path in plan.kept:
                click.echo(f"kept (changed by hand since the agent wrote it; --force "
                           f"restores it): {path}")
            if not dry_run:
                click.echo(f"rewound to {target.id}; undo with: lich rewind {sid} "
                           f"--to {now.id}")
            return EXIT_OK
    ctx.exit(_run(go))


def _as_checkpoint(snap: Snapshot, phase: str, run_id: str, shadow: ShadowStore) -> Checkpoint:
    return Checkpoint(id=snap.id, commit=snap.commit, phase=phase, run_id=run_id, turn=None,
                      tool_call_id=None, tool="rewind", work_dir=str(shadow.work_dir),
                      changed=snap.changed, skipped=snap.skipped, ts=None)
