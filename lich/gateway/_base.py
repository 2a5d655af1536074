"""What the chat platforms (telegram, discord, twitch) share: allowlists and in-flight
work, and for the websocket platforms (discord, twitch) the reconnect loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from lich.backoff import Backoff
from lich.gateway.config import Allowlist
from lich.gateway.formatting import log_event, redact
from lich.gateway.pacing import sleep_or_stop
from lich.gateway.registry import AdapterContext, GatewayError

__all__ = ["ChatAdapterBase", "Reconnect", "WebsocketAdapterBase"]


class ChatAdapterBase:
    """Allowlist checks, the default-deny warning, and tracking of message tasks."""

    name = "chat"

    def __init__(self, context: AdapterContext, allowlist: Allowlist) -> None:
        self.context = context
        self.bus = context.bus
        self.log = context.log
        self.allowlist = allowlist
        self._tasks: set[asyncio.Task[None]] = set()
        self._stop = asyncio.Event()
        self.secrets: list[str] = []

    def warn_if_default_deny(self) -> None:
        """Log, at start, that an empty allowlist lets nobody in."""
        if not self.allowlist.configured:
            log_event(
                self.log, logging.WARNING, "default_deny", platform=self.name,
                detail=(
                    f"no allowed_users or allowed_chats in [gateway.{self.name}]: every "
                    "message will be refused until you list who may talk to the bot "
                    '(or set allowed_users = ["*"] to open it to everyone)'
                ),
            )
        elif self.allowlist.open:
            log_event(self.log, logging.WARNING, "allowlist_open", platform=self.name,
                      detail="allowlist contains \"*\": anyone can talk to the bot")

    def allowed(self, user_id: str, chat_id: str, *, explicit: bool = False) -> bool:
        """Check the allowlist, logging a refusal."""
        if self.allowlist.allows(user_id, chat_id, explicit=explicit):
            return True
        log_event(self.log, logging.INFO, "denied", platform=self.name, chat=chat_id,
                  user=user_id, reason="not in allowlist")
        return False

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run one message's handling as a task tracked until it ends."""
        task = asyncio.create_task(self._guard(coro, name), name=f"lich-{self.name}-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _guard(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # one message's failure never stops the adapter
            log_event(self.log, logging.ERROR, "handler_failed", platform=self.name, task=name,
                      error=self.redact(f"{type(exc).__name__}: {exc}"))
            self.log.debug("handler %s failed", name, exc_info=True)

    def redact(self, text: str) -> str:
        """``text`` without this adapter's secrets."""
        return redact(text, self.secrets)

    async def wait_tasks(self, timeout_s: float) -> None:
        """Wait for the message tasks (replies being produced and sent), then cancel the rest."""
        if not self._tasks:
            return
        _, late = await asyncio.wait(set(self._tasks), timeout=timeout_s)
        for task in late:
            task.cancel()
        if late:
            log_event(self.log, logging.WARNING, "handlers_cancelled", platform=self.name,
                      count=len(late))
            await asyncio.gather(*late, return_exceptions=True)


class Reconnect(Exception):
    """Raised inside a connection to end it and connect again after the backoff:
    the server asked for it, or the protocol calls for it (logged as ``reconnecting``).

    :param reason: what the log line says.
    :param fields: more ``key=value`` fields for that line.
    """

    def __init__(self, reason: str, **fields: Any) -> None:
        super().__init__(reason)
        self.fields = fields


class WebsocketAdapterBase(ChatAdapterBase):
    """A platform on one long-lived websocket: the connection, its reconnect loop, its end.

    ``ready`` is set by the subclass once the platform has accepted the bot on a
    connection, and cleared here whenever that connection ends; ``failure``
    holds why the adapter gave up, when it did.
    """

    def __init__(self, context: AdapterContext, allowlist: Allowlist) -> None:
        super().__init__(context, allowlist)
        self.ready = asyncio.Event()
        self.connections = 0
        self.failure: str | None = None
        self._ws: Any = None
        self._runner: asyncio.Task[None] | None = None

    def start_connection(self, connect_once: Callable[[], Awaitable[None]],
                         backoff: Backoff) -> None:
        """Run :meth:`keep_connected` as the adapter's connection task."""
        self._runner = asyncio.create_task(self.keep_connected(connect_once, backoff),
                                           name=f"lich-{self.name}")

    async def close_connection(self, *close_args: Any) -> None:
        """Close the websocket (``close_args`` go to its ``close``) and end the loop."""
        if self._ws is not None:
            try:
                await self._ws.close(*close_args)
            except Exception:
                pass  # already gone: there is nothing left to close
        if self._runner is not None:
            self._runner.cancel()
            await asyncio.gather(self._runner, return_exceptions=True)
            self._runner = None

    async def keep_connected(self, connect_once: Callable[[], Awaitable[None]],
                             backoff: Backoff) -> None:
        """Connect, and connect again after every drop, until stopped or refused.

        ``connect_once`` serves one connection and returns when it closes. It
        raises :class:`Reconnect` to end it on purpose, and
        :class:`~lich.gateway.registry.GatewayError` when the platform refused
        the bot in a way that trying again will not fix (a bad token): the
        adapter then gives up, with ``failure`` saying why. Anything else is a
        drop, logged, and followed by the backoff (reset by the subclass on a
        healthy connection) — a drop, a bad frame or a bug never ends the adapter.
        """
        from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

        while not self._stop.is_set():
            event, level = "connection_lost", logging.WARNING
            fields: dict[str, Any] = {}
            try:
                await connect_once()
                fields["error"] = "connection closed"
            except (GatewayError, InvalidURI) as exc:
                self.failure = str(exc)
                log_event(self.log, logging.ERROR, "adapter_failed", platform=self.name,
                          error=str(exc))
                return
            except Reconnect as exc:
                event, level = "reconnecting", logging.INFO
                fields = {"reason": str(exc), **exc.fields}
            except Exception as exc:
                if not isinstance(exc, OSError | ConnectionClosed | InvalidHandshake
                                  | TimeoutError | ValueError):
                    self.log.debug("%s connection failed unexpectedly", self.name,
                                   exc_info=True)
                fields["error"] = self.redact(f"{type(exc).__name__}: {exc}")
            finally:
                self._ws = None
                # Not ready until the platform accepts us again: waiters see the drop.
                self.ready.clear()
            if self._stop.is_set():
                return
            delay = backoff.next_delay()
            log_event(self.log, level, event, platform=self.name, **fields,
                      retry_in_s=round(delay, 2))
            if await sleep_or_stop(delay, self._stop):
                return
