"""Durable turns: the transcript records that let a turn outlive the process running it.

A bus whose messages survive a dead consumer (the ``nats`` one) runs each
message as a *durable turn*. The run's own session writer — so, with a fenced
store, under the run's epoch — adds ``meta`` records to the conversation's
transcript, each naming the message's admission id:

* ``turn_start`` (``admission``, ``run_id``) before the first model call;
* ``tool_start`` (``admission``, ``call_id``, ``tool``) before a call of a tool
  that is not :attr:`~lich.tools.Tool.idempotent` runs;
* ``turn_end`` (``admission``, ``reply``: ``{"kind", "text", "run_id"}``) once the
  run is over and its reply decided;
* ``reply_sent`` (``admission``) once whoever delivers the reply confirmed it has it.

The record of the turn's user message (``message``, or ``compact`` when the system
prompt changed) names the admission too, since records are stored one at a time:
a process killed after it and before ``turn_start`` leaves a turn that is
continued (with its one ``turn_start`` written then), not one whose message is
added a second time.

Each is stored before the step it announces goes on (the writer is flushed),
so a process that reads them after a crash (:func:`find_turn`) knows how far
the turn got: not started (run it), started (continue it from the transcript:
:meth:`lich.Agent.continue_turn`), ended (send the recorded reply, do not run
again), or answered (nothing to do).

A :class:`DurableTurn` is a :class:`lich.journal.TurnJournal`: handed to the
agent's run, it writes ``turn_start`` and ``tool_start`` through the run's own
writer at the steps the journal protocol gives it (the agent knows no record of
it); ``turn_end`` and ``reply_sent`` are the caller's (:meth:`DurableTurn.end`,
:meth:`DurableTurn.reply_sent`), since only it knows the reply and when it was
delivered. Without a :class:`DurableTurn` (the single-process gateway, the CLI)
none of this is written or read.

Not a core module: the buses that run durable turns (``gateway``, ``nats_bus``)
use it; the core imports nothing of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from attrs import frozen

# The result a continued turn gives a call that may have run before its process died: the
# agent's (Agent.continue_turn gives it), re-exported where the durable turns are.
from lich.agent import INTERRUPTED_ERROR
from lich.journal import RunRecorder
from lich.sessions import ConditionalWriter
from lich.tools import Tool
from lich.types import Message, ToolCall, ToolResult

__all__ = [
    "CANCELLED_RUNNING_ERROR",
    "INTERRUPTED_ERROR",
    "NOT_RECORDED_ERROR",
    "REPLY_SENT",
    "TOOL_START",
    "TURN_END",
    "TURN_START",
    "DurableTurn",
    "TurnRecords",
    "find_turn",
]

TURN_START = "turn_start"
TOOL_START = "tool_start"
TURN_END = "turn_end"
REPLY_SENT = "reply_sent"

#: A durable turn's call of a tool that is not idempotent, whose ``tool_start`` could not be
#: stored: it is not run, since after a crash it could not be told from one that never ran.
NOT_RECORDED_ERROR = ("not_recorded: the start of this call could not be recorded (the "
                      "transcript store failed), so it was not run")


#: The result a durable turn records for a call of a tool that is not idempotent, cancelled
#: while it ran (its process was stopping: the turn is handed to another): what the model
#: of whoever continues the turn is told, rather than a plain "cancelled".
CANCELLED_RUNNING_ERROR = (
    "interrupted: this call was cancelled while it ran (the process running it was "
    "stopping); it may or may not have taken effect. Check its effect before you repeat it."
)


@frozen
class TurnRecords:
    """What a transcript says of the turn of one admission (see :func:`find_turn`).

    ``started`` says a ``turn_start`` (or a ``turn_end``) was recorded, ``begun``
    that the turn's user message was (a ``message`` or ``compact`` record naming the
    admission: a run killed between it and its ``turn_start`` leaves only that);
    ``reply`` is the recorded reply (``turn_end``'s), ``started_calls`` the call ids
    that have a ``tool_start``, ``messages`` the conversation as recorded (compacts
    applied, dangling tool calls left as they are), ``end`` the position of the last
    record read (:attr:`lich.sessions.SessionContents.end`; ``None``: the store has
    none to claim on).
    """

    admission: str
    started: bool = False
    reply: Mapping[str, Any] | None = None
    reply_sent: bool = False
    started_calls: frozenset[str] = frozenset()
    messages: tuple[Message, ...] = ()
    end: int | None = None
    begun: bool = False

    @property
    def state(self) -> Literal["new", "running", "ended", "answered"]:
        """``new`` (nothing recorded), ``running`` (started or begun, not ended),
        ``ended`` (a reply recorded, not known to be delivered) or ``answered``."""
        if self.reply is not None:
            return "answered" if self.reply_sent else "ended"
        return "running" if self.started or self.begun else "new"


def find_turn(records: Iterable[Mapping[str, Any]], admission: str,
              messages: Iterable[Message] = (), end: int | None = None) -> TurnRecords:
    """The durable-turn records of ``admission`` among a transcript's ``records``.

    ``messages`` (the transcript's conversation, as its store read it) is kept
    on the result for a turn that must be continued, and ``end`` (where the read
    ended) for the run's writer to claim on.
    """
    started = sent = begun = False
    reply: Mapping[str, Any] | None = None
    calls: set[str] = set()
    for record in records:
        if record.get("admission") != admission:
            continue
        if record.get("kind") != "meta":
            begun = begun or record.get("kind") in ("message", "compact")
            continue
        event = record.get("event")
        if event == TURN_START:
            started = True
        elif event == TOOL_START:
            call_id = record.get("call_id")
            if isinstance(call_id, str):
                calls.add(call_id)
        elif event == TURN_END:
            recorded = record.get("reply")
            if isinstance(recorded, Mapping) and isinstance(recorded.get("kind"), str):
                reply = recorded
        elif event == REPLY_SENT:
            sent = True
    return TurnRecords(admission, started or reply is not None, reply, sent,
                       frozenset(calls), tuple(messages), end, begun)


class DurableTurn:
    """One message's turn, recorded so that another process can finish it.

    Hand it to :meth:`lich.Agent.run` as its ``turn`` (a new turn: it writes
    ``turn_start``) or to :meth:`lich.Agent.continue_turn` (a turn a dead process
    began: nothing is written again). As the run's
    :class:`~lich.journal.TurnJournal` it writes ``tool_start`` before every call
    of a tool that is not idempotent, and keeps the run's writer, so that
    :meth:`end` and :meth:`reply_sent` are written under the run's own epoch.

    :param admission: the message's admission id (unique per message; what the
        records are found by).
    :param resume: what the transcript says of this turn when it is continued
        (:func:`find_turn`); ``None`` for a new turn.
    :param transcript: the conversation as just read from the store, for a new
        turn (so that whoever runs it need not read it again); ``None``: unknown.
    :param read_end: where the read this turn was decided on ended
        (:attr:`lich.sessions.SessionContents.end`). The writers of the turn then
        claim the conversation only if nothing was added to it since
        (:class:`lich.sessions.ConditionalWriter`): a process that stalled after
        its read, while another took the turn over, finds its writer stale before
        it writes, runs or sends anything. ``None``: claimed whatever the session
        holds (a store without conditional claims).
    """

    def __init__(self, admission: str, resume: TurnRecords | None = None, *,
                 transcript: Sequence[Message] | None = None,
                 read_end: int | None = None) -> None:
        self.admission = admission
        self.resume = resume
        self.transcript = transcript
        self.read_end = read_end
        self.run_id: str | None = None
        self._writer: RunRecorder | None = None
        self._lost: BaseException | None = None
        # Calls whose tool_start is stored and that have not ended yet.
        self._announced: set[str] = set()

    @property
    def started(self) -> bool:
        """Whether an agent run took this turn (and its writer is attached)."""
        return self._writer is not None

    @property
    def stale(self) -> bool:
        """Whether the run's writer (or one of the caller's, :meth:`lose`) lost the
        session to another one: the turn is someone else's now, and nothing more of
        it may be written or sent."""
        return self._lost is not None or (
            self._writer is not None and self._writer.stale is not None)

    def fence(self, writer: object) -> None:
        """Make ``writer`` (just opened, nothing appended) claim the conversation only
        if nothing was added since :attr:`read_end`, when it is known and the writer
        can (:class:`lich.sessions.ConditionalWriter`)."""
        if self.read_end is not None and isinstance(writer, ConditionalWriter):
            writer.claim_after(self.read_end)

    def lose(self, error: BaseException) -> None:
        """Mark the turn lost to another process (a writer of the caller's went stale
        before the run began): :attr:`stale` is then true."""
        self._lost = error

    @property
    def recorded(self) -> bool:
        """Whether every record of this turn so far was stored (no writer failure)."""
        return self._writer is not None and not self._writer.failed

    # -- the journal steps (lich.journal.TurnJournal), called by the agent's run --------

    def message_fields(self) -> Mapping[str, Any]:
        """The turn's user message is recorded with its admission: the records are
        stored one by one, and a process killed after it and before ``turn_start``
        leaves a turn that must be continued, not given the message twice."""
        return {"admission": self.admission}

    def attach(self, recorder: RunRecorder, run_id: str, *, continuing: bool = False) -> None:
        """Called by the agent when its run takes this turn: ``turn_start`` is written
        (stored before the first model call) unless the turn is continued and its
        first run already stored one."""
        self._writer = recorder
        self.run_id = run_id
        if not continuing or (self.resume is not None and not self.resume.started):
            # A continued turn whose first run died before its turn_start was stored
            # (its user message was) gets the one turn_start now.
            recorder.append("meta", event=TURN_START, admission=self.admission, run_id=run_id)

    async def before_tool(self, call: ToolCall, tool: Tool | None) -> ToolResult | None:
        """A call that could not be told apart from one that never ran, after a crash,
        is announced (``tool_start``, stored) before it runs; one whose announcement
        cannot be stored does not run (:data:`NOT_RECORDED_ERROR`)."""
        if self._writer is None or tool is None or tool.idempotent or call.args_error:
            return None
        self._writer.append("meta", event=TOOL_START, admission=self.admission,
                            call_id=call.id, tool=call.name)
        if await self._writer.flush():
            self._announced.add(call.id)
            return None
        return ToolResult.failure(NOT_RECORDED_ERROR)

    def after_tool(self, call: ToolCall, result: ToolResult, cancelled: bool) -> ToolResult:
        """A started call of a tool that is not idempotent, cancelled while it ran (a
        stopping worker hands the turn on), may have taken effect: the model that
        continues the turn is told so (:data:`CANCELLED_RUNNING_ERROR`), not just
        "cancelled"."""
        started = call.id in self._announced
        self._announced.discard(call.id)
        if started and cancelled and not result.ok:
            return ToolResult.failure(CANCELLED_RUNNING_ERROR)
        return result

    async def end(self, kind: str, text: str) -> bool:
        """Record ``turn_end`` with the reply, and wait until it is stored.

        Returns whether it was (``False``: no run took the turn, or its writer failed).
        """
        if self._writer is None:
            return False
        self._writer.append("meta", event=TURN_END, admission=self.admission,
                            reply={"kind": kind, "text": text, "run_id": self.run_id})
        return await self._writer.flush()

    async def reply_sent(self) -> bool:
        """Record ``reply_sent``, and wait until it is stored; whether it was."""
        if self._writer is None:
            return False
        self._writer.append("meta", event=REPLY_SENT, admission=self.admission)
        return await self._writer.flush()
