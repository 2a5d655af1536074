"""The conversation bus: every platform's messages become agent runs, one session per chat.

* Runs are serialised per conversation (``platform`` + ``chat_id``) and run in
  parallel across conversations, on one shared :class:`lich.Agent`.
* Each conversation is a lich session with a stable, unguessable id
  (:func:`~lich.gateway._format.conversation_session_id`, keyed with the
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
* Users see sanitised errors; the details go to the log under a reference.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, TypeAlias

from attrs import frozen

from lich.cancel import CancelToken
from lich.events import EventHandler
from lich.gateway._format import (
    conversation_session_id,
    legacy_session_id,
    log_event,
    redact,
    sanitize_error,
)
from lich.gateway._keys import KEY_BYTES, load_or_create_key
from lich.types import Message, SystemMessage, ToolMessage, Usage, UserMessage

if TYPE_CHECKING:
    from lich.agent import Agent
    from lich.gateway.config import GatewayConfig

__all__ = [
    "BUSY_TEXT",
    "CLOSED_TEXT",
    "RESET_TEXT",
    "BusReply",
    "GatewayBus",
    "InboundMessage",
    "ReplyKind",
    "cap_history",
]

log = logging.getLogger("lich.gateway")

BUSY_TEXT = "busy: I am still working on your earlier messages; send this again in a moment."
CLOSED_TEXT = "the gateway is shutting down; send your message again in a little while."
RESET_TEXT = "Started a new conversation."
ABORTED_TEXT = "stopped: the gateway is shutting down before this answer was finished."
HISTORY_STUB = "(earlier messages of this conversation were left out)"
START_INPUT = "hello"

ReplyKind: TypeAlias = Literal["reply", "empty", "busy", "closed", "reset", "error", "aborted"]
_COMMAND = re.compile(r"^/(new|start)(?:@[A-Za-z0-9_]+)?(?:\s+(.*))?$", re.S | re.I)


@frozen
class InboundMessage:
    """A message from a platform: who said what, where."""

    platform: str
    chat_id: str
    user_id: str
    text: str


@frozen
class BusReply:
    """The bus's answer to one message.

    ``kind`` is ``reply`` (the agent answered), ``empty`` (it answered with no
    text), ``busy``, ``closed`` (shutting down), ``reset`` (``/new``),
    ``error`` (sanitised) or ``aborted`` (cancelled at shutdown). ``text`` is
    what to send back; platforms send nothing when it is empty.
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

    :raises OSError: the install's key cannot be created or read.
    :raises ValueError: a limit is out of range, or the key file is not a key.
    """

    def __init__(
        self,
        agent: Agent,
        *,
        history_cap: int = 40,
        max_conversations: int = 200,
        queue_limit: int = 5,
        id_key: bytes | None = None,
    ) -> None:
        if history_cap < 2 or max_conversations < 1 or queue_limit < 1:
            raise ValueError("history_cap >= 2, max_conversations >= 1 and queue_limit >= 1")
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
        self._tokens: set[CancelToken] = set()
        self._active = 0
        self._idle: asyncio.Event | None = None
        self._closed = False

    @classmethod
    def from_config(cls, agent: Agent, config: GatewayConfig) -> GatewayBus:
        """A bus with the limits of a parsed ``[gateway]`` table."""
        return cls(
            agent,
            history_cap=config.history_cap,
            max_conversations=config.max_conversations,
            queue_limit=config.queue_limit,
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

    async def handle(
        self, message: InboundMessage, *, on_event: EventHandler | None = None
    ) -> BusReply:
        """Handle one message: wait for the conversation's turn, run the agent, answer.

        Never raises for a failed run (the reply is a sanitised ``error``);
        only cancellation of the calling task propagates.
        """
        key = (message.platform, message.chat_id)
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
        try:
            async with conv.lock:
                if self._closed:
                    return BusReply("closed", CLOSED_TEXT, conv.session_id)
                return await self._handle_in_turn(conv, message, on_event)
        except Exception as exc:  # e.g. the disk refused a reset: still a clean answer
            user_text, ref = sanitize_error(exc)
            log_event(log, logging.ERROR, "handle_failed", platform=message.platform,
                      chat=message.chat_id, ref=ref, error=redact(f"{type(exc).__name__}: {exc}"))
            return BusReply("error", user_text, conv.session_id)
        finally:
            conv.pending -= 1
            self._leave()

    async def _handle_in_turn(
        self, conv: _Conversation, message: InboundMessage, on_event: EventHandler | None
    ) -> BusReply:
        if not conv.legacy_checked:
            await asyncio.to_thread(self._adopt_legacy_transcript, conv)
            conv.legacy_checked = True
        text = message.text
        command = _COMMAND.match(text.strip())
        if command is not None:
            name, rest = command.group(1).lower(), (command.group(2) or "").strip()
            if name == "new":
                await self._reset(conv)
                if not rest:
                    return BusReply("reset", RESET_TEXT, conv.session_id)
                text = rest
            else:
                text = START_INPUT
        return await self._run(conv, message, text, on_event)

    def _adopt_legacy_transcript(self, conv: _Conversation) -> None:
        """Rename a transcript saved under the old, unkeyed id to the keyed one (once).

        So a conversation started before ids were keyed resumes where it was;
        the guessable name disappears from the session directory.
        """
        from lich.sessions import SessionStore

        sessions = self.agent.sessions
        if not isinstance(sessions, SessionStore):
            return  # only JSONL files were ever written under the old names
        old = sessions.path_for(legacy_session_id(*conv.key))
        new = sessions.path_for(conv.session_id)
        if not old.is_file() or new.exists():
            return
        try:
            # Runs of one conversation are serialised: nothing writes either name meanwhile.
            os.rename(old, new)
        except OSError as exc:
            log_event(log, logging.ERROR, "session_migration_failed", session=conv.session_id,
                      error=f"{type(exc).__name__}: {exc}")
            return
        log_event(log, logging.INFO, "session_migrated", platform=conv.key[0],
                  chat=conv.key[1], session=conv.session_id)

    async def _reset(self, conv: _Conversation) -> None:
        conv.history = []
        agent = self.agent
        if agent.config.persist_sessions and agent.sessions.exists(conv.session_id):
            # The transcript keeps everything said so far; a compact record with no
            # messages makes a resumed conversation start empty, as /new promised.
            def write() -> None:
                writer = agent.sessions.open(conv.session_id)
                try:
                    writer.append("meta", event="reset", source="gateway")
                    writer.compact([])
                finally:
                    writer.close()

            await asyncio.to_thread(write)
        log_event(log, logging.INFO, "conversation_reset", platform=conv.key[0],
                  chat=conv.key[1], session=conv.session_id)

    async def _load(self, conv: _Conversation) -> list[Message]:
        sessions = self.agent.sessions

        def load() -> list[Message] | None:
            # Both in the thread: a database store's exists() is a query too.
            if not sessions.exists(conv.session_id):
                return None
            return sessions.history(conv.session_id)

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
    ) -> BusReply:
        if conv.history is None:
            conv.history = await self._load(conv)
        token = CancelToken()
        self._tokens.add(token)
        started = time.perf_counter()
        try:
            result = await self.agent.run(
                text,
                history=list(conv.history),
                session_id=conv.session_id,
                cancel=token,
                on_event=on_event,
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
            return BusReply("error", user_text, conv.session_id)
        finally:
            self._tokens.discard(token)
        conv.history = cap_history(result.messages, self.history_cap)
        log_event(log, logging.INFO, "run_end", platform=message.platform,
                  chat=message.chat_id, session=conv.session_id, run=result.run_id,
                  stopped=result.stopped_reason, turns=result.outcome.turns_used,
                  tokens=result.usage.total_tokens,
                  ms=round((time.perf_counter() - started) * 1000))
        if result.stopped_reason == "aborted":
            return BusReply("aborted", result.text or ABORTED_TEXT, conv.session_id,
                            result.usage, result.run_id)
        kind: ReplyKind = "reply" if result.text.strip() else "empty"
        return BusReply(kind, result.text, conv.session_id, result.usage, result.run_id)

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
        """Refuse new messages (they get a "shutting down" reply); runs in flight go on."""
        self._closed = True

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
