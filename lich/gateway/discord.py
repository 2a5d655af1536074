"""The discord platform: the gateway websocket for messages in, REST (httpx) for replies out.

Gateway protocol as lich speaks it:

* ``Hello`` (op 10) → ``Identify`` (op 2) on a fresh session, or ``Resume``
  (op 6, with the session id and the last sequence number) after a drop.
* Heartbeats (op 1) every ``heartbeat_interval`` carry the last sequence
  number; if the previous one was not acknowledged (op 11) the connection is
  a zombie: it is closed and resumed.
* ``Dispatch`` (op 0) updates the sequence; ``READY`` gives the session id,
  the resume URL and the bot's own id; ``MESSAGE_CREATE`` is a message.
* ``Reconnect`` (op 7) → reconnect and resume; ``Invalid Session`` (op 9) →
  resume if ``d`` is true, else identify afresh after a short wait.
* Close codes that cannot succeed again (bad token, bad intents, …) stop the
  adapter with an error; every other drop reconnects with backoff.

Messages: from non-bots only; in guild channels only those that mention the
bot (``require_mention``); direct messages only from explicitly allowlisted
users or channels. Replies go out in 2000-character chunks through
``POST /channels/<id>/messages``, honouring ``429 retry_after``, with
mentions disabled so the model cannot ping ``@everyone``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from lich.backoff import Backoff
from lich.gateway._base import Reconnect, WebsocketAdapterBase
from lich.gateway.bus import InboundMessage
from lich.gateway.formatting import log_event, split_text
from lich.gateway.pacing import KeyedPacer, adapter_backoff
from lich.gateway.registry import AdapterContext, GatewayError

if TYPE_CHECKING:
    import httpx

    from lich.gateway.config import DiscordSettings

__all__ = ["DiscordAdapter"]

PLATFORM = "discord"

OP_DISPATCH = 0
OP_HEARTBEAT = 1
OP_IDENTIFY = 2
OP_RESUME = 6
OP_RECONNECT = 7
OP_INVALID_SESSION = 9
OP_HELLO = 10
OP_HEARTBEAT_ACK = 11

# Close codes after which reconnecting cannot help: authentication failed,
# invalid shard, sharding required, invalid API version, invalid or disallowed intents.
FATAL_CLOSE_CODES = frozenset({4004, 4010, 4011, 4012, 4013, 4014})
# Close codes after which the session cannot be resumed: invalid sequence, session timed out.
FRESH_SESSION_CLOSE_CODES = frozenset({4007, 4009})

HELLO_TIMEOUT_S = 30.0

_Next = Literal["resume", "identify"]


class _Fatal(GatewayError):
    """The gateway refused us in a way reconnecting will not fix."""


class _Reconnect(Reconnect):
    def __init__(self, how: _Next, reason: str) -> None:
        super().__init__(reason, mode=how)
        self.how = how


class DiscordAdapter(WebsocketAdapterBase):
    """The ``discord`` platform.

    ``ready`` is set while a session is identified or resumed, and cleared when
    the connection drops.
    """

    name = PLATFORM
    #: Runs in one process at a time (one gateway session per bot (unsharded)):
    #: on a bus with leases the other gateways stand by.
    exclusive = True

    def __init__(self, context: AdapterContext) -> None:
        self.settings: DiscordSettings = context.settings
        super().__init__(context, self.settings.allowlist)
        self.token = context.secret(self.settings.token_env)
        self.secrets = [self.token]
        self.bot_id: str | None = None
        self.session_id: str | None = None
        self.resume_url: str | None = None
        self.seq: int | None = None
        self._acked = True
        self._rest: httpx.AsyncClient | None = None
        self._pacer = KeyedPacer(0.0)

    async def start(self) -> None:
        """Check the token, open the REST client and start the gateway connection."""
        if not self.token:
            raise GatewayError(
                f"discord needs a bot token: export {self.settings.token_env}=<bot token>"
            )
        import httpx

        self._rest = httpx.AsyncClient(
            base_url=self.settings.api_base_url + "/",
            headers={"authorization": f"Bot {self.token}", "user-agent": "lich-gateway"},
            timeout=httpx.Timeout(30.0, connect=10.0),
        )
        self.warn_if_default_deny()
        backoff = adapter_backoff(self.settings.backoff_min_s, self.settings.backoff_max_s)
        # READY/RESUMED reset the backoff, so a healthy session reconnects at once-ish
        # while a server that keeps dropping us is not hammered.
        self.start_connection(lambda: self._connect_once(self._url(), backoff), backoff)
        log_event(self.log, logging.INFO, "adapter_started", platform=PLATFORM,
                  gateway=self.settings.gateway_url)

    async def stop(self) -> None:
        """Close the gateway connection, deliver the replies in flight, close REST."""
        self._stop.set()
        await self.close_connection(1000, "lich gateway stopping")
        await self.wait_tasks(self.context.config.grace_s + 30.0)
        if self._rest is not None:
            await self._rest.aclose()
            self._rest = None
        log_event(self.log, logging.INFO, "adapter_stopped", platform=PLATFORM)

    # ------------------------------------------------------------ connection

    def _url(self) -> str:
        if self.settings.use_resume_url and self.resume_url and self.session_id:
            if urlsplit(self.resume_url).query:
                return self.resume_url
            query = urlsplit(self.settings.gateway_url).query
            return self.resume_url.rstrip("/") + "/" + (f"?{query}" if query else "")
        return self.settings.gateway_url

    async def _connect_once(self, url: str, backoff: Backoff) -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosed

        async with connect(
            url, ping_interval=None, close_timeout=2, max_size=8 * 1024 * 1024,
            user_agent_header="lich-gateway",
        ) as ws:
            self._ws = ws
            self.connections += 1
            hello = await asyncio.wait_for(ws.recv(), HELLO_TIMEOUT_S)
            payload = _decode(hello)
            if payload.get("op") != OP_HELLO:
                raise ValueError(f"expected Hello (op 10), got op {payload.get('op')!r}")
            data = _table(payload.get("d"))
            interval_ms = data.get("heartbeat_interval")
            interval = float(interval_ms) / 1000 if isinstance(interval_ms, int | float) else 41.25
            await self._identify_or_resume(ws)
            heartbeat = asyncio.create_task(self._heartbeat(ws, max(interval, 0.01)))
            try:
                try:
                    async for raw in ws:
                        await self._on_payload(ws, _decode(raw), backoff)
                except ConnectionClosed:
                    pass
                if heartbeat.done() and not heartbeat.cancelled() and heartbeat.exception():
                    raise heartbeat.exception()  # type: ignore[misc]
                self._after_close(ws.close_code, ws.close_reason)
            except _Reconnect as exc:
                # A non-1000 close keeps the session resumable on Discord's side.
                await ws.close(4000 if exc.how == "resume" else 1000, str(exc)[:120])
                raise
            finally:
                heartbeat.cancel()
                await asyncio.gather(heartbeat, return_exceptions=True)

    def _after_close(self, code: int | None, reason: str | None) -> None:
        if self._stop.is_set():
            return
        if code in FATAL_CLOSE_CODES:
            raise _Fatal(f"discord closed the gateway with {code}: {reason or 'no reason'}"
                         " (check the token and the intents)")
        if code in FRESH_SESSION_CLOSE_CODES:
            self._forget_session()
            raise _Reconnect("identify", f"connection closed ({code})")
        raise _Reconnect("resume", f"connection closed ({code})")

    async def _identify_or_resume(self, ws: Any) -> None:
        self._acked = True
        if self.session_id and self.seq is not None:
            await ws.send(json.dumps({"op": OP_RESUME, "d": {
                "token": self.token, "session_id": self.session_id, "seq": self.seq}}))
            log_event(self.log, logging.INFO, "resuming", platform=PLATFORM, seq=self.seq)
            return
        await ws.send(json.dumps({"op": OP_IDENTIFY, "d": {
            "token": self.token,
            "intents": self.settings.intents,
            "properties": {"os": "linux", "browser": "lich", "device": "lich"},
        }}))

    async def _heartbeat(self, ws: Any, interval: float) -> None:
        # The first beat is jittered, as the protocol asks, so reconnecting bots do not
        # all beat in step.
        await asyncio.sleep(interval * random.random())
        while True:
            if not self._acked:
                log_event(self.log, logging.WARNING, "heartbeat_ack_missing", platform=PLATFORM)
                await ws.close(4000, "heartbeat ack missing")
                raise _Reconnect("resume", "heartbeat ack missing")
            self._acked = False
            await ws.send(json.dumps({"op": OP_HEARTBEAT, "d": self.seq}))
            await asyncio.sleep(interval)

    def _forget_session(self) -> None:
        self.session_id = None
        self.resume_url = None
        self.seq = None

    async def _on_payload(self, ws: Any, payload: dict[str, Any], backoff: Backoff) -> None:
        op = payload.get("op")
        if op == OP_DISPATCH:
            seq = payload.get("s")
            if isinstance(seq, int) and not isinstance(seq, bool):
                self.seq = seq
            data = payload.get("d")
            self._on_dispatch(str(payload.get("t")), data if isinstance(data, dict) else {},
                              backoff)
        elif op == OP_HEARTBEAT:
            await ws.send(json.dumps({"op": OP_HEARTBEAT, "d": self.seq}))
        elif op == OP_HEARTBEAT_ACK:
            self._acked = True
        elif op == OP_RECONNECT:
            raise _Reconnect("resume", "server asked to reconnect")
        elif op == OP_INVALID_SESSION:
            resumable = payload.get("d") is True
            if not resumable:
                self._forget_session()
                # The protocol asks for a short wait before identifying again.
                await asyncio.sleep(self.settings.invalid_session_delay_s)
            raise _Reconnect("resume" if resumable else "identify", "invalid session")

    def _on_dispatch(self, event: str, data: dict[str, Any], backoff: Backoff) -> None:
        if event == "READY":
            self.session_id = str(data.get("session_id") or "") or None
            url = data.get("resume_gateway_url")
            self.resume_url = url if isinstance(url, str) and url else None
            user = _table(data.get("user"))
            self.bot_id = str(user.get("id")) if user.get("id") is not None else self.bot_id
            backoff.reset()
            self.ready.set()
            log_event(self.log, logging.INFO, "connected", platform=PLATFORM,
                      bot=self.bot_id, session=self.session_id)
        elif event == "RESUMED":
            backoff.reset()
            self.ready.set()
            log_event(self.log, logging.INFO, "resumed", platform=PLATFORM, seq=self.seq)
        elif event == "MESSAGE_CREATE":
            self._on_message(data)

    # --------------------------------------------------------------- messages

    def _mentions_bot(self, data: dict[str, Any], content: str) -> bool:
        if not self.bot_id:
            return False
        mentions = data.get("mentions")
        if isinstance(mentions, list) and any(
            isinstance(m, dict) and str(m.get("id")) == self.bot_id for m in mentions
        ):
            return True
        return f"<@{self.bot_id}>" in content or f"<@!{self.bot_id}>" in content

    def _on_message(self, data: dict[str, Any]) -> None:
        author = data.get("author")
        if not isinstance(author, dict) or author.get("bot"):
            return
        user_id = str(author.get("id") or "")
        if not user_id or user_id == self.bot_id:
            return
        channel_id = str(data.get("channel_id") or "")
        if not channel_id:
            return
        raw_content = data.get("content")
        content = raw_content if isinstance(raw_content, str) else ""
        guild_id = data.get("guild_id")
        if guild_id is not None:
            if self.settings.require_mention and not self._mentions_bot(data, content):
                return  # guild chatter not addressed to the bot
            in_guild = str(guild_id) in self.allowlist.chats
            if not in_guild and not self.allowed(user_id, channel_id):
                return
        elif not self.allowed(user_id, channel_id, explicit=True):
            return  # direct messages only from people listed by id
        if self.bot_id:
            content = re.sub(rf"<@!?{re.escape(self.bot_id)}>", " ", content)
        content = content.strip()
        if not content:
            return
        # The message's snowflake is its id on the bus: one delivered twice (a resumed
        # session replays events) runs once where the bus removes duplicates.
        message_id = str(data.get("id") or "")
        self.spawn(self._handle(channel_id, user_id, content, message_id),
                   f"message-{data.get('id')}")

    async def _handle(self, channel_id: str, user_id: str, content: str,
                      message_id: str = "") -> None:
        reply = await self.bus.handle(
            InboundMessage(PLATFORM, channel_id, user_id, content, message_id),
            notify=lambda note: self.send(channel_id, note))
        if reply.text.strip():
            await self.send(channel_id, reply.text)

    async def send(self, channel_id: str, text: str) -> bool:
        """Post ``text`` to a channel in 2000-character chunks; ``False`` if one failed for good."""
        async with self._pacer.slot(channel_id):
            for chunk in split_text(text, self.settings.max_reply_chars):
                if not await self._post(channel_id, chunk):
                    return False
        return True

    async def _post(self, channel_id: str, chunk: str) -> bool:
        import httpx

        if self._rest is None:
            return False
        s = self.settings
        backoff = adapter_backoff(s.backoff_min_s, s.backoff_max_s)
        body = {"content": chunk, "allowed_mentions": {"parse": []}}
        attempt = 0
        while True:
            try:
                response = await self._rest.post(f"channels/{channel_id}/messages", json=body)
            except httpx.HTTPError as exc:
                delay = backoff.next_delay()
                log_event(self.log, logging.WARNING, "send_retry", platform=PLATFORM,
                          chat=channel_id, error=self.redact(f"{type(exc).__name__}: {exc}"),
                          retry_in_s=round(delay, 2))
            else:
                status = response.status_code
                if 200 <= status < 300:
                    log_event(self.log, logging.INFO, "reply_sent", platform=PLATFORM,
                              chat=channel_id, chars=len(chunk))
                    return True
                if status == 429:
                    delay = min(_retry_after(response), s.max_retry_after_s)
                    log_event(self.log, logging.WARNING, "rate_limited", platform=PLATFORM,
                              chat=channel_id, retry_after_s=delay)
                elif 400 <= status < 500:
                    log_event(self.log, logging.ERROR, "send_failed", platform=PLATFORM,
                              chat=channel_id, status=status,
                              error=self.redact(response.text[:200]))
                    return False
                else:
                    delay = backoff.next_delay()
                    log_event(self.log, logging.WARNING, "send_retry", platform=PLATFORM,
                              chat=channel_id, status=status, retry_in_s=round(delay, 2))
            attempt += 1
            if attempt > s.send_retries:
                log_event(self.log, logging.ERROR, "send_gave_up", platform=PLATFORM,
                          chat=channel_id, attempts=attempt)
                return False
            await asyncio.sleep(delay)


def _table(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _decode(raw: str | bytes) -> dict[str, Any]:
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("gateway payload is not a JSON object")
    return data


def _retry_after(response: httpx.Response) -> float:
    """Seconds to wait after a 429: the body's ``retry_after``, else the header, else 1."""
    try:
        data = response.json()
    except ValueError:
        data = None
    if isinstance(data, dict):
        value = data.get("retry_after")
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            return float(value)
    try:
        return max(0.0, float(response.headers.get("retry-after", "")))
    except ValueError:
        return 1.0
