"""The telegram platform: Bot API long polling over httpx.

* ``getUpdates`` with ``offset`` and ``timeout`` (50 s); errors back off
  exponentially (``backoff_min_s`` → ``backoff_max_s``), a 429 waits
  ``parameters.retry_after``.
* Each message from an allowlisted user or chat goes to the bus; replies are
  split at 4096 characters on newline/space boundaries and sent with
  ``sendMessage``, paced per chat (``send_interval_s``). Telegram counts
  that limit in UTF-16 code units (an emoji is two), so the split does too.
* A failed send is retried with backoff (429: after ``retry_after``) and is
  never allowed to stop the poller. A retry wait ends at stop: the chunk is
  given up rather than holding the shutdown for a long ``retry_after``.
* At stop the last offset is confirmed, so a restart does not see the same
  updates again. The offset passes an update only once the bus admitted it
  (with the ``nats`` bus: the broker stored it); an update the bus could not
  take is fetched again. The update id is the message's id on the bus, so
  one admitted twice runs once where the bus removes duplicates.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from lich.gateway._base import ChatAdapterBase
from lich.gateway.bus import BusReply, InboundMessage
from lich.gateway.formatting import log_event, split_text, utf16_len
from lich.gateway.pacing import KeyedPacer, adapter_backoff, sleep_or_stop
from lich.gateway.registry import AdapterContext, GatewayError

if TYPE_CHECKING:
    import httpx

    from lich.gateway.config import TelegramSettings

#: Telegram's rule for a webhook's secret_token.
_SECRET_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,256}$")
#: Updates are small; a post larger than this is not Telegram's.
MAX_UPDATE_BYTES = 1_048_576

__all__ = ["NON_TEXT_REPLY", "TelegramAdapter"]

PLATFORM = "telegram"
NON_TEXT_REPLY = "I can only read text messages for now."


class _RetryAfter(Exception):
    def __init__(self, seconds: float) -> None:
        super().__init__(f"rate limited; retry after {seconds:g}s")
        self.seconds = seconds


class _ApiError(Exception):
    def __init__(self, status: int, description: str) -> None:
        super().__init__(f"http {status}: {description}")
        self.status = status

    @property
    def permanent(self) -> bool:
        # 4xx (other than 429) will fail the same way again: bad chat, bot blocked, bad text.
        return 400 <= self.status < 500


def _result(response: httpx.Response) -> Any:
    """The ``result`` of a Bot API response, or the matching exception."""
    try:
        data = response.json()
    except ValueError:
        data = None
    if not isinstance(data, dict):
        if response.status_code == 429:
            raise _RetryAfter(_header_seconds(response) or 1.0)
        raise _ApiError(response.status_code, "response is not a JSON object")
    if response.status_code == 429 or data.get("error_code") == 429:
        params = data.get("parameters")
        retry = params.get("retry_after") if isinstance(params, dict) else None
        if isinstance(retry, int | float) and not isinstance(retry, bool) and retry >= 0:
            raise _RetryAfter(float(retry))
        raise _RetryAfter(_header_seconds(response) or 1.0)
    if not data.get("ok"):
        status = data.get("error_code")
        status = status if isinstance(status, int) else response.status_code
        raise _ApiError(status, str(data.get("description") or "request failed"))
    return data.get("result")


def _table(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _header_seconds(response: httpx.Response) -> float | None:
    try:
        return float(response.headers.get("retry-after", ""))
    except ValueError:
        return None


class TelegramAdapter(ChatAdapterBase):
    """The ``telegram`` platform."""

    name = PLATFORM
    #: Runs in one process at a time (getUpdates allows one reader per bot):
    #: on a bus with leases the other gateways stand by.
    exclusive = True

    def __init__(self, context: AdapterContext) -> None:
        self.settings: TelegramSettings = context.settings
        super().__init__(context, self.settings.allowlist)
        self.token = context.secret(self.settings.token_env)
        self.secrets = [self.token]
        self.offset: int | None = None
        self._client: httpx.AsyncClient | None = None
        self._poller: asyncio.Task[None] | None = None
        self._pacer = KeyedPacer(self.settings.send_interval_s)
        # A webhook is served by any number of ingresses; only polling is exclusive.
        self.exclusive = self.settings.webhook_url is None
        self.webhook_secret = ""
        #: The bound port of the webhook listener (webhook mode; useful with port 0).
        self.port: int | None = None
        self._server: Any = None
        self._serving: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Check the token and start polling."""
        if not self.token:
            raise GatewayError(
                "telegram needs a bot token: "
                f"export {self.settings.token_env}=<token from @BotFather>"
            )
        import httpx

        s = self.settings
        self._client = httpx.AsyncClient(
            base_url=f"{s.base_url}/bot{self.token}/",
            timeout=httpx.Timeout(s.poll_timeout_s + 15.0, connect=10.0),
        )
        self.warn_if_default_deny()
        if s.webhook_url is not None:
            try:
                await self._start_webhook(s.webhook_url)
            except BaseException:
                await self._client.aclose()
                self._client = None
                raise
        else:
            self._poller = asyncio.create_task(self._poll_loop(), name="lich-telegram-poll")
        log_event(self.log, logging.INFO, "adapter_started", platform=PLATFORM,
                  api=s.base_url, mode="webhook" if s.webhook_url else "polling")

    # ---------------------------------------------------------------- webhook

    async def _start_webhook(self, webhook_url: str) -> None:
        """Listen for Telegram's posts, then point the bot at ``webhook_url``.

        :raises GatewayError: no (or a malformed) secret, the port cannot be bound,
            or Telegram refused ``setWebhook``.
        """
        from lich.gateway.config import WebhookSettings
        from lich.gateway.webhook import ConnectionGuard, _bind, _Server

        s = self.settings
        secret = self.context.secret(s.webhook_secret_env)
        if not _SECRET_TOKEN.match(secret):
            raise GatewayError(
                f"telegram's webhook mode needs a secret token: export {s.webhook_secret_env}="
                "<1-256 characters of A-Z, a-z, 0-9, _ and ->")
        self.webhook_secret = secret
        self.secrets.append(secret)
        listen = WebhookSettings(host=s.listen_host, port=s.listen_port)
        try:
            sock = _bind(s.listen_host, s.listen_port)
        except OSError as exc:
            raise GatewayError(f"telegram's webhook cannot listen on {s.listen_host}:"
                               f"{s.listen_port}: {exc.strerror or exc}") from exc
        self.port = sock.getsockname()[1]
        guard = ConnectionGuard(listen.max_connections, listen.max_unauthenticated)
        server = _Server(self._webhook_app(), listen, self.context.config.grace_s + 5,
                         guard).server
        self._server = server
        self._serving = asyncio.create_task(server.serve(sockets=[sock]),
                                            name="lich-telegram-webhook")
        while not server.started:
            if self._serving.done():
                sock.close()
                raise GatewayError("telegram's webhook listener failed to start")
            await asyncio.sleep(0.01)
        assert self._client is not None
        try:
            response = await self._client.post("setWebhook", json={
                "url": webhook_url, "secret_token": secret, "allowed_updates": ["message"]})
            _result(response)
        except Exception as exc:
            await self._stop_webhook()
            raise GatewayError(
                f"telegram refused setWebhook: {self.redact(f'{type(exc).__name__}: {exc}')}"
            ) from exc
        log_event(self.log, logging.INFO, "webhook_set", platform=PLATFORM,
                  listen=f"{s.listen_host}:{self.port}")

    def _webhook_app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse, Response
        from starlette.routing import Route

        async def receive(request: Request) -> Response:
            offered = request.headers.get("x-telegram-bot-api-secret-token", "")
            # Constant time: the token is all that tells Telegram from anyone else.
            if not hmac.compare_digest(offered.encode(), self.webhook_secret.encode()):
                log_event(self.log, logging.WARNING, "webhook_rejected", platform=PLATFORM,
                          status=401, reason="wrong or missing secret token")
                return JSONResponse({"error": "unauthorized"}, status_code=401)
            body = await request.body()
            if len(body) > MAX_UPDATE_BYTES:
                return JSONResponse({"error": "update too large"}, status_code=413)
            try:
                update = json.loads(body)
            except ValueError:
                return JSONResponse({"error": "invalid JSON"}, status_code=400)
            if not await self._accept(update):
                # Not admitted: Telegram delivers it again later.
                return JSONResponse({"error": "unavailable"}, status_code=503)
            return JSONResponse({})

        return Starlette(routes=[Route("/{path:path}", receive, methods=["POST"])])

    async def _stop_webhook(self) -> None:
        if self._server is None or self._serving is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(Exception):
            await self._serving
        self._server = None
        self._serving = None

    async def stop(self) -> None:
        """Stop polling (or listening), deliver the replies in flight, confirm the offset,
        close. The bot's webhook stays set: other ingresses may serve it still."""
        self._stop.set()
        await self._stop_webhook()
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None
        await self.wait_tasks(self.context.config.grace_s + 30.0)
        if self._client is not None:
            if self.offset is not None and self.settings.webhook_url is None:
                try:
                    await self._client.get(
                        "getUpdates", params={"offset": self.offset, "timeout": 0}, timeout=5.0
                    )
                except Exception as exc:
                    log_event(self.log, logging.DEBUG, "offset_confirm_failed",
                              platform=PLATFORM, error=type(exc).__name__)
            await self._client.aclose()
            self._client = None
        log_event(self.log, logging.INFO, "adapter_stopped", platform=PLATFORM)

    # ---------------------------------------------------------------- polling

    async def _poll_loop(self) -> None:
        assert self._client is not None
        s = self.settings
        backoff = adapter_backoff(s.backoff_min_s, s.backoff_max_s)
        while not self._stop.is_set():
            params: dict[str, Any] = {"timeout": s.poll_timeout_s}
            if self.offset is not None:
                params["offset"] = self.offset
            try:
                response = await self._client.get("getUpdates", params=params)
                updates = _result(response)
                if not isinstance(updates, list):
                    raise _ApiError(response.status_code, "result is not an array")
            except _RetryAfter as exc:
                delay = min(exc.seconds, s.max_retry_after_s)
                log_event(self.log, logging.WARNING, "rate_limited", platform=PLATFORM,
                          method="getUpdates", retry_after_s=delay)
            except Exception as exc:  # network, API or anything unexpected: never stop polling
                delay = backoff.next_delay()
                log_event(self.log, logging.WARNING, "poll_failed", platform=PLATFORM,
                          error=self.redact(f"{type(exc).__name__}: {exc}"),
                          retry_in_s=round(delay, 2))
            else:
                if backoff.failures:
                    log_event(self.log, logging.INFO, "poll_recovered", platform=PLATFORM)
                backoff.reset()
                for update in updates:
                    if not await self._accept(update):
                        # The bus did not take it: the offset stays before it, so the
                        # next getUpdates returns it (and those after it) again.
                        delay = backoff.next_delay()
                        log_event(self.log, logging.WARNING, "admit_failed",
                                  platform=PLATFORM, update=update.get("update_id"),
                                  retry_in_s=round(delay, 2))
                        break
                else:
                    continue
            if await sleep_or_stop(delay, self._stop):
                break

    async def _accept(self, update: Any) -> bool:
        """Take one update; ``False`` when the bus could not admit it (not acknowledged).

        The offset moves past an update only once the bus has admitted its message
        (with a broker: stored it), so an update is never acknowledged and then lost.
        """
        if not isinstance(update, dict):
            return True
        update_id = update.get("update_id")
        chat_id, inbound = self._inbound(update)
        pending: asyncio.Future[BusReply] | None = None
        if inbound is not None and chat_id is not None:  # (a message always has its chat)
            # chat_id as the update gave it (an int): what the Bot API is sent back.
            pending = await self.bus.submit(inbound, notify=self._notifier(chat_id))
            if pending.done() and pending.result().kind == "unavailable":
                return False
        if isinstance(update_id, int) and not isinstance(update_id, bool):
            self.offset = max(self.offset or 0, update_id + 1)
        if chat_id is not None:
            self.spawn(self._deliver(chat_id, pending), f"update-{update_id}")
        return True

    def _notifier(self, chat_id: int | str) -> Callable[[str], Awaitable[bool]]:
        """Sends a message to ``chat_id`` while its run goes on (an approval request)."""
        return lambda note: self.send(chat_id, note)

    def _inbound(
        self, update: dict[str, Any]
    ) -> tuple[int | str | None, InboundMessage | None]:
        """The chat to answer and the message for the bus (``None`` for a message with
        no text, which gets :data:`NON_TEXT_REPLY`); no chat for what is not a
        conversation or is denied."""
        message = update.get("message")
        if not isinstance(message, dict):
            return None, None  # edits, channel posts, callbacks: not conversations
        sender = _table(message.get("from"))
        if sender.get("is_bot"):
            return None, None
        chat = _table(message.get("chat"))
        chat_id = chat.get("id")
        if chat_id is None or isinstance(chat_id, bool) or not isinstance(chat_id, int | str):
            return None, None
        user_id = str(sender.get("id", "unknown"))
        if not self.allowed(user_id, str(chat_id)):
            return None, None
        text = message.get("text")
        if not isinstance(text, str):
            return chat_id, None
        update_id = update.get("update_id")
        # The bot's id (the token's part before ':', not secret) keeps two bots' update
        # ids apart on one bus.
        message_id = (f"{self.token.partition(':')[0]}:{update_id}"
                      if isinstance(update_id, int) and not isinstance(update_id, bool) else "")
        return chat_id, InboundMessage(PLATFORM, str(chat_id), user_id, text, message_id)

    async def _deliver(self, chat_id: int | str,
                       pending: asyncio.Future[BusReply] | None) -> None:
        if pending is None:
            await self.send(chat_id, NON_TEXT_REPLY)
            return
        reply = await pending
        if reply.text.strip():
            await self.send(chat_id, reply.text)

    # ---------------------------------------------------------------- sending

    async def send(self, chat_id: int | str, text: str) -> bool:
        """Send ``text`` to a chat in chunks of at most 4096 UTF-16 code units.

        Returns ``False`` if a chunk failed for good (or was given up at stop).
        """
        key = str(chat_id)
        async with self._pacer.slot(key):
            for chunk in split_text(text, self.settings.max_reply_chars, utf16_len):
                await self._pacer.wait_turn(key)
                ok = await self._send_chunk(chat_id, chunk)
                self._pacer.mark(key)
                if not ok:
                    return False  # the rest would read as nonsense without this part
        return True

    async def _send_chunk(self, chat_id: int | str, chunk: str) -> bool:
        import httpx

        if self._client is None:
            return False
        s = self.settings
        backoff = adapter_backoff(s.backoff_min_s, s.backoff_max_s)
        attempt = 0
        while True:
            try:
                response = await self._client.post(
                    "sendMessage", json={"chat_id": chat_id, "text": chunk}, timeout=30.0
                )
                _result(response)
            except _RetryAfter as exc:
                delay = min(exc.seconds, s.max_retry_after_s)
                log_event(self.log, logging.WARNING, "rate_limited", platform=PLATFORM,
                          method="sendMessage", chat=chat_id, retry_after_s=delay)
            except _ApiError as exc:
                if exc.permanent:
                    log_event(self.log, logging.ERROR, "send_failed", platform=PLATFORM,
                              chat=chat_id, error=self.redact(str(exc)))
                    return False
                delay = backoff.next_delay()
                log_event(self.log, logging.WARNING, "send_retry", platform=PLATFORM,
                          chat=chat_id, error=self.redact(str(exc)), retry_in_s=round(delay, 2))
            except httpx.HTTPError as exc:
                delay = backoff.next_delay()
                log_event(self.log, logging.WARNING, "send_retry", platform=PLATFORM,
                          chat=chat_id, error=self.redact(f"{type(exc).__name__}: {exc}"),
                          retry_in_s=round(delay, 2))
            else:
                log_event(self.log, logging.INFO, "reply_sent", platform=PLATFORM,
                          chat=chat_id, chars=len(chunk))
                return True
            attempt += 1
            if attempt > s.send_retries:
                log_event(self.log, logging.ERROR, "send_gave_up", platform=PLATFORM,
                          chat=chat_id, attempts=attempt)
                return False
            # A 429 may ask for a minute; waiting it out would hold stop() for as long.
            if await sleep_or_stop(delay, self._stop):
                log_event(self.log, logging.WARNING, "send_gave_up", platform=PLATFORM,
                          chat=chat_id, attempts=attempt, reason="stopping")
                return False
