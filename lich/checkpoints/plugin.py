"""The ``checkpoints`` plugin: snapshot the work dir before the agent may write to it.

Before the first tool call of a turn that is not ``read_only`` (``terminal``
included) it commits the work dir into the shadow store
(:mod:`lich.checkpoints.store`) and appends a ``checkpoint`` record (phase
``before``) to the transcript; after each such call, another snapshot (phase
``after``) is the ledger of what the agent itself wrote (:mod:`lich.checkpoints.ledger`).
``lich checkpoints`` and ``lich rewind`` read the records back.

A snapshot that fails (no git, a refused dir, a git error) is logged and the
call runs: a broken store must not stop the agent's work; the missing
checkpoint shows in ``lich checkpoints list``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import click
from attrs import frozen

from lich.checkpoints.store import ShadowStore, Snapshot, SnapshotError
from lich.events import TurnStart
from lich.hooks import RunInfo, hookimpl, needed_when
from lich.protected import ProtectedPaths
from lich.settings import at_least, setting, structure_settings
from lich.slash import SlashCommand, SlashContext

if TYPE_CHECKING:
    from lich.config import LichConfig
    from lich.events import Envelope
    from lich.settings import ConfigTables
    from lich.slash import SlashRegistry
    from lich.types import ToolCall, ToolResult

__all__ = [
    "CheckpointSettings",
    "checkpoint_settings",
    "lich_after_tool_call",
    "lich_before_tool_call",
    "lich_event",
    "lich_register_commands",
    "lich_register_config_tables",
    "lich_register_slash_commands",
    "open_store",
]

log = logging.getLogger(__name__)
PLUGIN = "checkpoints"


@frozen
class CheckpointSettings:
    """The ``[checkpoints]`` table."""

    #: Whether runs take snapshots (the commands work on existing ones either way).
    enabled: bool = True
    #: A file bigger than this is not stored; its record lists it as skipped.
    max_file_bytes: int = setting(10 * 1024 * 1024, check=at_least(0))
    #: ``lich checkpoints prune`` drops sessions whose latest snapshot is older (0: never).
    max_age_days: float = setting(30.0, check=at_least(0))
    #: ``lich checkpoints prune`` then drops the oldest sessions' snapshots while the
    #: store is bigger than this (0: no cap).
    max_store_mb: int = setting(1024, check=at_least(0))
    #: Who may ``/undo`` in a gateway chat (``platform:id``, as the gateway names
    #: users): the operator's own accounts. Empty (the default): ``/undo`` is refused
    #: there — a chat's stranger must not rewrite the operator's files.
    undo_users: tuple[str, ...] = ()


def checkpoint_settings(config: LichConfig) -> CheckpointSettings:
    """The ``[checkpoints]`` table of ``config``, checked.

    :raises lich.config.ConfigError: a bad value, with its ``$.checkpoints.key`` path.
    """
    return structure_settings(config.table(PLUGIN), CheckpointSettings, f"$.{PLUGIN}")


def _enabled(config: LichConfig) -> bool:
    return bool(config.table(PLUGIN).get("enabled", True))


def open_store(config: LichConfig) -> ShadowStore:
    """The shadow store of ``config``'s work dir, with its protected set and size cap.

    :raises SnapshotError: no git binary.
    """
    return ShadowStore(config.work_dir, max_file_bytes=checkpoint_settings(config).max_file_bytes,
                       protected=ProtectedPaths.for_config(config))


@hookimpl
def lich_register_config_tables(tables: ConfigTables) -> None:
    """Claim ``[checkpoints]``."""
    tables.claim(PLUGIN, CheckpointSettings,
                 help="snapshots of the work dir before the agent writes, for lich rewind")


@hookimpl
@needed_when(_enabled)
def lich_event(event: Envelope, run: RunInfo) -> None:
    """Keep the run's current turn: a checkpoint is taken at most once per turn."""
    if isinstance(event.event, TurnStart):
        run.state_for(PLUGIN)["turn"] = event.event.turn


def _writes(call: ToolCall, run: RunInfo) -> bool:
    tool = run.tool(call.name)
    return tool is not None and not tool.read_only


async def _snapshot(run: RunInfo, call: ToolCall, phase: str) -> Snapshot | None:
    """Take a snapshot off the event loop and record it; ``None`` when it failed."""
    state = run.state_for(PLUGIN)
    config = run.config
    if config is None:
        return None
    try:
        store: ShadowStore | None = state.get("store")
        if store is None:
            store = state["store"] = open_store(config)
        message: dict[str, Any] = {"session_id": run.session_id, "run_id": run.run_id,
                                   "phase": phase, "turn": state.get("turn"),
                                   "tool_call_id": call.id, "tool": call.name}
        snap = await asyncio.to_thread(store.snapshot, run.session_id, message)
    except (SnapshotError, OSError) as exc:
        if not state.get("warned"):
            state["warned"] = True
            log.warning("checkpoints: no snapshot of %s: %s", run.work_dir, exc)
        return None
    run.append_record(
        "checkpoint", id=snap.id, commit=snap.commit, phase=phase, run_id=run.run_id,
        turn=state.get("turn"), tool_call_id=call.id, tool=call.name,
        work_dir=str(store.work_dir), changed=list(snap.changed),
        skipped=[dict(s) for s in snap.skipped])
    return snap


@hookimpl
@needed_when(_enabled)
async def lich_before_tool_call(call: ToolCall, run: RunInfo) -> None:
    """Snapshot the work dir before the turn's first call that may write."""
    if not _writes(call, run):
        return
    state = run.state_for(PLUGIN)
    turn = state.get("turn")
    if state.get("checkpointed_turn", object()) == turn:
        return
    state["checkpointed_turn"] = turn
    await _snapshot(run, call, "before")


@hookimpl
@needed_when(_enabled)
async def lich_after_tool_call(call: ToolCall, result: ToolResult, run: RunInfo) -> None:
    """Snapshot what the call left: the ledger of the agent's own writes."""
    if _writes(call, run) and "checkpointed_turn" in run.state_for(PLUGIN):
        await _snapshot(run, call, "after")


def _rewind_slash(context: SlashContext, command: str = "rewind") -> str:
    """``/rewind``: the checkpoints of this conversation with what each turn changed;
    ``/rewind TURN|ID [--dry-run] [--force]`` rewinds the files (as ``lich rewind``)."""
    from lich.checkpoints.rewind import RewindError, agent_changes, describe, load, rewind
    from lich.sessions import SessionNotFound, open_session_store

    config = context.config
    if config is None or context.session_id is None:
        return "nothing to rewind yet: this conversation has no session"
    words = context.args.split()
    flags = {w for w in words if w.startswith("--")}
    unknown = flags - {"--dry-run", "--force"}
    rest = [w for w in words if not w.startswith("--")]
    if unknown or len(rest) > 1:
        return f"usage: /{command} [TURN|CHECKPOINT] [--dry-run] [--force]"
    try:
        shadow = open_store(config)
        store = open_session_store(config, context.host)
        try:
            session = load(store, context.session_id, shadow)
            if not rest and not flags and command == "rewind":
                lines = [f"{c.id}  turn {session.turns.get(c.run_id, '-')}  {c.phase:<7} then "
                         f"changed: {', '.join(agent_changes(session.points, c)) or '-'}"
                         for c in session.targets]
                return "\n".join([*lines, "/rewind TURN|ID rewinds the files to one of them"]
                                 if lines else ["no checkpoints in this conversation yet"])
            result = rewind(store, session, rest[0] if rest else None,
                            dry_run="--dry-run" in flags, force="--force" in flags)
            return "\n".join(describe(result, session.session_id)).replace(
                f"lich rewind {session.session_id} --to", f"/{command}")
        finally:
            store.close()
    except (RewindError, SnapshotError, SessionNotFound) as exc:
        return f"/{command}: {exc}"


def _undo_slash(context: SlashContext) -> str:
    """``/undo`` in a gateway chat: rewind the files of the conversation's latest
    checkpoint, for the users ``[checkpoints] undo_users`` names only."""
    from lich.config import ConfigError

    config = context.config
    if config is None:
        return "/undo: no configuration"
    try:
        allowed = checkpoint_settings(config).undo_users
    except ConfigError as exc:
        return f"/undo: {exc}"
    if not context.user_id or context.user_id not in allowed:
        return ("/undo is for the operator only: list your id in [checkpoints] "
                "undo_users to use it here")
    return _rewind_slash(context, "undo")


@hookimpl
def lich_register_slash_commands(registry: SlashRegistry) -> None:
    """``/rewind`` in ``lich chat`` and the TUI; ``/undo`` in the gateway's chats."""
    async def run(context: SlashContext) -> str:
        # git and the files off the front end's event loop.
        return await asyncio.to_thread(_rewind_slash, context)

    registry.register(SlashCommand(
        "rewind", "list this conversation's checkpoints, or rewind the files to one",
        arg_hint="[TURN|ID] [--dry-run] [--force]", front_ends=("chat", "tui"), run=run))

    async def undo(context: SlashContext) -> str:
        return await asyncio.to_thread(_undo_slash, context)

    registry.register(SlashCommand(
        "undo", "rewind the files the agent changed since this conversation's latest "
        "checkpoint (the operator only)", arg_hint="[TURN|ID] [--dry-run]",
        front_ends=("gateway",), run=undo))


@hookimpl
def lich_register_commands(cli: click.Group) -> None:
    """``lich checkpoints`` and ``lich rewind``."""
    from lich.checkpoints.cli import checkpoints_group, rewind_command

    cli.add_command(checkpoints_group)
    cli.add_command(rewind_command)
