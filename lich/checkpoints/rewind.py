"""A rewind of the files, shared by ``lich rewind`` and the ``/rewind`` slash command.

:func:`rewind` takes the state it finds as a checkpoint (phase ``rewind``: the undo
point), restores what :func:`lich.checkpoints.ledger.plan_rewind` plans, and
records the state it left (``restored``), each as a ``checkpoint`` record appended
to the session's transcript through the session store.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from attrs import frozen

from lich.checkpoints.ledger import (
    OURS,
    POINTS,
    Checkpoint,
    RewindPlan,
    checkpoints_of,
    conversation_turns,
    plan_rewind,
)
from lich.checkpoints.store import ShadowStore, Snapshot

if TYPE_CHECKING:
    from lich.sessions import SessionStore

__all__ = ["RewindError", "RewindResult", "SessionCheckpoints", "agent_changes", "describe",
           "load", "rewind", "rewind_conversation"]


class RewindError(Exception):
    """Nothing to rewind to, or a target that names no checkpoint; ``code`` is the
    exit code of ``lich rewind`` (1: nothing to act on, 2: bad usage)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@frozen
class SessionCheckpoints:
    """A session's snapshots of one work dir, in order, and its run → turn mapping."""

    session_id: str
    shadow: ShadowStore
    points: tuple[Checkpoint, ...]
    turns: dict[str, int]
    #: The conversation's turns as it is now: (history index of its user message, run).
    users: tuple[tuple[int, str], ...] = ()

    @property
    def targets(self) -> list[Checkpoint]:
        """The checkpoints a rewind may go back to."""
        return [c for c in self.points if c.phase in POINTS]

    def find(self, ref: str) -> Checkpoint:
        """The checkpoint whose id starts with ``ref`` (4 characters at least)."""
        found = [c for c in self.points if c.commit.startswith(ref)] if len(ref) >= 4 else []
        if not found:
            raise RewindError(f"no checkpoint {ref!r} in this session "
                              "(see lich checkpoints list)", 2)
        if len({c.commit for c in found}) > 1:
            raise RewindError(f"checkpoint {ref!r} is ambiguous: "
                              f"{', '.join(c.id for c in found)}", 2)
        return found[0]

    def target(self, to: str | None) -> Checkpoint:
        """What ``--to`` names: a session turn (its first checkpoint), a checkpoint id,
        or by default the latest checkpoint."""
        candidates = self.targets
        if not candidates:
            raise RewindError("this session has no checkpoints to rewind to", 1)
        if to is None:
            return candidates[-1]
        if to.isdigit() and len(to) < 6:
            turn = self.turn_number(to)
            since = [c for c in candidates
                     if c.phase == "before" and self.turns.get(c.run_id, 0) >= turn]
            if not since:
                raise RewindError(f"the agent changed no file since turn {turn}", 1)
            return since[0]
        hit = self.find(to)
        if hit.phase not in POINTS:
            raise RewindError(f"{to!r} is a ledger entry, not a checkpoint to rewind to", 2)
        return hit


    def turn_number(self, to: str) -> int:
        """``to`` as a turn of the conversation as it is now.

        :raises RewindError: no such turn.
        """
        turn = int(to)
        if not 1 <= turn <= len(self.users):
            raise RewindError(f"no turn {to}: the conversation has {len(self.users)} "
                              "(see lich sessions show)", 2)
        return turn

    def conversation_target(self, to: str | None) -> int:
        """The turn a conversation rewind goes back to (its message and all after it
        go): ``to`` as a turn, a checkpoint's turn, or by default the last turn."""
        if not self.users:
            raise RewindError("the conversation has no turn to rewind", 1)
        if to is None:
            return len(self.users)
        if to.isdigit() and len(to) < 6:
            return self.turn_number(to)
        turn = self.turns.get(self.find(to).run_id)
        if turn is None:
            raise RewindError(f"checkpoint {to!r} belongs to no turn of the conversation "
                              "as it is now", 2)
        return turn


def rewind_conversation(store: SessionStore, session: SessionCheckpoints, to: str | None, *,
                        dry_run: bool = False) -> dict[str, Any]:
    """Cut the conversation back to before turn ``to``'s message, by appending a
    ``rewind`` record (the transcript stays append-only; a resumed run continues from
    there). What it kept and dropped, as JSON."""
    turn = session.conversation_target(to)
    keep = session.users[turn - 1][0]
    total = len(store.history(session.session_id))
    if not dry_run:
        writer = store.open(session.session_id)
        try:
            writer.append("rewind", messages=keep)
        finally:
            writer.close()
    return {"turn": turn, "messages_kept": keep, "messages_dropped": total - keep,
            "dry_run": dry_run}


def load(store: SessionStore, ref: str, shadow: ShadowStore) -> SessionCheckpoints:
    """The checkpoints of session ``ref`` (an id, a prefix or ``latest``) in ``shadow``'s
    work dir.

    :raises lich.sessions.SessionNotFound: no such session.
    """
    sid = store.resolve(ref)
    records = store.read(sid).records
    points = tuple(c for c in checkpoints_of(records) if c.work_dir == str(shadow.work_dir))
    users = tuple(conversation_turns(records))
    turns = {run: n for n, (_pos, run) in enumerate(users, start=1)}
    return SessionCheckpoints(sid, shadow, points, turns, users)


def agent_changes(points: tuple[Checkpoint, ...] | list[Checkpoint],
                  target: Checkpoint) -> list[str]:
    """The paths the agent (or a rewind) wrote after ``target`` and before the next
    checkpoint: what its turn changed."""
    later = list(points)[list(points).index(target) + 1:]
    paths: set[str] = set()
    for cp in later:
        if cp.phase in POINTS:
            break
        if cp.phase in OURS:
            paths.update(cp.changed)
    return sorted(paths)


@frozen
class RewindResult:
    """What a rewind did (or, dry, would do); ``undo`` is the checkpoint that undoes it."""

    plan: RewindPlan
    undo: str | None
    dry_run: bool

    def to_dict(self) -> dict[str, Any]:
        return {**self.plan.to_dict(), "dry_run": self.dry_run, "undo": self.undo}


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


def rewind(store: SessionStore, session: SessionCheckpoints, to: str | None, *,
           dry_run: bool = False, force: bool = False) -> RewindResult:
    """Rewind the files of ``session`` to the checkpoint ``to`` names (see
    :meth:`SessionCheckpoints.target`).

    :raises RewindError: nothing to rewind to, or ``to`` names nothing.
    :raises lich.checkpoints.store.SnapshotError: git failed.
    """
    target = session.target(to)
    shadow, sid = session.shadow, session.session_id
    run_id = "rewind-" + uuid.uuid4().hex[:8]
    points = list(session.points)
    if dry_run:
        # A chain of its own: the session's chain records what happened, not who looked.
        now = shadow.snapshot(f"{sid}#dry-run", {"phase": "dry-run",
                                                  "session_id": f"{sid}#dry-run"})
    else:
        now = shadow.snapshot(sid, {"phase": "rewind", "run_id": run_id, "session_id": sid})
        _record(store, sid, shadow, now, "rewind", run_id)
        points.append(Checkpoint(id=now.id, commit=now.commit, phase="rewind", run_id=run_id,
                                 turn=None, tool_call_id=None, tool="rewind",
                                 work_dir=str(shadow.work_dir), changed=now.changed,
                                 skipped=now.skipped, ts=None))
    plan = plan_rewind(shadow, points, target, now.commit, force=force)
    if not dry_run:
        shadow.restore(target.commit, plan.write, plan.delete)
        after = shadow.snapshot(sid, {"phase": "restored", "run_id": run_id,
                                      "session_id": sid})
        _record(store, sid, shadow, after, "restored", run_id)
    return RewindResult(plan, None if dry_run else now.id, dry_run)


def describe(result: RewindResult, session_id: str) -> list[str]:
    """The lines telling a person what a rewind did."""
    dry = result.dry_run
    plan = result.plan
    lines = [f"{'would restore' if dry else 'restored'}: {p}" for p in plan.write]
    lines += [f"{'would delete' if dry else 'deleted'}: {p}" for p in plan.delete]
    lines += [f"kept (changed by hand since the agent wrote it; --force restores it): {p}"
              for p in plan.kept]
    if not (plan.write or plan.delete):
        lines.append("nothing to restore")
    if result.undo is not None:
        lines.append(f"rewound to {plan.target.id}; undo with: lich rewind {session_id} "
                     f"--to {result.undo}")
    return lines
