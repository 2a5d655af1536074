"""The conversation bus: every platform's messages become agent runs, one session per chat.

* Runs are serialised per conversation (``platform`` + ``chat_id``) and run in
  parallel across conversations, on one shared :class:`lich.Agent`.
* Each conversation is a lich session with a stable, unguessable id
  (:func:`~lich.gateway.formatting.conversation_session_id`, keyed with the
  install's secret), so after a gateway restart — or after the conversation
  was evicted from memory — it resumes from its JSONL transcript. A
  transcript under the unkeyed name of earlier versions is renamed to the
  keyed one the first time its conversation is used again.
* The history handed to the model is capped (:func:`cap_history`) without
  splitting a tool call from its results and without losing the system prompt.
* Idle conversations are evicted least-recently-used past ``max_conversations``.
* A conversation with ``queue_limit`` messages already running or waiting
  answers "busy" instead of queueing more.
* ``/new`` starts the conversation over; ``/start`` (Telegram's greeting) says hello.
* A plugin's slash command (``lich_register_slash_commands``, offered in the gateway)
  is run in the conversation's turn and its text is the reply; it runs no model. Any
  other ``/word`` is a message for the model, as before.
* A tool call that needs approval is asked about in its chat; ``/approve <id>`` and
  ``/deny <id>`` from the same sender answer it, ahead of the conversation's queue
  (:mod:`lich.gateway.approvals`).
* With ``max_cost_usd_per_day``, a person (platform + sender id) who has spent it
  on the current UTC day, in all their chats together, gets a polite refusal
  (``budget``) instead of a run, until the next day. Each run's cost is appended to
  the person's keyed ledger in the session store (:meth:`GatewayBus.ledger_id_for`)
  and read back from it, so neither a new chat, a restart nor ``/new`` resets it.
  A run whose cost is unknown counts as over the limit: the budget is
  not silently unenforced.
* Users see sanitised errors; the details go to the log under a reference.

:class:`MessageBus` is what the adapters and the runner use of a bus; the
``lich_make_bus`` hook may put another one (the ``nats`` plugin's) between
them and this one, which still runs the messages in the process that runs them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias

from attrs import frozen

from lich.cancel import CancelToken
from lich.events import EventHandler
from lich.gateway._keys import KEY_BYTES, load_or_create_key
from lich.gateway.approvals import ChatApprovals, Notify
from lich.gateway.formatting import (
    conversation_session_id,
    keyed_status_id,
    legacy_session_id,
    log_event,
    person_ledger_id,
    redact,
    sanitize_error,
)
from lich.slash import SlashContext, SlashTable, run_slash_command
from lich.types import Message, SystemMessage, ToolMessage, Usage, UserMessage

if TYPE_CHECKING:
    from lich.agent import Agent, RunResult
    from lich.gateway.config import GatewayConfig
    from lich.turns import DurableTurn

__all__ = [
    "BUDGET_TEXT",
    "BUSY_TEXT",
    "CLOSED_TEXT",
    "MAX_PARKED",
    "NOT_ADMITTED",
    "PENDING",
    "RESET_TEXT",
    "BusReply",
    "GatewayBus",
    "InboundMessage",
    "MessageBus",
    "ParkedReply",
    "ReplyKind",
    "bus_kind",
    "cap_history",
    "is_status_id",
    "new_status_id",
    "park_in",
    "parked_in",
]

log = logging.getLogger("lich.gateway")

BUSY_TEXT = "busy: I am still working on your earlier messages; send this again in a moment."
CLOSED_TEXT = "the gateway is shutting down; send your message again in a little while."
RESET_TEXT = "Started a new conversation."
ABORTED_TEXT = "stopped: the gateway is shutting down before this answer was finished."
APPROVAL_CLOSED_TEXT = "the gateway is shutting down; no one can approve this call now"
HISTORY_STUB = "(earlier messages of this conversation were left out)"
START_INPUT = "hello"

BUDGET_TEXT = ("Sorry, this conversation has used up today's budget, so I can't answer "
               "more today. Please try again tomorrow.")

ReplyKind: TypeAlias = Literal[
    "reply", "empty", "busy", "closed", "reset", "error", "aborted", "budget", "approval",
    "duplicate", "unavailable",
]
NOT_ADMITTED: frozenset[ReplyKind] = frozenset({"busy", "closed", "unavailable"})
"""Reply kinds that mean the message was not taken: nothing will run for it."""
#: What :meth:`MessageBus.parked` answers while the parked reply has not come yet.
PENDING: Literal["pending"] = "pending"
#: Replies an in-process bus keeps for their status ids; the oldest answered go first.
MAX_PARKED = 10_000
_STATUS_ID = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
_COMMAND = re.compile(r"^/(new|start)(?:@[A-Za-z0-9_]+)?(?:\s+(.*))?$", re.S | re.I)
# "/name@bot args" (Telegram addresses a command to a bot so in a group): the name, args.
_SLASH = re.compile(r"^/([^\s@/]+)(?:@[A-Za-z0-9_]+)?(?:\s+(.*))?$", re.S)


@frozen
class InboundMessage:
    """A message from a platform: who said what, where.

    ``message_id`` is the platform's own id of the message (a Telegram update
    id, a Discord message id, the webhook's ``Idempotency-Key``), so a bus
    that can tell (the ``nats`` one) runs a message admitted twice once; empty
    when the platform gives none.
    """

    platform: str
    chat_id: str
    user_id: str
    text: str
    message_id: str = ""


@frozen
class BusReply:
    """The bus's answer to one message.

    ``kind`` is ``reply`` (the agent answered), ``empty`` (it answered with no
    text), ``busy``, ``closed`` (shutting down), ``reset`` (``/new``),
    ``error`` (sanitised), ``aborted`` (cancelled at shutdown), ``approval``
    (the answer to an ``/approve`` or ``/deny`` message) or ``budget`` (the
    conversation spent its daily budget; ``text`` is the polite refusal); a bus
    that removes duplicates answers ``duplicate`` for a message it already has
    (its answer goes to whoever sent it first), and one with a broker
    ``unavailable`` when the broker did not take the message (send it again).
    ``text`` is what to send back; platforms send nothing when it is empty.
    """

    kind: ReplyKind
    text: str
    session_id: str
    usage: Usage | None = None
    run_id: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the agent ran and answered."""
        return self.kind in ("reply", "empty")


ParkedReply: TypeAlias = BusReply | Literal["pending"] | None
"""What :meth:`MessageBus.parked` answers: the reply, :data:`PENDING`, or ``None`` (unknown)."""


def new_status_id() -> str:
    """A fresh status id: unguessable (it names someone's reply), URL- and key-safe."""
    return secrets.token_urlsafe(18)


def is_status_id(value: str) -> bool:
    """Whether ``value`` has the shape of an id :func:`new_status_id` makes."""
    return _STATUS_ID.match(value) is not None


def _utc_day(ts: float) -> str:
    """The UTC calendar day of a timestamp, ``YYYY-MM-DD``: a daily budget's day."""
    return time.strftime("%Y-%m-%d", time.gmtime(ts))


class MessageBus(Protocol):
    """What the gateway uses of a bus: the adapters hand it messages, the runner stops it.

    :class:`GatewayBus` (the default, in process) is one; a plugin's
    ``lich_make_bus`` returns another. Every bus passes
    :class:`lich.testing.contracts.BusContract`: runs of one conversation in
    the order the messages were admitted, runs of different conversations in
    parallel, ``busy`` past the queue limit, ``closed`` once closed.

    A bus spread over processes may also offer ``async lease(name)``, a lease
    with ``acquire()``, ``lost`` (an :class:`asyncio.Event`) and ``release()``:
    the runner then starts an ``exclusive`` adapter (a poller) only while it
    holds the platform's lease (the nats bus does; see
    :mod:`lich.nats_bus.lease`). It may say ``runs_messages = False`` when this
    process runs none of the messages it takes (an ingress handing them all to
    workers): the runner then starts without a usable model instead of failing.
    """

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (new messages are refused)."""
        ...

    @property
    def in_flight(self) -> int:
        """Messages this process is handling or waiting for the answer of."""
        ...

    def session_id_for(self, platform: str, chat_id: str) -> str:
        """The session id of a conversation (its transcript's name)."""
        ...

    async def start(self) -> None:
        """Connect to what the bus needs (a broker); called once before the first message.

        :raises lich.gateway.GatewayError: the bus cannot work (the broker is unreachable).
        """
        ...

    async def submit(
        self,
        message: InboundMessage,
        *,
        on_event: EventHandler | None = None,
        notify: Notify | None = None,
    ) -> asyncio.Future[BusReply]:
        """Admit ``message``; return once it is admitted, with its reply to await.

        ``notify`` sends a message to the conversation's chat while its run goes
        on (an approval request); a bus whose runs happen elsewhere may ignore
        it, and a call needing approval is then denied (``approval_unavailable``).

        Admitted means it will run even if this process stops now, for a bus
        that can promise that (the broker has stored it): a platform that can
        redeliver (Telegram's update offset) is acknowledged only after this
        returns. A refused message has its reply already done: a kind in
        :data:`NOT_ADMITTED` (sending it again later may work), ``duplicate``,
        or an ``error`` that sending again cannot fix (too large). Never
        raises for a failed run or a refusal.
        """
        ...

    async def handle(
        self,
        message: InboundMessage,
        *,
        on_event: EventHandler | None = None,
        notify: Notify | None = None,
    ) -> BusReply:
        """:meth:`submit`, then wait for the reply (``on_event`` sees the run's events)."""
        ...

    async def park(self, pending: asyncio.Future[BusReply], session_id: str) -> str:
        """Keep the reply ``pending`` will have, for a client to fetch later; return its id.

        How the webhook's ``reply_timeout_s`` answers ``202`` with a status URL.
        The id is unguessable (it names someone's reply). :meth:`parked` with it
        answers in this process — and, for a bus spread over processes, in every
        ingress of the install, so a status URL works behind a load balancer.
        Never raises: a reply that cannot be shared is still kept here (logged).
        """
        ...

    async def parked(self, status_id: str) -> ParkedReply:
        """The reply parked under ``status_id``: the reply, :data:`PENDING`, or ``None``.

        ``None`` for an id never given, or expired. A reply of kind ``closed`` when
        the process that waited for it stopped first; ``unavailable`` when the
        place parked replies are kept cannot be read now (ask again).
        """
        ...

    def close(self) -> None:
        """Refuse new messages (they get ``closed``); runs in flight go on."""
        ...

    def cancel_runs(self) -> None:
        """Close, and cancel the runs in flight now (they end ``aborted``)."""
        ...

    async def drain(self, grace_s: float) -> bool:
        """Close, let runs finish within ``grace_s``, cancel the rest, release connections.

        Returns whether everything finished within the grace period.
        """
        ...


def bus_kind(raw: Mapping[str, Any] | None, *, path: str = "$.bus") -> str:
    """The ``kind`` of a raw ``[bus]`` table: ``"memory"`` (in process) unless it names another.

    :raises lich.config.ConfigError: ``[bus]`` is not a table or ``kind`` not a name.
    """
    from lich.settings import ConfigError, json_type_name

    if raw is None:
        return "memory"
    if not isinstance(raw, Mapping):
        raise ConfigError([f"{path}: expected a table, got {json_type_name(raw)}"])
    kind = raw.get("kind", "memory")
    if not isinstance(kind, str):
        raise ConfigError([f"{path}.kind: expected a bus kind name, got {json_type_name(kind)}"])
    if not kind.strip():
        raise ConfigError([f"{path}.kind: must not be empty"])
    return kind.strip()


def cap_history(messages: Sequence[Message], cap: int) -> list[Message]:
    """The last ``cap`` messages of a conversation, fit to hand back to a model.

    The leading system prompt is kept (and not counted). The kept window
    starts at a user message, so it never opens with tool results whose call
    was cut off, nor with an assistant turn. When the last ``cap`` messages
    hold no user message at all (one long tool loop), the window starts after
    any orphaned tool results and opens with a short stub user turn.
    """
    if cap < 2:
        raise ValueError(f"cap must be at least 2, got {cap}")
    leading = bool(messages) and isinstance(messages[0], SystemMessage)
    system: list[Message] = [messages[0]] if leading else []
    rest = list(messages[len(system):])
    if len(rest) <= cap:
        return [*system, *rest]
    start = len(rest) - cap
    for i in range(start, len(rest)):
        if isinstance(rest[i], UserMessage):
            return [*system, *rest[i:]]
    # No user turn in the window: open it with a stub, within the cap.
    j = start + 1
    while j < len(rest) and isinstance(rest[j], ToolMessage):
        j += 1
    return [*system, UserMessage(HISTORY_STUB), *rest[j:]]


def _cap_before_turn(messages: Sequence[Message], cap: int) -> list[Message]:
    """``messages`` ending inside a turn, with what precedes the turn's user message (its
    last one) capped by :func:`cap_history`: what the run that began the turn was given,
    plus the turn so far, whole."""
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], UserMessage):
            return [*cap_history(messages[:i], cap), *messages[i:]]
    return cap_history(messages, cap)


class _Spend:
    """What one person's runs cost on one UTC day, as far as this process knows."""

    __slots__ = ("day", "usd")

    def __init__(self) -> None:
        # The UTC day the spend is counted for (None: read it from the ledger first),
        # and what the day's runs cost (None: one run's cost was unknown).
        self.day: str | None = None
        self.usd: float | None = 0.0


# People whose day's spend is kept in memory; the least recently seen beyond it are
# read again from their ledger when they next write.
_MAX_PEOPLE = 10_000


class _Conversation:
    __slots__ = ("history", "key", "legacy_checked", "lock", "pending", "session_id")

    def __init__(self, key: tuple[str, str], session_id: str) -> None:
        self.key = key
        self.session_id = session_id
        self.history: list[Message] | None = None  # None: load from the session file first
        self.lock = asyncio.Lock()
        self.pending = 0  # running + waiting
        self.legacy_checked = False  # whether a transcript under the old name was looked for


class GatewayBus:
    """Turns platform messages into agent runs; see the module docstring.

    :param agent: the shared agent (its tools are already the gateway's set).
    :param history_cap: non-system messages handed back to the model.
    :param max_conversations: conversations kept in memory; idle ones are
        evicted least-recently-used beyond it (their sessions stay on disk).
    :param queue_limit: messages a conversation may have running or waiting.
    :param id_key: the secret session ids are keyed with; by default the
        install's (``.gateway-id.key`` in the session directory, made on first
        use), or a random one for this bus when sessions are not persisted.
    :param max_cost_usd_per_day: what one person (platform and sender id) may spend
        per UTC day, across all their chats (``None``: no limit). Needs a plugin
        that prices calls (``prices``).

    The bus registers its approver (:class:`~lich.gateway.approvals.ChatApprovals`,
    plugin name ``gateway-approvals``) on the agent's plugin host.

    :raises OSError: the install's key cannot be created or read.
    :raises ValueError: a limit is out of range, or the key file is not a key.
    :raises lich.config.ConfigError: a daily budget, and nothing prices calls.
    """

    def __init__(
        self,
        agent: Agent,
        *,
        history_cap: int = 40,
        max_conversations: int = 200,
        queue_limit: int = 5,
        id_key: bytes | None = None,
        max_cost_usd_per_day: float | None = None,
    ) -> None:
        if history_cap < 2 or max_conversations < 1 or queue_limit < 1:
            raise ValueError("history_cap >= 2, max_conversations >= 1 and queue_limit >= 1")
        if max_cost_usd_per_day is not None and not agent.host.has_impls("lich_price_call"):
            from lich.config import ConfigError

            # Caught at start, not as a refusal of every message later on.
            raise ConfigError([
                "$.gateway.max_cost_usd_per_conversation_day: no loaded plugin prices model "
                "calls, so the budget cannot be checked; enable the `prices` plugin "
                "(plugins = [\"+prices\"], pip install 'lich-agent[prices]')"])
        self.max_cost_usd_per_day = max_cost_usd_per_day
        if id_key is None:
            # The key lives in session_dir whichever store keeps the transcripts.
            id_key = (load_or_create_key(agent.config.session_dir)
                      if agent.config.persist_sessions else secrets.token_bytes(KEY_BYTES))
        self._id_key = id_key
        self.agent = agent
        self.history_cap = history_cap
        self.max_conversations = max_conversations
        self.queue_limit = queue_limit
        self._conversations: OrderedDict[tuple[str, str], _Conversation] = OrderedDict()
        self._spend: OrderedDict[tuple[str, str], _Spend] = OrderedDict()
        self._tokens: set[CancelToken] = set()
        self._active = 0
        self._idle: asyncio.Event | None = None
        self._closed = False
        self.approvals = ChatApprovals()
        name, n = "gateway-approvals", 1
        while agent.host.pm.has_plugin(name):  # another bus on the same host (tests)
            n += 1
            name = f"gateway-approvals-{n}"
        agent.host.register_object(self.approvals, name)
        #: The slash commands of the gateway's chats: its own and the plugins'.
        self.slash: SlashTable = agent.host.slash_commands()
        # Replies fetched by status id (the webhook's reply_timeout_s), bounded.
        self._parked: OrderedDict[str, asyncio.Future[BusReply]] = OrderedDict()
        #: Whether a conversation's history is kept in memory between its runs. A bus
        #: that spreads one conversation over several processes turns it off: each
        #: run then reads the transcript, which another process may have extended.
        self.keep_history = True

    @classmethod
    def from_config(cls, agent: Agent, config: GatewayConfig) -> GatewayBus:
        """A bus with the limits of a parsed ``[gateway]`` table."""
        return cls(
            agent,
            history_cap=config.history_cap,
            max_conversations=config.max_conversations,
            queue_limit=config.queue_limit,
            max_cost_usd_per_day=config.max_cost_usd_per_conversation_day,
        )

    # ----------------------------------------------------------------- state

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (new messages are refused)."""
        return self._closed

    @property
    def in_flight(self) -> int:
        """Messages being handled right now (running or waiting their turn)."""
        return self._active

    def session_id_for(self, platform: str, chat_id: str) -> str:
        """The session id of a conversation (keyed: not computable without the install's key)."""
        return conversation_session_id(platform, chat_id, self._id_key)

    def status_id_for(self, admission: str) -> str:
        """The status id of the message admitted as ``admission``: the same in every
        process sharing this install's key, not computable without it."""
        return keyed_status_id(admission, self._id_key)

    def conversation_keys(self) -> list[tuple[str, str]]:
        """The conversations in memory, least recently used first."""
        return list(self._conversations)

    def history_of(self, platform: str, chat_id: str) -> list[Message] | None:
        """The in-memory history of a conversation (``None`` when not loaded)."""
        conv = self._conversations.get((platform, chat_id))
        return list(conv.history) if conv is not None and conv.history is not None else None

    def _conversation(self, key: tuple[str, str]) -> _Conversation:
        conv = self._conversations.get(key)
        if conv is not None:
            self._conversations.move_to_end(key)
            return conv
        self._evict_idle()
        conv = _Conversation(key, self.session_id_for(*key))
        self._conversations[key] = conv
        return conv

    def _evict_idle(self) -> None:
        while len(self._conversations) >= self.max_conversations:
            victim = next((c for c in self._conversations.values() if c.pending == 0), None)
            if victim is None:
                # Every conversation is busy: run over the limit for now rather than drop work.
                log_event(log, logging.WARNING, "conversations_over_limit",
                          count=len(self._conversations), limit=self.max_conversations)
                return
            del self._conversations[victim.key]
            log_event(log, logging.DEBUG, "conversation_evicted", platform=victim.key[0],
                      chat=victim.key[1], session=victim.session_id)

    # --------------------------------------------------------------- handling

    async def start(self) -> None:
        """Nothing to connect to: the in-process bus is ready when it is made."""

    def _admit(self, message: InboundMessage) -> BusReply | _Conversation:
        """Take ``message`` (counted as pending at once) or refuse it with a reply."""
        key = (message.platform, message.chat_id)
        answered = self.approvals.answer(message)
        if answered is not None:
            # Not queued: the run this answers holds the conversation's turn.
            return BusReply("approval", answered, self.session_id_for(*key))
        if self._closed:
            return BusReply("closed", CLOSED_TEXT, self.session_id_for(*key))
        conv = self._conversation(key)
        log_event(log, logging.INFO, "message_in", platform=message.platform,
                  chat=message.chat_id, user=message.user_id, chars=len(message.text))
        if conv.pending >= self.queue_limit:
            log_event(log, logging.WARNING, "busy", platform=message.platform,
                      chat=message.chat_id, pending=conv.pending, limit=self.queue_limit)
            return BusReply("busy", BUSY_TEXT, conv.session_id)
        conv.pending += 1
        self._enter()
        return conv

    async def submit(
        self,
        message: InboundMessage,
        *,
        on_event: EventHandler | None = None,
        notify: Notify | None = None,
    ) -> asyncio.Future[BusReply]:
        """Admit ``message`` (in memory: nothing survives this process) and start its run.

        The run is a task of its own, queued behind the conversation's earlier
        messages in the order :meth:`submit` was called; the returned future
        is its reply. A refused message's future is already done (``busy`` or
        ``closed``); so is the answer to an ``/approve`` or ``/deny`` message,
        which is not queued (the run it answers holds the conversation's turn).
        ``notify`` sends a message to the chat while the run goes on (an approval
        request; see :meth:`handle`).
        """
        admitted = self._admit(message)
        if isinstance(admitted, BusReply):
            done: asyncio.Future[BusReply] = asyncio.get_running_loop().create_future()
            done.set_result(admitted)
            return done
        return asyncio.ensure_future(self._turn(admitted, message, on_event, notify))

    async def handle(
        self,
        message: InboundMessage,
        *,
        on_event: EventHandler | None = None,
        notify: Notify | None = None,
        turn: DurableTurn | None = None,
    ) -> BusReply:
        """Handle one message: wait for the conversation's turn, run the agent, answer.

        :param on_event: receives every event of the run.
        :param notify: sends a message to the chat while the run goes on — how an
            approval request reaches the person; without it a call needing approval
            is denied (``approval_unavailable``).
        :param turn: run it as a durable turn (:mod:`lich.turns`; a bus whose
            messages outlive their process passes one). One with ``resume`` is
            continued from its transcript: no command, budget check or new user
            message, since all of that happened when it began.

        Never raises for a failed run (the reply is a sanitised ``error``);
        only cancellation of the calling task propagates.
        """
        admitted = self._admit(message)
        if isinstance(admitted, BusReply):
            return admitted
        return await self._turn(admitted, message, on_event, notify, turn)

    async def _turn(
        self,
        conv: _Conversation,
        message: InboundMessage,
        on_event: EventHandler | None,
        notify: Notify | None = None,
        turn: DurableTurn | None = None,
    ) -> BusReply:
        """Run an admitted message in its conversation's turn (the pending count is released)."""
        try:
            async with conv.lock:
                if self._closed:
                    return BusReply("closed", CLOSED_TEXT, conv.session_id)
                return await self._handle_in_turn(conv, message, on_event, notify, turn)
        except Exception as exc:  # e.g. the disk refused a reset: still a clean answer
            user_text, ref = sanitize_error(exc)
            log_event(log, logging.ERROR, "handle_failed", platform=message.platform,
                      chat=message.chat_id, ref=ref, error=redact(f"{type(exc).__name__}: {exc}"))
            return BusReply("error", user_text, conv.session_id)
        finally:
            conv.pending -= 1
            self._leave()

    async def _handle_in_turn(
        self,
        conv: _Conversation,
        message: InboundMessage,
        on_event: EventHandler | None,
        notify: Notify | None,
        turn: DurableTurn | None = None,
    ) -> BusReply:
        # The transcript as the durable turn's bus read it just before: not read again.
        preloaded = turn.transcript if turn is not None else None
        if not conv.legacy_checked:
            if await asyncio.to_thread(self._adopt_legacy_transcript, conv):
                preloaded = None
            conv.legacy_checked = True
        if turn is not None and turn.resume is not None:
            return await self._run(conv, message, message.text, on_event, notify, turn)
        text = message.text
        command = _COMMAND.match(text.strip())
        if command is not None:
            name, rest = command.group(1).lower(), (command.group(2) or "").strip()
            if name == "new":
                preloaded = None
                await self._reset(conv, turn)
                if turn is not None and turn.stale:
                    return BusReply("closed", CLOSED_TEXT, conv.session_id)  # not ours now
                if not rest:
                    return BusReply("reset", RESET_TEXT, conv.session_id)
                text = rest
            else:
                text = START_INPUT
        else:
            answered = await self._plugin_command(conv, message)
            if answered is not None:
                return answered
        if await self._over_budget(message):
            spend = self._spend_of(message)
            log_event(log, logging.WARNING, "budget_refused", platform=message.platform,
                      chat=message.chat_id, user=message.user_id, session=conv.session_id,
                      day=spend.day, spent=spend.usd, limit=self.max_cost_usd_per_day)
            return BusReply("budget", BUDGET_TEXT, conv.session_id)
        return await self._run(conv, message, text, on_event, notify, turn, preloaded)

    async def _plugin_command(self, conv: _Conversation,
                              message: InboundMessage) -> BusReply | None:
        """The reply to a plugin's slash command in ``message``, or ``None`` when it is
        none (a message for the model)."""
        found = _SLASH.match(message.text.strip())
        if found is None:
            return None
        parsed = self.slash.parse(f"/{found.group(1)} {found.group(2) or ''}", "gateway")
        if parsed is None or parsed.command is None or parsed.command.run is None:
            return None
        if parsed.error is not None:
            return BusReply("reply", parsed.error, conv.session_id)
        context = SlashContext(parsed.args, "gateway", conv.session_id, self.agent.config,
                               user_id=f"{message.platform}:{message.user_id}",
                               host=self.agent.host)
        try:
            text = await run_slash_command(parsed.command, context)
        except Exception as exc:
            user_text, ref = sanitize_error(exc)
            log_event(log, logging.ERROR, "slash_command_failed", platform=message.platform,
                      chat=message.chat_id, command=parsed.command.name, ref=ref,
                      error=redact(f"{type(exc).__name__}: {exc}"))
            return BusReply("error", user_text, conv.session_id)
        log_event(log, logging.INFO, "slash_command", platform=message.platform,
                  chat=message.chat_id, command=parsed.command.name)
        return BusReply("reply" if text else "empty", text or "", conv.session_id)

    def ledger_id_for(self, platform: str, user_id: str) -> str:
        """The session id of a person's spend ledger (keyed like a conversation's)."""
        return person_ledger_id(platform, user_id, self._id_key)

    def _spend_of(self, message: InboundMessage) -> _Spend:
        key = (message.platform, message.user_id)
        spend = self._spend.get(key)
        if spend is None:
            spend = self._spend[key] = _Spend()
            while len(self._spend) > _MAX_PEOPLE:
                self._spend.popitem(last=False)
        else:
            self._spend.move_to_end(key)
        return spend

    async def _over_budget(self, message: InboundMessage) -> bool:
        """Whether the sender has spent their budget for today (UTC), in any chat."""
        limit = self.max_cost_usd_per_day
        if limit is None:
            return False
        today = _utc_day(time.time())
        spend = self._spend_of(message)
        if spend.day != today:
            spend.usd = await asyncio.to_thread(
                self._spent_on, self.ledger_id_for(message.platform, message.user_id), today)
            spend.day = today
        return spend.usd is None or spend.usd >= limit

    def _spent_on(self, ledger_id: str, day: str) -> float | None:
        """What a person's runs that ended on ``day`` cost, from their ledger."""
        sessions = self.agent.sessions
        if not self.agent.config.persist_sessions or not sessions.exists(ledger_id):
            return 0.0
        try:
            records = sessions.read(ledger_id).records
        except (OSError, ValueError) as exc:
            log_event(log, logging.ERROR, "session_unreadable", session=ledger_id,
                      error=f"{type(exc).__name__}: {exc}")
            return None  # fail closed: an unreadable spend is not a zero spend
        total = 0.0
        for record in records:
            if record.get("kind") != "meta" or record.get("event") != "spend":
                continue
            ts = record.get("ts")
            if not isinstance(ts, int | float) or _utc_day(ts) != day:
                continue
            cost = record.get("cost_usd")
            if not isinstance(cost, int | float) or isinstance(cost, bool):
                return None
            total += cost
        return total

    def _run_costs_since(self, session_id: str, since: float) -> float | None:
        """What the runs of ``session_id`` that ended after ``since`` cost (a failed
        run's ``run_end`` has it; ``None``: unknown or unreadable)."""
        from lich.sessions import run_cost

        sessions = self.agent.sessions
        try:
            if not sessions.exists(session_id):
                return 0.0
            records = sessions.read(session_id).records
        except (OSError, ValueError):
            return None
        total = 0.0
        for record in records:
            if record.get("kind") != "meta" or record.get("event") != "run_end":
                continue
            ts = record.get("ts")
            if not isinstance(ts, int | float) or ts < since:
                continue
            cost = run_cost(record)
            if cost is None:
                return None
            total += cost
        return total

    async def _count_spend(self, message: InboundMessage, conv: _Conversation,
                           cost: float | None) -> None:
        """Add one run's cost to its sender's day, in memory and in their ledger."""
        if self.max_cost_usd_per_day is None:
            return
        spend = self._spend_of(message)
        today = _utc_day(time.time())
        if spend.day == today:
            spend.usd = None if spend.usd is None or cost is None else spend.usd + cost
        else:
            spend.day = None  # the day turned during the run: read it again
        if not self.agent.config.persist_sessions:
            return
        ledger = self.ledger_id_for(message.platform, message.user_id)

        def write() -> None:
            writer = self.agent.sessions.open(ledger)
            try:
                writer.append("meta", event="spend", cost_usd=cost, session=conv.session_id)
            finally:
                writer.close()

        for attempt in range(3):
            try:
                await asyncio.to_thread(write)
                return
            except Exception as exc:
                # Another process's writer may have claimed the ledger (a fenced store):
                # a fresh writer claims it back. After that the run's spend stays
                # counted in this process's memory only.
                if attempt == 2:
                    log_event(log, logging.ERROR, "spend_unrecorded", session=ledger,
                              error=redact(f"{type(exc).__name__}: {exc}"))

    def _adopt_legacy_transcript(self, conv: _Conversation) -> bool:
        """Rename a transcript saved under the old, unkeyed id to the keyed one (once);
        whether it did.

        So a conversation started before ids were keyed resumes where it was;
        the guessable name disappears from the session directory.
        """
        from lich.sessions import JsonlSessionStore

        sessions = self.agent.sessions
        if not isinstance(sessions, JsonlSessionStore):
            return False  # only JSONL files were ever written under the old names
        old = sessions.path_for(legacy_session_id(*conv.key))
        new = sessions.path_for(conv.session_id)
        if not old.is_file() or new.exists():
            return False
        try:
            # Runs of one conversation are serialised: nothing writes either name meanwhile.
            os.rename(old, new)
        except OSError as exc:
            log_event(log, logging.ERROR, "session_migration_failed", session=conv.session_id,
                      error=f"{type(exc).__name__}: {exc}")
            return False
        log_event(log, logging.INFO, "session_migrated", platform=conv.key[0],
                  chat=conv.key[1], session=conv.session_id)
        return True

    async def _reset(self, conv: _Conversation, turn: DurableTurn | None = None) -> None:
        """Start the conversation over. In a durable ``turn`` the reset's writer claims
        the conversation only if it is as the turn's read left it (and the turn's run
        then expects the reset's records too); a claim that finds it changed marks the
        turn lost (:meth:`DurableTurn.lose`) and writes nothing."""
        from lich.sessions import StaleWriter

        conv.history = []
        agent = self.agent
        if agent.config.persist_sessions:
            # The transcript keeps everything said so far; a compact record with no
            # messages makes a resumed conversation start empty, as /new promised.
            def write() -> bool:
                if not agent.sessions.exists(conv.session_id):
                    return False
                writer = agent.sessions.open(conv.session_id)
                if turn is not None:
                    turn.fence(writer)
                try:
                    writer.append("meta", event="reset", source="gateway")
                    writer.compact([])
                finally:
                    writer.close()
                return True

            try:
                wrote = await asyncio.to_thread(write)
            except StaleWriter as exc:
                if turn is None:
                    raise
                turn.lose(exc)
                return
            if wrote and turn is not None and turn.read_end is not None:
                turn.read_end += 2  # the reset's two records, right after the read's end
        log_event(log, logging.INFO, "conversation_reset", platform=conv.key[0],
                  chat=conv.key[1], session=conv.session_id)

    async def _load(self, conv: _Conversation,
                    preloaded: Sequence[Message] | None = None) -> list[Message]:
        sessions = self.agent.sessions

        def load() -> list[Message] | None:
            # Both in the thread: a database store's exists() is a query too.
            if not sessions.exists(conv.session_id):
                return None
            return sessions.history(conv.session_id)

        if preloaded is not None:
            from lich.sessions import repair_dangling_tool_calls

            history = repair_dangling_tool_calls(preloaded) if preloaded else None
        else:
            try:
                history = await asyncio.to_thread(load)
            except (OSError, ValueError) as exc:
                log_event(log, logging.ERROR, "session_unreadable", session=conv.session_id,
                          error=f"{type(exc).__name__}: {exc}")
                return []
        if history is None:
            return []
        log_event(log, logging.INFO, "conversation_resumed", platform=conv.key[0],
                  chat=conv.key[1], session=conv.session_id, messages=len(history))
        return cap_history(history, self.history_cap)

    async def _run(
        self,
        conv: _Conversation,
        message: InboundMessage,
        text: str,
        on_event: EventHandler | None,
        notify: Notify | None = None,
        turn: DurableTurn | None = None,
        preloaded: Sequence[Message] | None = None,
    ) -> BusReply:
        resume = turn.resume if turn is not None else None
        if resume is not None:
            # The unfinished turn as recorded (its tool calls without results kept: the
            # agent settles them), capped as the run that began it was: the turns before
            # it, never the turn itself, which grows past the cap as its tools run.
            conv.history = _cap_before_turn(resume.messages, self.history_cap)
        elif conv.history is None or not self.keep_history:
            conv.history = await self._load(conv, preloaded)
        token = CancelToken()
        self._tokens.add(token)
        started = time.perf_counter()
        started_wall = time.time()
        try:
            with self.approvals.conversation(conv.session_id, message, notify):
                result: RunResult
                if resume is not None:
                    result = await self.agent.continue_turn(
                        conv.history, conv.session_id, token, on_event,
                        interrupted=resume.started_calls, turn=turn)
                else:
                    result = await self.agent.run(
                        text,
                        history=list(conv.history),
                        session_id=conv.session_id,
                        cancel=token,
                        on_event=on_event,
                        turn=turn,
                    )
        except Exception as exc:
            user_text, ref = sanitize_error(exc)
            log_event(log, logging.ERROR, "run_failed", platform=message.platform,
                      chat=message.chat_id, session=conv.session_id, ref=ref,
                      error=redact(f"{type(exc).__name__}: {exc}"))
            log.debug("run %s failed", ref, exc_info=True)
            # The session file has what happened (with dangling tool calls closed on
            # read); without one, keep the history from before this message.
            if self.agent.config.persist_sessions:
                conv.history = None
                # What the failed run cost is in its run_end record: the sender's.
                if self.max_cost_usd_per_day is not None:
                    await self._count_spend(message, conv, await asyncio.to_thread(
                        self._run_costs_since, conv.session_id, started_wall))
            return BusReply("error", user_text, conv.session_id)
        finally:
            self._tokens.discard(token)
        conv.history = (cap_history(result.messages, self.history_cap)
                        if self.keep_history else None)
        await self._count_spend(message, conv, result.cost_usd)
        log_event(log, logging.INFO, "run_end", platform=message.platform,
                  chat=message.chat_id, session=conv.session_id, run=result.run_id,
                  stopped=result.stopped_reason, turns=result.outcome.turns_used,
                  tokens=result.usage.total_tokens,
                  ms=round((time.perf_counter() - started) * 1000))
        if result.stopped_reason == "aborted":
            return BusReply("aborted", result.text or ABORTED_TEXT, conv.session_id,
                            result.usage, result.run_id)
        if result.refusal is not None:  # a lich_user_prompt hook refused the message
            return BusReply("reply", f"message refused: {result.refusal}", conv.session_id,
                            result.usage, result.run_id)
        kind: ReplyKind = "reply" if result.text.strip() else "empty"
        return BusReply(kind, result.text, conv.session_id, result.usage, result.run_id)

    async def park(self, pending: asyncio.Future[BusReply], session_id: str) -> str:
        """Keep ``pending``'s reply in memory under a new status id (see :class:`MessageBus`).

        At most :data:`MAX_PARKED` are kept: past that the oldest answered one goes
        (only when none is answered, the oldest).
        """
        return park_in(self._parked, pending)

    async def parked(self, status_id: str) -> ParkedReply:
        """The reply parked here under ``status_id`` (see :class:`MessageBus`)."""
        return parked_in(self._parked, status_id, CLOSED_TEXT)

    # --------------------------------------------------------------- shutdown

    def _enter(self) -> None:
        self._active += 1
        if self._idle is not None:
            self._idle.clear()

    def _leave(self) -> None:
        self._active -= 1
        if self._active == 0 and self._idle is not None:
            self._idle.set()

    def close(self) -> None:
        """Refuse new messages (they get a "shutting down" reply); runs in flight go on,
        and every call waiting for approval is denied (the model is told why)."""
        self._closed = True
        self.approvals.deny_all(APPROVAL_CLOSED_TEXT)

    def cancel_runs(self) -> None:
        """Close, and cancel every run in flight now (they end ``aborted``)."""
        self.close()
        for token in list(self._tokens):
            token.cancel()

    async def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Wait until no message is being handled; ``False`` if ``timeout_s`` ran out."""
        if self._active == 0:
            return True
        if self._idle is None:
            self._idle = asyncio.Event()
        try:
            async with asyncio.timeout(timeout_s):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True

    async def drain(self, grace_s: float, *, cancel_timeout_s: float = 10.0) -> bool:
        """Close, let runs in flight finish within ``grace_s``, then cancel the rest.

        Cancelled runs end ``aborted`` with a valid transcript (the session
        file is written as the run goes). Returns whether everything finished
        within the grace period.
        """
        self.close()
        if await self.wait_idle(grace_s):
            return True
        log_event(log, logging.WARNING, "grace_expired", in_flight=self._active,
                  grace_s=grace_s)
        self.cancel_runs()
        await self.wait_idle(cancel_timeout_s)
        return False


def park_in(parked: OrderedDict[str, asyncio.Future[BusReply]],
            pending: asyncio.Future[BusReply], status_id: str | None = None) -> str:
    """Put ``pending`` in ``parked`` under ``status_id`` (a new one by default), keeping
    at most :data:`MAX_PARKED`."""
    status_id = status_id or new_status_id()
    parked[status_id] = pending
    while len(parked) > MAX_PARKED:
        victim = next((k for k, f in parked.items() if f.done()), next(iter(parked)))
        del parked[victim]
    return status_id


def parked_in(parked: Mapping[str, asyncio.Future[BusReply]], status_id: str,
              closed_text: str) -> ParkedReply:
    """What ``parked`` holds under ``status_id``; a cancelled wait is a ``closed`` reply."""
    pending = parked.get(status_id)
    if pending is None:
        return None
    if not pending.done():
        return PENDING
    if pending.cancelled():
        return BusReply("closed", closed_text, "")
    return pending.result()
