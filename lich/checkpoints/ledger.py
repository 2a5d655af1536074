"""Reading a session's ``checkpoint`` records back, and planning a rewind from them.

Every snapshot has a ``phase``:

* ``before`` — before the first tool call of a turn that may write (a
  checkpoint: a point to rewind to);
* ``after`` — right after each such call: the ledger of the agent's own writes;
* ``rewind`` — the state a rewind found (a checkpoint: a rewind is undone by
  rewinding to it);
* ``restored`` — the state a rewind left.

The paths a snapshot's record lists as changed are *ours* (written by the agent,
or by a rewind) when its phase is ``after`` or ``restored``, and someone else's
(the user's, between and during runs) otherwise. Rewinding to checkpoint C
restores the paths that are ours since C — and of those, leaves alone (and
reports) each one whose content now is not what we last left in it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from attrs import frozen

from lich.checkpoints.store import Entry, ShadowStore
from lich.serialization import SerializationError
from lich.sessions import apply_record
from lich.types import UserMessage

__all__ = ["OURS", "POINTS", "Checkpoint", "RewindPlan", "checkpoints_of",
           "conversation_turns", "plan_rewind", "turn_runs"]

#: Phases whose changed paths are the agent's (or a rewind's) own writes.
OURS = frozenset({"after", "restored"})
#: Phases a rewind may go back to.
POINTS = frozenset({"before", "rewind"})


@frozen
class Checkpoint:
    """One ``checkpoint`` record of a transcript."""

    id: str
    commit: str
    phase: str
    run_id: str
    turn: int | None
    tool_call_id: str | None
    tool: str | None
    work_dir: str
    changed: tuple[str, ...]
    skipped: tuple[Mapping[str, Any], ...]
    ts: float | None

    def to_dict(self, session_turn: int | None = None) -> dict[str, Any]:
        return {"id": self.id, "commit": self.commit, "phase": self.phase,
                "run_id": self.run_id, "session_turn": session_turn, "turn": self.turn,
                "tool_call_id": self.tool_call_id, "tool": self.tool,
                "work_dir": self.work_dir, "changed": list(self.changed),
                "skipped": [dict(s) for s in self.skipped], "ts": self.ts}


def checkpoints_of(records: Iterable[Mapping[str, Any]]) -> list[Checkpoint]:
    """The ``checkpoint`` records among a session's records, in order (malformed
    ones are skipped: a reader never fails on a record it cannot use)."""
    found: list[Checkpoint] = []
    for r in records:
        if r.get("kind") != "checkpoint":
            continue
        try:
            found.append(Checkpoint(
                id=str(r["id"]), commit=str(r["commit"]), phase=str(r["phase"]),
                run_id=str(r.get("run_id", "")), turn=r.get("turn"),
                tool_call_id=r.get("tool_call_id"), tool=r.get("tool"),
                work_dir=str(r["work_dir"]), changed=tuple(r.get("changed") or ()),
                skipped=tuple(r.get("skipped") or ()), ts=r.get("ts")))
        except (KeyError, TypeError):
            continue
    return found


def conversation_turns(records: Iterable[Mapping[str, Any]]) -> list[tuple[int, str]]:
    """The turns of the conversation as it is now (``rewind`` records applied): for
    each of its user messages, in order, ``(its index in the history, the run that
    added it)``. Turn N of a session is the N-th of them, for code and conversation
    alike; a run whose message a rewind cut off has no turn any more."""
    messages: list[Any] = []
    users: list[tuple[int, str]] = []
    run = ""
    for r in records:
        kind = r.get("kind")
        if kind == "meta" and r.get("event") == "run_start" and not r.get("continued"):
            run = str(r.get("run_id", ""))
        try:
            messages = apply_record(r, messages)
        except (ValueError, SerializationError):
            continue
        if kind == "message" and isinstance(messages[-1], UserMessage):
            users.append((len(messages) - 1, run))
        elif kind == "compact":
            # A compaction rewrites the history: its user messages are the last of
            # those known, in order.
            positions = [i for i, m in enumerate(messages) if isinstance(m, UserMessage)]
            known = users[len(users) - len(positions):] if positions else []
            users = [(p, u[1]) for p, u in zip(positions, known, strict=False)]
        elif kind == "rewind":
            users = [u for u in users if u[0] < len(messages)]
    return users


def turn_runs(records: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Run id → its turn number in the conversation as it is now
    (:func:`conversation_turns`)."""
    return {run: n for n, (_pos, run) in enumerate(conversation_turns(records), start=1)}


@frozen
class RewindPlan:
    """What rewinding to ``target`` does: ``write`` (restored as they were), ``delete``
    (created since), ``kept`` (changed by hand since our last write: left alone unless
    forced), all relative to the work dir."""

    target: Checkpoint
    write: tuple[str, ...]
    delete: tuple[str, ...]
    kept: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"to": self.target.id, "write": list(self.write), "delete": list(self.delete),
                "kept_hand_edits": list(self.kept)}


def plan_rewind(store: ShadowStore, points: Sequence[Checkpoint], target: Checkpoint,
                now: str, *, force: bool = False) -> RewindPlan:
    """The plan to bring the work dir from snapshot ``now`` (just taken) back to
    ``target``, given every snapshot of the session in order (``points``)."""
    after = points[points.index(target) + 1:]
    last_ours: dict[str, str] = {}  # path → the commit of our last write to it
    for cp in after:
        if cp.phase in OURS:
            for path in cp.changed:
                last_ours[path] = cp.commit
    then = store.entries(target.commit)
    current = store.entries(now)
    cache: dict[str, dict[str, Entry]] = {}
    write: list[str] = []
    delete: list[str] = []
    kept: list[str] = []
    for path, commit in sorted(last_ours.items()):
        left = cache.setdefault(commit, store.entries(commit) if commit != now else current)
        if current.get(path) != left.get(path) and not force:
            kept.append(path)  # someone changed it after we did: theirs now
            continue
        if current.get(path) == then.get(path):
            continue  # already as it was
        if path in then:
            write.append(path)
        else:
            delete.append(path)
    return RewindPlan(target, tuple(write), tuple(delete), tuple(kept))
