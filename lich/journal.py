"""What a run records beside its conversation, for whoever hands it a journal.

The agent writes a run's messages and events to its transcript itself. Anything
more — the durable-turn records of a bus whose messages outlive a process
(:mod:`lich.turns`), a checkpoint ledger — is the business of the caller that
asked for it, handed to :meth:`lich.Agent.run` as a :class:`TurnJournal`. The
agent only calls the journal at the steps it defines, through the run's own
writer (:class:`RunRecorder`), and knows nothing of what it writes.

The steps, in the order a run takes them (each only when transcripts are kept):

1. :meth:`TurnJournal.fence` with the store's writer, before its first record;
2. :meth:`TurnJournal.message_fields` merged into the record of the turn's user
   message (a new turn; a continued one has its message recorded already);
3. :meth:`TurnJournal.attach` with the run's recorder, after the start records;
   the agent then flushes the recorder before the first model call, so what
   ``attach`` appended is stored before anything happens;
4. :meth:`TurnJournal.before_tool` right before each tool call runs (after every
   hook and approval): a result stops the call with it;
5. :meth:`TurnJournal.after_tool` with each call's result: the journal may
   replace it (a call cancelled while it ran, whose effect is unknown).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from lich.tools import Tool
    from lich.types import ToolCall, ToolResult

__all__ = ["RunRecorder", "TurnJournal"]


@runtime_checkable
class RunRecorder(Protocol):
    """The run's writer as a journal sees it. It never raises: a record that cannot
    be stored makes :attr:`failed` true (and the run goes on without its transcript);
    a session claimed by another writer sets :attr:`stale` and cancels the run."""

    @property
    def failed(self) -> bool:
        """Whether a record could not be stored (none is written after that)."""
        ...

    @property
    def stale(self) -> BaseException | None:
        """The error of a writer that lost its session to another, else ``None``."""
        ...

    def append(self, kind: str, **fields: Any) -> None:
        """Add one record (``kind`` ``meta`` for a journal's own)."""
        ...

    async def flush(self) -> bool:
        """Wait until every record so far is stored; whether they all were."""
        ...


@runtime_checkable
class TurnJournal(Protocol):
    """A per-run capability: what a run records for the caller that handed it over
    (see the module docstring for when each method is called)."""

    def fence(self, writer: object) -> None:
        """The store's writer for this run, just opened, before its first record."""
        ...

    def message_fields(self) -> Mapping[str, Any]:
        """Extra fields of the record of the turn's user message."""
        ...

    def attach(self, recorder: RunRecorder, run_id: str, *, continuing: bool) -> None:
        """The run takes the turn: ``recorder`` writes through the run's writer (and
        stays the journal's for what it records after the run)."""
        ...

    async def before_tool(self, call: ToolCall, tool: Tool | None) -> ToolResult | None:
        """``call`` is about to run ``tool`` (``None``: no such tool). A result stops
        the call with it; ``None`` lets it run."""
        ...

    def after_tool(self, call: ToolCall, result: ToolResult, cancelled: bool) -> ToolResult:
        """``call`` ended with ``result`` (``cancelled``: the run was cancelled while it
        ran): the result the model and the transcript get."""
        ...
