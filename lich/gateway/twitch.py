"""The twitch platform: Twitch chat (IRC) over a websocket.

On connect lich sends ``CAP REQ :twitch.tv/tags twitch.tv/commands``,
``PASS oauth:<token>``, ``NICK <nick>`` and ``JOIN #<channel>`` for each
channel; it answers ``PING`` with ``PONG``. Chat lines are parsed with an
anchored pattern (tags, prefix, channel, text); the bot's own messages are
ignored (nick compared case-insensitively). Replies are flattened to one
line (a newline would end the IRC command), cut into chunks of at most 500
characters, and paced to at most 20 messages per 30 s (the limit for a
non-moderator account). A dropped connection is re-established with
backoff; replies waiting to go out are sent once it is back.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
from typing import Any, Literal

from attrs import field, frozen

from lich.backoff import Backoff
from lich.gateway._base import Reconnect, WebsocketAdapterBase
from lich.gateway.bus import InboundMessage
from lich.gateway.config import TwitchSettings
from lich.gateway.formatting import flatten_line, log_event, split_text
from lich.gateway.pacing import SlidingWindow, adapter_backoff
from lich.gateway.registry import AdapterContext, GatewayError

__all__ = ["IrcLine", "TwitchAdapter", "parse_irc_line"]

PLATFORM = "twitch"
CAPABILITIES = "CAP REQ :twitch.tv/tags twitch.tv/commands"

# @tags :nick!user@host PRIVMSG #channel :text — anchored at both ends, so a
# message whose *text* contains " PRIVMSG #x :" cannot be mistaken for another.
_PRIVMSG = re.compile(
    r"^(?:@(?P<tags>[^ ]*) )?:(?P<nick>[^!@ ]+)(?:![^@ ]+)?(?:@[^ ]+)? "
    r"PRIVMSG #(?P<channel>[^ ]+) :(?P<text>.*)$",
    re.S,
)
_PING = re.compile(r"^PING(?: (?P<text>.*))?$", re.S)
_COMMAND = re.compile(r"^(?:@[^ ]* )?(?::[^ ]+ )?(?P<command>[A-Z0-9]+)(?: (?P<params>.*))?$", re.S)
_TAG_ESCAPES = {":": ";", "s": " ", "\\": "\\", "r": "\r", "n": "\n"}
_LOGIN_FAILED = ("login authentication failed", "improperly formatted auth", "invalid nick")


@frozen
class IrcLine:
    """One parsed line: ``kind`` is ``privmsg``, ``ping``, ``welcome``, ``reconnect``,
    ``notice`` or ``other``."""

    kind: Literal["privmsg", "ping", "welcome", "reconnect", "notice", "other"]
    channel: str = ""
    user: str = ""
    text: str = ""
    tags: dict[str, str] = field(factory=dict)


def _unescape_tag(value: str) -> str:
    return re.sub(r"\\(.)?", lambda m: _TAG_ESCAPES.get(m.group(1) or "", m.group(1) or ""), value)


def parse_tags(raw: str) -> dict[str, str]:
    """IRCv3 tags (``a=1;b=x\\sy``) as a dict, values unescaped."""
    tags: dict[str, str] = {}
    for item in raw.split(";"):
        if not item:
            continue
        key, _, value = item.partition("=")
        tags[key] = _unescape_tag(value)
    return tags


def parse_irc_line(line: str) -> IrcLine:
    """Parse one IRC line from Twitch (without its CRLF)."""
    m = _PRIVMSG.match(line)
    if m is not None:
        return IrcLine(
            "privmsg",
            channel=m.group("channel").lower(),
            user=m.group("nick").lower(),
            text=m.group("text"),
            tags=parse_tags(m.group("tags") or ""),
        )
    ping = _PING.match(line)
    if ping is not None:
        return IrcLine("ping", text=(ping.group("text") or ":tmi.twitch.tv"))
    command = _COMMAND.match(line)
    if command is not None:
        name = command.group("command")
        params = command.group("params") or ""
        if name == "001":
            return IrcLine("welcome")
        if name == "RECONNECT":
            return IrcLine("reconnect")
        if name == "NOTICE":
            return IrcLine("notice", text=params.partition(" :")[2] or params)
    return IrcLine("other", text=line)


def _safe_chunk(chunk: str) -> str:
    # A reply that starts with "/" or "." would be read as a chat command.
    return "\u200b" + chunk if chunk[:1] in ("/", ".") else chunk


class _Outgoing:
    __slots__ = ("done", "line")

    def __init__(self, line: str, done: asyncio.Future[None]) -> None:
        self.line = line
        self.done = done


class TwitchAdapter(WebsocketAdapterBase):
    """The ``twitch`` platform. ``ready`` is set when the server welcomed the bot."""

    name = PLATFORM
    #: Runs in one process at a time (one IRC connection answers each message):
    #: on a bus with leases the other gateways stand by.
    exclusive = True

    def __init__(self, context: AdapterContext) -> None:
        self.settings: TwitchSettings = context.settings
        super().__init__(context, self.settings.allowlist)
        token = context.secret(self.settings.token_env)
        self.token = token if not token or token.startswith("oauth:") else f"oauth:{token}"
        self.secrets = [token, self.token]
        self.nick = (self.settings.nick or context.secret(self.settings.nick_env)).lower()
        self.channels = self.settings.channels
        self._closing = False
        self._outbox: collections.deque[_Outgoing] = collections.deque()
        self._outbox_ready = asyncio.Event()
        self._limiter = SlidingWindow(
            self.settings.rate_limit_messages, self.settings.rate_limit_window_s
        )

    async def start(self) -> None:
        """Check the token, nick and channels, and start the connection."""
        missing = [
            what for what, value in (
                (f"an OAuth token ({self.settings.token_env})", self.token),
                (f"a nick ([gateway.twitch] nick or {self.settings.nick_env})", self.nick),
                ("channels ([gateway.twitch] channels = [...])", self.channels),
            ) if not value
        ]
        if missing:
            raise GatewayError("twitch needs " + ", ".join(missing))
        self.warn_if_default_deny()
        backoff = adapter_backoff(self.settings.backoff_min_s, self.settings.backoff_max_s)
        self.start_connection(lambda: self._connect_once(backoff), backoff)
        log_event(self.log, logging.INFO, "adapter_started", platform=PLATFORM,
                  url=self.settings.url, channels=",".join(self.channels))

    async def stop(self) -> None:
        """Ignore new chat lines, send the replies in flight, then disconnect."""
        self._closing = True
        await self.wait_tasks(self.context.config.grace_s + 30.0)
        self._stop.set()
        self._outbox_ready.set()
        await self.close_connection(1000)
        while self._outbox:
            item = self._outbox.popleft()
            if not item.done.done():
                item.done.set_exception(ConnectionError("twitch adapter stopped"))
        log_event(self.log, logging.INFO, "adapter_stopped", platform=PLATFORM)

    # ------------------------------------------------------------ connection

    async def _connect_once(self, backoff: Backoff) -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed

        async with connect(self.settings.url, close_timeout=2,
                           user_agent_header="lich-gateway") as ws:
            self._ws = ws
            self.connections += 1
            await ws.send(CAPABILITIES)
            await ws.send(f"PASS {self.token}")
            await ws.send(f"NICK {self.nick}")
            for channel in self.channels:
                await ws.send(f"JOIN #{channel}")
            writer = asyncio.create_task(self._writer(ws), name="lich-twitch-writer")
            try:
                async for frame in ws:
                    text = frame if isinstance(frame, str) else frame.decode("utf-8", "replace")
                    for line in text.split("\r\n"):
                        if line:
                            await self._on_line(ws, line, backoff)
            except ConnectionClosed:
                pass
            finally:
                writer.cancel()
                await asyncio.gather(writer, return_exceptions=True)

    async def _on_line(self, ws: Any, line: str, backoff: Backoff) -> None:
        parsed = parse_irc_line(line)
        if parsed.kind == "ping":
            await ws.send(f"PONG {parsed.text}")
        elif parsed.kind == "welcome":
            backoff.reset()
            self.ready.set()
            log_event(self.log, logging.INFO, "connected", platform=PLATFORM, nick=self.nick)
        elif parsed.kind == "reconnect":
            raise Reconnect("server asked to reconnect")
        elif parsed.kind == "notice":
            if any(marker in parsed.text.lower() for marker in _LOGIN_FAILED):
                raise GatewayError(f"twitch refused the login: {parsed.text}")
            log_event(self.log, logging.INFO, "notice", platform=PLATFORM, text=parsed.text)
        elif parsed.kind == "privmsg":
            self._on_privmsg(parsed)

    def _on_privmsg(self, line: IrcLine) -> None:
        if self._closing or line.user == self.nick:
            return
        user_id = line.tags.get("user-id", "")
        if not (user_id and user_id in self.allowlist.users) and not self.allowed(
            line.user, line.channel
        ):
            return
        text = line.text.strip()
        if text:
            # The IRCv3 message id (the `id` tag) is its id on the bus.
            self.spawn(self._handle(line.channel, line.user, text, line.tags.get("id", "")),
                       f"privmsg-{line.channel}")

    async def _handle(self, channel: str, user: str, text: str, message_id: str = "") -> None:
        reply = await self.bus.handle(InboundMessage(PLATFORM, channel, user, text, message_id),
                                     notify=lambda note: self.send(channel, note))
        if reply.text.strip():
            await self.send(channel, reply.text)

    # --------------------------------------------------------------- sending

    async def send(self, channel: str, text: str) -> bool:
        """Queue ``text`` for ``#channel`` (one line, 500-character chunks); wait until sent."""
        loop = asyncio.get_running_loop()
        items = [
            _Outgoing(f"PRIVMSG #{channel} :{_safe_chunk(chunk)}", loop.create_future())
            for chunk in split_text(flatten_line(text), self.settings.max_reply_chars)
        ]
        if not items:
            return True
        self._outbox.extend(items)
        self._outbox_ready.set()
        try:
            await asyncio.gather(*(item.done for item in items))
        except ConnectionError:
            return False
        log_event(self.log, logging.INFO, "reply_sent", platform=PLATFORM, chat=channel,
                  chunks=len(items))
        return True

    async def _writer(self, ws: Any) -> None:
        while not self._stop.is_set():
            if not self._outbox:
                self._outbox_ready.clear()
                await self._outbox_ready.wait()
                continue
            item = self._outbox[0]
            await self._limiter.acquire()
            # If the connection is gone, send() raises and the line stays queued
            # for the next connection.
            await ws.send(item.line)
            if self._outbox and self._outbox[0] is item:
                self._outbox.popleft()
            if not item.done.done():
                item.done.set_result(None)
